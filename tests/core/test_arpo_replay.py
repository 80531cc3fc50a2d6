"""ARPO forks replay their parent's tool calls into a fresh environment; where a tool is not
deterministic the replay gives other results than the recorded ones the fork's tokens carry.
Such forks are refused: no trajectory, the parent goes on, the budget slot goes
back to the group, ``stats.forks_refused`` counts them. A deterministic tool's forks proceed.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from typing import Any

import pytest

from toolgym import (
    EngineConfig,
    EnvSpec,
    RolloutEngine,
    Task,
    ToolTaskEnv,
    Trajectory,
    hookimpl,
    plan_episodes,
    tool,
)
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.registry import Registry
from toolgym.core.rollout.arpo import ArpoConfig
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.trajectories.verify import check_trajectory

_counter = itertools.count()


@tool
async def fixed(step: int) -> str:
    """Deterministic: the same result for the same call."""
    return f"RESULT {step * 10}"


@tool
async def dice(step: int) -> str:
    """Not deterministic: a fresh random number every call."""
    return f"RESULT {random.random()}"


@tool
async def clock(step: int) -> str:
    """Not deterministic: the time (and a call counter, so that two calls never agree)."""
    return f"RESULT {time.time_ns()}-{next(_counter)}"


def _env(t: Any) -> type[ToolTaskEnv]:
    class Env(ToolTaskEnv):
        tools = [t]
        tasks = [Task("t", f"Call {t.name} twice, then answer done.", "done")]

    return Env


class Plugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec(f"replay-{t.name}", _env(t)) for t in (fixed, dice, clock)]


def _responder(name: str) -> Any:
    def respond(prompt: str, _i: int) -> str:
        n = prompt.count("RESULT")
        if n < 2:
            return (
                '<tool_call>{"name": "' + name + '", "arguments": {"step": ' + str(n + 1) + "}}</tool_call>"
            )
        return "done"

    return respond


def _flat(prompt: str, pos: int) -> list[tuple[int, float]]:
    if "RESULT" in prompt:
        return [(i, math.log(1 / 20)) for i in range(20)]
    return [(0, 0.0)] + [(i, -50.0) for i in range(1, 20)]


def _run(tokenizer: Any, tool_name: str, *, fill: bool) -> tuple[list[Trajectory], RolloutEngine]:
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("replay-test", Plugin())])
    cfg = EngineConfig(
        max_turns=6, arpo=ArpoConfig(enabled=True, budget=6, initial=2, tau=1.0, beta=0.0, fill_budget=fill)
    )
    out: list[Trajectory] = []
    backend = MockLLMBackend(tokenizer, _responder(tool_name), top_logprobs=_flat)
    engine = RolloutEngine(
        registry=registry, policy=ModelPolicy(backend, cfg), config=cfg, on_trajectory=out.append
    )
    asyncio.run(engine.run(plan_episodes(f"replay-{tool_name}", num_tasks=1, group_size=2)))
    return out, engine


def test_a_deterministic_tools_forks_proceed(qwen_tokenizer: Any) -> None:
    out, engine = _run(qwen_tokenizer, "fixed", fill=False)
    forks = [t for t in out if t.parent_id is not None]
    assert forks and engine.stats.forks_refused == 0
    by_id = {t.trajectory_id: t for t in out}
    for f in forks:
        parent = by_id[f.parent_id]  # type: ignore[index]
        assert (
            f.sequence_ids(0)[: f.branch_point] == parent.sequence_ids(0)[: f.branch_point]
            and check_trajectory(f) == []
        )
        assert [s.observation for s in f.steps[:1]] == [s.observation for s in parent.steps[:1]]


@pytest.mark.parametrize("tool_name", ["dice", "clock"])
def test_forks_of_a_tool_that_is_not_deterministic_are_refused(qwen_tokenizer: Any, tool_name: str) -> None:
    out, engine = _run(qwen_tokenizer, tool_name, fill=False)
    assert [t.parent_id for t in out] == [None, None], (
        "no fork whose context disagrees with its sandbox state"
    )
    assert all(t.status.value == "ok" and t.reward == 1.0 and check_trajectory(t) == [] for t in out), (
        "the parents went on"
    )
    stats = engine.stats
    assert stats.forks_refused >= 2 and stats.done == stats.total == 2 and stats.failed == 0
    assert "replaying step 0 gave another observation than the parent's" in (stats.fork_refused_reason or "")
    assert "not deterministic" in (stats.fork_refused_reason or "")


def test_refused_forks_give_their_slots_back_to_the_group(qwen_tokenizer: Any) -> None:
    out, engine = _run(qwen_tokenizer, "dice", fill=True)
    assert len(out) == 6 and all(t.parent_id is None for t in out), "filled with fresh rollouts instead"
    assert sorted(t.sample_index for t in out) == sorted({t.sample_index for t in out}), "no index reused"
    assert engine.stats.forks_refused >= 1 and engine.stats.done == engine.stats.total == 6
