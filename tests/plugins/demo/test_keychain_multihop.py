"""Multi-hop keychain (``min_hops=2``, the ARPO-vs-GRPO task): its reward cannot be had without two or
more tool calls. Each attack plays held-out tasks through the engine (parser, tools, reward) and
sees only what a model would: the question and the tool's answers."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from toolgym.core.env.contract import Env
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Trajectory
from toolgym.plugins.demo.keychain import KEYS, VALUES, answer_text, call_text, make_chain

MULTIHOP = {"min_hops": 2, "max_hops": 3}
TASKS = 300
CHANCE = 0.1
"""An attack must stay under this success rate: a blind guess of one of the 30 values scores about 3 %."""

Attack = Callable[[str, list[str], random.Random], str]
"""(question, the tool's answers so far, rng) → the turn's text."""


def _seen(env: Env) -> tuple[str, list[str]]:
    """What the model has seen: the question and each tool answer, in order."""
    task = env.task  # type: ignore[attr-defined]
    # each event is "get:{'key': 'fox'}:next:owl": the call, then what the tool answered
    outputs = [":".join(event.rsplit(":", 2)[-2:]) for event in env._history]  # type: ignore[attr-defined]
    return task.question, outputs


async def _play(qwen_chat: ChatFormat, attack: Attack, split: str = "test") -> list[Trajectory]:
    async def act(env: Env, rng: random.Random) -> str:
        question, outputs = _seen(env)
        return attack(question, outputs, rng)

    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(qwen_chat, noise=1.0, noise_action=act, seed=0),
        config=EngineConfig(max_turns=5),
        env_kwargs={**MULTIHOP, "split": split},
    )
    got: list[Trajectory] = []
    engine.on_trajectory = got.append
    await engine.run(plan_episodes("keychain", num_tasks=TASKS, group_size=1, seed=7_000_000))
    assert len(got) == TASKS and all(t.status.value == "ok" for t in got)
    return got


def _success(trajs: list[Trajectory]) -> float:
    return sum(t.reward >= 1.0 for t in trajs) / len(trajs)


def _calls(traj: Trajectory) -> int:
    return sum(len(s.tool_calls) for s in traj.steps)


def test_no_single_lookup_reaches_the_value() -> None:
    for seed in range(2000):
        for split in ("train", "test"):
            chain = make_chain(seed, split, **MULTIHOP)
            assert chain.hops >= 2
            assert chain.table[chain.start].startswith("next:")  # the question's key never answers
            assert chain.value not in f"start:{chain.start}"
    assert not set(KEYS) & set(VALUES)  # a key copied into the answer is never a value


async def test_the_solver_needs_a_call_per_link(qwen_chat: ChatFormat) -> None:
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=5),
        env_kwargs={**MULTIHOP, "split": "test"},
    )
    got: list[Trajectory] = []
    engine.on_trajectory = got.append
    await engine.run(plan_episodes("keychain", num_tasks=100, group_size=1, seed=7_000_000))
    assert _success(got) == 1.0
    assert all(_calls(t) == t.metadata["env_info"]["hops"] >= 2 for t in got)


def _echo(question: str, outputs: list[str], rng: random.Random) -> str:
    return answer_text(question)


def _echo_key(question: str, outputs: list[str], rng: random.Random) -> str:
    return answer_text(question.partition(":")[2])


def _every_value(question: str, outputs: list[str], rng: random.Random) -> str:
    return answer_text(" ".join(VALUES))


def _one_call_then_copy(question: str, outputs: list[str], rng: random.Random) -> str:
    if not outputs:
        return call_text(question.partition(":")[2])
    return answer_text(outputs[-1].partition(":")[2])


def _one_call_then_guess(question: str, outputs: list[str], rng: random.Random) -> str:
    if not outputs:
        return call_text(question.partition(":")[2])
    return answer_text(rng.choice(VALUES))


def _one_other_key(question: str, outputs: list[str], rng: random.Random) -> str:
    """Skip the chain: one lookup of another key than the start (it may be the chain's last), then
    answer the value it gave, else a guess."""
    if not outputs:
        return call_text(rng.choice([k for k in KEYS if k != question.partition(":")[2]]))
    said = outputs[-1].partition(":")
    return answer_text(said[2] if said[0] == "value" else rng.choice(VALUES))


@pytest.mark.parametrize(
    "attack",
    [_echo, _echo_key, _every_value, _one_call_then_copy, _one_call_then_guess, _one_other_key],
    ids=lambda f: f.__name__.strip("_"),
)
async def test_shortcuts_score_no_better_than_chance(qwen_chat: ChatFormat, attack: Attack) -> None:
    trajs = await _play(qwen_chat, attack)
    assert _success(trajs) < CHANCE
    if attack in (_echo, _echo_key, _every_value, _one_call_then_copy):
        assert _success(trajs) == 0.0


def test_no_fixed_answer_beats_chance() -> None:
    counts = Counter(make_chain(7_000_000 + i, "test", **MULTIHOP).value for i in range(TASKS))
    assert max(counts.values()) / TASKS < CHANCE


def test_memorising_the_training_split_does_not_transfer() -> None:
    """A guesser that learnt each start key's most frequent value on 3,000 training tasks."""
    seen: dict[str, Counter[str]] = {}
    for seed in range(3000):
        chain = make_chain(10_000 + seed, "train", **MULTIHOP)
        seen.setdefault(chain.start, Counter())[chain.value] += 1
    test = [make_chain(7_000_000 + i, "test", **MULTIHOP) for i in range(TASKS)]
    hits = sum(seen.get(c.start, Counter({VALUES[0]: 1})).most_common(1)[0][0] == c.value for c in test)
    assert hits / TASKS < CHANCE
