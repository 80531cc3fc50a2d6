"""The GraphGPO configs of the local trainer: they load, differ from their GiGPO twins only in the
estimator, and their options are ones GraphGPO takes; the verl bridge refuses GraphGPO plainly."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from tests.required import need_module
from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import LLMCall, Segment, Step, Trajectory
from toolgym.training.advantages import compute_token_advantages
from toolgym.training.runner import build, load_config

PAPER_DEFAULTS = {
    "omega": 0.1,
    "goal_reward": 10.0,
    "step_weight": 1.0,
    "episode_weight": 1.0,
    "mode": "mean_std_norm",
}
TWINS = [
    ("alfworld_graphgpo", "alfworld_gigpo", "alfworld-verl"),
    ("webshop_graphgpo", "webshop_gigpo", "webshop-verl"),
]


@pytest.mark.parametrize(("name", "twin", "env"), TWINS)
def test_graphgpo_configs_differ_from_their_gigpo_twin_only_in_the_estimator(
    name: str, twin: str, env: str
) -> None:
    ours, theirs = copy.deepcopy(load_config(name, [])), copy.deepcopy(load_config(twin, []))
    assert ours["toolgym"].pop("advantage") == {"estimator": "graphgpo", "options": PAPER_DEFAULTS}
    assert theirs["toolgym"].pop("advantage")["estimator"] == "gigpo"
    if env == "alfworld-verl":  # graph nodes are world states there (see the attack test below)
        assert (
            ours["toolgym"]["env_kwargs"].pop("anchor") == "state"
            and "anchor" not in theirs["toolgym"]["env_kwargs"]
        )
    assert ours["verl"]["trainer"].pop("default_local_dir") == f"checkpoints/{name}_local"
    theirs["verl"]["trainer"].pop("default_local_dir")
    assert ours == theirs

    rl, run = build(load_config(name, []))
    twin_rl, twin_run = build(load_config(twin, []))
    assert (
        rl.env == twin_rl.env == env and rl.estimator == "graphgpo" and rl.estimator_options == PAPER_DEFAULTS
    )
    assert run["model"] == twin_run["model"] and run["out"] != twin_run["out"]
    assert (rl.group_size, rl.steps, rl.tasks_per_step, rl.engine, rl.ppo, rl.optim, rl.eval) == (
        twin_rl.group_size,
        twin_rl.steps,
        twin_rl.tasks_per_step,
        twin_rl.engine,
        twin_rl.ppo,
        twin_rl.optim,
        twin_rl.eval,
    )


def _episode(tid: str, anchors: str, won: bool) -> Trajectory:
    segments = [Segment(role="prompt", token_ids=[1], loss_mask=[0])]
    steps = []
    for i, anchor in enumerate(anchors):
        segments.append(Segment(role="assistant", token_ids=[5, 6], loss_mask=[1, 1]))
        steps.append(
            Step(
                index=i,
                action="x",
                anchor=anchor,
                info={"won": won},
                llm=LLMCall(prompt_len=0, segment=len(segments) - 1, completion_tokens=2),
            )
        )
    return Trajectory(
        trajectory_id=tid,
        group_id="g",
        task="demo",
        reward=10.0 if won else 0.0,
        segments=segments,
        steps=steps,
    )


@pytest.mark.parametrize("name", [n for n, _t, _e in TWINS])
def test_the_trainer_computes_advantages_with_the_shipped_options(name: str) -> None:
    rl, _ = build(load_config(name, []))
    trajs = [_episode("a", "sb", True), _episode("b", "sc", False)]
    tokens = compute_token_advantages(
        trajs, rl.estimator, **rl.estimator_options
    )  # as training/local/loop.py calls it
    assert all(np.all(np.isfinite(seq)) for per in tokens for seq in per)
    assert tokens[0][0][1] > 0 > tokens[1][0][1]  # s → b (one step from the goal) beats s → c (a dead end)


def _invalid_step_advantage(after_invalid: tuple[str, str]) -> float:
    """GraphGPO's step advantage of an invalid action in a failed episode, its sibling a valid step
    to a dead end. A successful episode went s → (invalid) → b → goal; the failed one t → (invalid)
    → c, and t → d. ``after_invalid`` names the node each invalid action leads to (in s, in t)."""
    from toolgym.training.advantages import graphgpo_advantages

    # rows: won s, after_s, b | failed t, after_t, c | failed t, d
    anchors = ["s", after_invalid[0], "b", "t", after_invalid[1], "c", "t", "d"]
    traj = [0, 0, 0, 1, 1, 1, 2, 2]
    index = [0, 1, 2, 0, 1, 2, 0, 1]
    won = [True] * 3 + [False] * 5
    valid = [False, True, True, False, True, True, True, True]
    adv = graphgpo_advantages(
        traj, ["g"] * 8, index, anchors, valid, won, [10.0] * 3 + [0.0] * 5, **PAPER_DEFAULTS
    )
    return float(adv.step[3])


def test_attack_invalid_actions_do_not_shortcut_to_the_goal_through_one_nothing_happens_node() -> None:
    """Attack: every inadmissible ALFWorld command answers "Nothing happens.". With observation
    anchors all the states that answer meet in one node; a successful episode that once acted
    invalidly links that node to the goal, and an invalid action anywhere then counts as a step
    towards it (the policy learned to loop: held-out 10.4 % → 5.2 % in 20 RL steps on an H100). With
    state anchors (what alfworld_graphgpo ships) an invalid action is a self-loop and gains nothing."""
    hub = _invalid_step_advantage(("nothing happens", "nothing happens"))
    self_loops = _invalid_step_advantage(("s", "t"))
    assert hub > 0, "the shared node puts the invalid step two steps from the goal"
    assert self_loops <= 0, "a self-loop gets no closer to the goal than its valid sibling"
    rl, _ = build(load_config("alfworld_graphgpo", []))
    assert rl.env_kwargs["anchor"] == "state"


async def test_alfworld_anchors_alias_invalid_steps_by_text_but_not_by_state() -> None:
    """The env side of the attack above: after inadmissible commands in two different states, text
    anchors are equal; state anchors are not, and each equals the anchor before the command."""
    from toolgym import Action, ActionKind
    from toolgym.plugins.alfworld.env import AlfworldEnv

    def cmd(text: str) -> Action:
        return Action(text, ActionKind.COMMAND, command=text)

    anchors = {}
    for mode in ("observation", "state"):
        env = AlfworldEnv(anchor=mode)
        await env.reset(seed=7)
        first = env.anchor()
        await env.step(cmd("jump on the ceiling"))
        in_first = env.anchor()
        await env.step(cmd(next(c for c in env.admissible if c.startswith("go to "))))
        second = env.anchor()
        result = await env.step(cmd("jump on the ceiling"))
        assert not result.valid
        anchors[mode] = (first, in_first, second, env.anchor())
    first, in_first, second, in_second = anchors["observation"]
    assert in_first == in_second and first != second, "one text node for two states"
    first, in_first, second, in_second = anchors["state"]
    assert (in_first, in_second) == (first, second) and first != second


def test_unknown_graphgpo_options_fail_in_one_line() -> None:
    with pytest.raises(ConfigError, match="graphgpo takes no option 'gamma'"):
        build(load_config("alfworld_graphgpo", ["toolgym.advantage.options.gamma=0.95"]))


def test_the_verl_bridge_refuses_graphgpo(tmp_path: Path) -> None:
    from toolgym.training.verl.advantage import row_advantages

    with pytest.raises(ConfigError, match="--trainer local"):
        row_advantages("graphgpo", [None], ["g"], np.ones((1, 2)))
    need_module("verl")
    need_module("transfer_queue")
    from toolgym.training.verl import compose

    with pytest.raises(ConfigError, match="local trainer only"):
        compose.compose_config(
            str(Path(compose.__file__).parents[1] / "local" / "configs" / "alfworld_graphgpo.yaml"),
            data_dir=tmp_path,
        )
    assert not any(tmp_path.iterdir())  # refused before any task file was written
    with pytest.raises(ConfigError, match="local trainer's only"):  # so is the episode-weighted loss
        compose.compose_config(
            str(Path(compose.__file__).parents[1] / "local" / "configs" / "alfworld_grpo.yaml"),
            ["verl.actor_rollout_ref.actor.loss_agg_mode=episode-mean-token-mean"],
            data_dir=tmp_path,
        )
    assert not any(tmp_path.iterdir())


def test_alfworld_graphgpo_trains_one_step_from_the_cli(tmp_path: Path) -> None:
    """The config end to end on the tiny model: episodes, GraphGPO advantages, one update, metrics."""
    import json

    from typer.testing import CliRunner

    from toolgym.cli import app

    out = tmp_path / "run"
    done = CliRunner().invoke(
        app,
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "alfworld_graphgpo",
            "verl.actor_rollout_ref.model.path=tiny",
            "verl.data.train_batch_size=2",
            "toolgym.group_size=2",
            "toolgym.val.num_tasks=2",
            "toolgym.engine.max_turns=3",
            "toolgym.env_kwargs.max_steps=3",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.trainer.total_training_steps=1",
            f"verl.trainer.default_local_dir={out}",
        ],
    )
    assert done.exit_code == 0, done.output
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1] and records[1]["trainable"] == 4
    assert json.loads((out / "run.json").read_text())["rl"]["estimator"] == "graphgpo"
