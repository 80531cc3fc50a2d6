"""Tool use and ARPO branching figures of a batch, and the local loop keeping ARPO's forks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.test_arpo import Plugin, _flat, _responder  # the two-call env ARPO forks on
from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.registry import Registry
from toolgym.core.rollout.arpo import ArpoConfig
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.training.local.loop import run_episodes
from toolgym.training.local.tool_use import shared_with_parent, tool_calls, tool_use_stats


async def _batch(tokenizer: Any, arpo: ArpoConfig, tasks: int = 2) -> tuple[list[Any], list[Any]]:
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("tool-use", Plugin())])
    cfg = EngineConfig(max_turns=6, arpo=arpo)
    engine = RolloutEngine(
        registry=registry,
        policy=ModelPolicy(MockLLMBackend(tokenizer, _responder, top_logprobs=_flat), cfg),
        config=cfg,
    )
    requests = plan_episodes("two-tools", num_tasks=tasks, group_size=arpo.initial if arpo.enabled else 4)
    seen: list[Any] = []
    return await run_episodes(engine, requests, seen.append), seen


async def test_the_loop_trains_on_forks_and_fills_not_only_the_requested_rollouts(
    qwen_tokenizer: Any,
) -> None:
    arpo = ArpoConfig(enabled=True, budget=4, initial=2, tau=1.0, beta=0.0)
    trajs, seen = await _batch(qwen_tokenizer, arpo)
    assert len(trajs) == len(seen) == 2 * 4  # every trajectory the engine made, forks included
    assert any(t.parent_id is not None for t in trajs)
    keys = [(t.task_index, t.sample_index) for t in trajs]
    assert keys == sorted(keys)  # grouped in request order, by sample index: not by finishing time


async def test_tool_use_figures_count_a_forks_shared_calls_once(qwen_tokenizer: Any) -> None:
    arpo = ArpoConfig(enabled=True, budget=4, initial=2, tau=1.0, beta=0.0)
    trajs, _ = await _batch(qwen_tokenizer, arpo)
    assert all(t.reward == 1.0 and tool_calls(t) == 2 for t in trajs)
    forks = [t for t in trajs if t.parent_id is not None]
    for fork in forks:  # a fork from the first tool result copied one call and made one of its own
        shared = [s for s in fork.steps if shared_with_parent(fork, s)]
        assert len(shared) >= 1 and tool_calls(fork, sampled_only=True) == 2 - len(shared)
    stats = tool_use_stats(trajs)
    assert stats["tool_calls_per_trajectory"] == 2.0 and stats["tool_calls_per_solved"] == 2.0
    assert stats["tool_calls_sampled_per_trajectory"] == pytest.approx(
        sum(tool_calls(t, sampled_only=True) for t in trajs) / len(trajs)
    )
    assert stats["tool_calls_sampled_per_trajectory"] < 2.0
    assert stats["arpo_fork_share"] == len(forks) / len(trajs) > 0
    assert stats["arpo_decisions"] >= 1 and 0 < stats["arpo_branch_rate"] <= 1


async def test_without_branching_there_are_no_arpo_figures(qwen_tokenizer: Any) -> None:
    trajs, _ = await _batch(qwen_tokenizer, ArpoConfig())
    stats = tool_use_stats(trajs)
    assert stats["tool_calls_sampled_per_trajectory"] == stats["tool_calls_per_trajectory"] == 2.0
    assert not any(k.startswith("arpo_") for k in stats)
    assert tool_use_stats([]) == {}
