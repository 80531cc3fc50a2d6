"""The real ALFWorld engine: the ``alfworld-real`` adapter, and parity of the built-in with it.

ALFWorld's downloaded games are not available here, so the built-in generator writes games in
ALFWorld's format (``export``) with the installed package's own PDDL domain and grammar, and the
real engine (alfworld's wrappers on TextWorld's PDDL environment) plays them. Needs the
``alfworld`` extra (``pip install 'toolgym[alfworld]'``); CI installs it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.required import need_module

textworld = need_module("textworld")

from textworld.envs import PddlEnv

from toolgym import Action, ActionKind
from toolgym.core.errors import ConfigError
from toolgym.core.parsing.base import EnvActionParser
from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.plugins.alfworld import oracle, text
from toolgym.plugins.alfworld.export import write_games
from toolgym.plugins.alfworld.generator import SPLITS, Instance, ItemSpec, generate
from toolgym.plugins.alfworld.real import RealAlfworldEnv
from toolgym.plugins.alfworld.tasks import TASK_TYPES, Goal

ALL = tuple(TASK_TYPES.values())
PLAIN = EnvActionParser()


def instances() -> list[Instance]:
    return [generate(split, seed, ALL) for split in SPLITS for seed in range(6 if split == "train" else 3)]


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("alfworld")
    out = {}
    for dialect in ("move", "put"):
        insts = instances()
        paths = write_games(root / dialect / "json_2.1.1", insts, dialect)  # type: ignore[arg-type]
        out[dialect] = {
            "root": root / dialect / "json_2.1.1",
            "by_path": dict(zip(map(str, paths), insts, strict=True)),
        }
    return out


def real_engine(path: str) -> Any:
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    env = AlfredInfos(
        AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])))
    )
    env.load(path)
    return env


def cmd(command: str) -> Action:
    return Action(command, ActionKind.COMMAND, command=command)


async def test_games_are_found_per_split_and_task_type(games: dict[str, Any]) -> None:
    root = games["move"]["root"]
    assert RealAlfworldEnv(data_path=str(root)).num_tasks == 6
    assert RealAlfworldEnv(data_path=str(root), split="valid_seen").num_tasks == 3
    assert RealAlfworldEnv(data_path=str(root), split="eval_out_of_distribution").num_tasks == 3
    heat = RealAlfworldEnv(data_path=str(root), task_types="heat")
    assert heat.num_tasks == 1 and "pick_heat_then_place_in_recep" in heat.games()[0]
    assert (
        RealAlfworldEnv(game_files=str(root / "train")).games()
        == RealAlfworldEnv(data_path=str(root)).games()
    )


async def test_missing_data_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="alfworld-download"):
        RealAlfworldEnv(data_path=str(tmp_path)).games()
    with pytest.raises(ConfigError, match="does not exist"):
        RealAlfworldEnv(game_files=str(tmp_path / "nope.tw-pddl")).games()


async def test_the_game_walk_keeps_other_threads_prints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ALFWorld's game walk prints; silencing it must not take what an in-process Python cell
    prints at the same moment (a process-wide ``redirect_stdout`` did, and emptied the cell)."""
    import asyncio
    import threading
    import time

    from alfworld.agents.environment import alfred_tw_env

    from toolgym.plugins.alfworld.real import collect_games
    from toolgym.sandboxes.inprocess import InProcessPythonSession

    cell_started = threading.Event()

    class ChattyWalk:
        def __init__(self, config: dict[str, Any], train_eval: str) -> None:
            cell_started.wait(5)
            for i in range(10):
                print("walking", i)
                time.sleep(0.01)
            self.game_files = ["b.tw-pddl", "a.tw-pddl"]

    monkeypatch.setattr(alfred_tw_env, "AlfredTWEnv", ChattyWalk)
    session = InProcessPythonSession()
    walk = asyncio.create_task(asyncio.to_thread(collect_games, tmp_path, "train", ["pick_and_place_simple"]))
    session.namespace["started"] = cell_started
    code = "import time\nstarted.set()\nfor i in range(10):\n    print('cell', i)\n    time.sleep(0.01)\n"
    cell = await session.execute(code)
    assert await walk == ["a.tw-pddl", "b.tw-pddl"]
    assert cell.stdout == "".join(f"cell {i}\n" for i in range(10))
    assert "walking" not in capsys.readouterr().out


@pytest.mark.parametrize("dialect", ["move", "put"])
async def test_real_engine_plays_the_builtin_tasks(games: dict[str, Any], dialect: str) -> None:
    root, by_path = games[dialect]["root"], games[dialect]["by_path"]
    env = RealAlfworldEnv(data_path=str(root), expert="none")
    for seed in range(env.num_tasks or 0):
        messages, info = await env.reset(seed=seed)
        inst = by_path[env.game]
        world = inst.world(dialect)
        assert messages[1]["content"] == text.intro(world.overview(), inst.goal.description)
        assert info["task_type"] == inst.goal.task_type and env.admissible == world.admissible_commands()
        assert ("help" in env.admissible) == (dialect == "move")
        rewards = []
        while (step := oracle.next_step(world, inst.goal)) is not None:
            feedback, _ = world.step(step[0])
            result = await env.step(PLAIN.parse(step[0].upper()))  # commands are lower-cased first
            assert result.valid and result.observation[0]["content"] == feedback
            rewards.append(result.reward)
        assert env.won and rewards[-1] == 1.0 and sum(rewards) == 1.0
        bad = await env.step(cmd("fly to the moon"))
        assert not bad.valid
        await env.close()


def _kitchen() -> Instance:
    recs = (
        ("cabinet", 1, 3),
        ("cabinet", 2, 5),
        ("countertop", 1, 7),
        ("desk", 1, 2),
        ("fridge", 1, 4),
        ("microwave", 1, 6),
        ("sinkbasin", 1, 8),
    )
    items = (
        ItemSpec("apple", 1, "countertop 1"),
        ItemSpec("mug", 2, "countertop 1"),
        ItemSpec("knife", 1, "countertop 1"),
        ItemSpec("mug", 1, "cabinet 1"),
        ItemSpec("desklamp", 1, "desk 1"),
        ItemSpec("keychain", 1, "desk 1"),
    )
    return Instance(
        "train", 0, 10, "kitchen", Goal(TASK_TYPES[4], "apple", "countertop"), recs, items, 1, "kitchen"
    )


SCRIPTS = [
    [
        "look",
        "inventory",
        "go to countertop 1",
        "go to countertop 1",
        "look",
        "examine countertop 1",
        "examine apple 1",
        "take apple 1 from countertop 1",
        "take mug 2 from countertop 1",
        "inventory",
        "examine apple 1",
        "put apple 1 in/on countertop 1",
        "move apple 1 to countertop 1",
        "take apple 1 from countertop 1",
        "heat apple 1 with microwave 1",
        "go to microwave 1",
        "move apple 1 to microwave 1",
        "heat apple 1 with microwave 1",
        "examine apple 1",
        "go to sinkbasin 1",
        "clean apple 1 with sinkbasin 1",
        "examine apple 1",
        "go to fridge 1",
        "cool apple 1 with fridge 1",
        "examine apple 1",
        "open fridge 1",
        "put apple 1 in/on fridge 1",
        "help",
    ],
    [
        "go to cabinet 1",
        "take mug 1 from cabinet 1",
        "open cabinet 1",
        "examine cabinet 1",
        "open cabinet 1",
        "close cabinet 1",
        "close cabinet 1",
        "examine cabinet 1",
        "use desklamp 1",
        "go to desk 1",
        "use desklamp 1",
        "use desklamp 1",
        "take desklamp 1 from desk 1",
        "take keychain 1 from desk 1",
        "go to fridge 1",
        "open fridge 1",
        "move keychain 1 to fridge 1",
        "go to countertop 1",
        "move keychain 1 to countertop 1",
        "examine mug 2",
        "take mug 2 from countertop 1",
        "examine mug 2",
        "move mug 2 to countertop 1",
        "take knife 1 from countertop 1",
        "slice apple 1 with knife 1",
        "move knife 1 to countertop 1",
        "put knife 1 in/on countertop 1",
        "take apple 1 from countertop 1",
        "examine apple 1",
        "go to microwave 1",
        "open microwave 1",
        "move apple 1 to microwave 1",
        "put apple 1 in/on microwave 1",
        "go to nowhere",
        "Go To Desk 1",
    ],
]


@pytest.mark.parametrize("dialect", ["move", "put"])
def test_every_command_reads_as_in_the_real_engine(tmp_path: Path, dialect: str) -> None:
    inst = _kitchen()
    [path] = write_games(tmp_path, [inst], dialect)  # type: ignore[arg-type]
    for script in SCRIPTS:
        real, world = real_engine(str(path)), inst.world(dialect)  # type: ignore[arg-type]
        state = real.reset()
        assert state.feedback == text.intro(world.overview(), inst.goal.description)
        for command in script:
            assert state["admissible_commands"] == world.admissible_commands(), command
            state, _score, _done = real.step(command)
            assert world.step(command)[0] == state.feedback, command


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["move", "put"])
def test_random_walks_match_the_real_engine(tmp_path: Path, dialect: str) -> None:
    """Oracle steps mixed with random admissible and inadmissible commands, on generated tasks."""
    insts = [generate(SPLITS[s % 3], 100 + s, ALL) for s in range(6)]
    paths = write_games(tmp_path, insts, dialect)  # type: ignore[arg-type]
    for inst, path in zip(insts, paths, strict=True):
        rng = random.Random(inst.key)
        real, world = real_engine(str(path)), inst.world(dialect)  # type: ignore[arg-type]
        state = real.reset()
        for _ in range(30):
            assert state["admissible_commands"] == world.admissible_commands(), inst.id
            plan = oracle.next_step(world, inst.goal)
            if plan is None:
                break
            roll = rng.random()
            if roll < 0.45:
                command = plan[0]
            elif roll < 0.85:
                command = rng.choice(world.admissible_commands())
            else:
                thing = rng.choice([*world.items, *world.receptacles])
                command = rng.choice(
                    [
                        f"examine {thing}",
                        f"take {thing} from {rng.choice(list(world.receptacles))}",
                        f"open {thing}",
                        f"go to {world.at}",
                        "look",
                        f"use {thing}",
                    ]
                )
            state, _score, _done = real.step(command)
            feedback, _ = world.step(command)
            assert (feedback, inst.goal.satisfied(world)) == (state.feedback, state["won"]), (
                inst.id,
                command,
            )


async def test_experts_give_scripted_actions(games: dict[str, Any]) -> None:
    root = games["move"]["root"]
    planner = RealAlfworldEnv(data_path=str(root), task_types="pick_two", expert="planner")
    for seed in range(1):
        await planner.reset(seed=seed)
        for _ in range(20):
            action = await planner.scripted_action()
            if action is None:
                break
            assert (await planner.step(PLAIN.parse(action))).valid
        assert planner.won
    await planner.close()
    handcoded = RealAlfworldEnv(data_path=str(root), task_types="pick", expert="handcoded", prompt="verl")
    messages, _ = await handcoded.reset(seed=0)
    action = await handcoded.scripted_action()
    assert action is not None and action.startswith("<think>") and "<action>" in action
    assert (handcoded.step_prompt() or [{}])[0]["content"] == messages[0]["content"]
    await handcoded.close()
    bare = RealAlfworldEnv(data_path=str(root), task_types="pick")
    await bare.reset(seed=0)
    with pytest.raises(ConfigError, match="expert=planner"):
        await bare.scripted_action()
    await bare.close()


async def test_alfworld_real_through_the_engine(games: dict[str, Any], qwen_chat: ChatFormat) -> None:
    out: list[Any] = []
    engine = RolloutEngine(
        registry=Registry.load(),
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_live_episodes=2),
        on_trajectory=out.append,
        env_kwargs={"data_path": str(games["move"]["root"]), "expert": "planner", "task_types": "look,heat"},
    )
    await engine.run(plan_episodes("alfworld-real", num_tasks=2, group_size=1))
    assert len(out) == 2 and all(t.reward == 1.0 and t.terminated for t in out), [
        t.status_reason for t in out
    ]
    assert all(s.valid for t in out for s in t.steps)
