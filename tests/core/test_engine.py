"""The rollout engine: end to end, retries, timeouts, budgets, groups, errors, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.core.helpers import CounterEnv, CountingBackend, test_registry
from toolgym import EngineConfig, RolloutEngine, Status, Trajectory, plan_episodes
from toolgym.core.llm.base import ChatBackend
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.rollout.policy import ChatPolicy, ModelPolicy, ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import ChatResult
from toolgym.trajectories.verify import check_trajectory


def _engine(policy: Any, cfg: EngineConfig, **kw: Any) -> tuple[RolloutEngine, list[Trajectory]]:
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=test_registry(), policy=policy, config=cfg, on_trajectory=out.append, **kw
    )
    return engine, out


def _counting_responder(prompt: str, _i: int) -> str:
    n = prompt.count("Now at")
    return f"count[{n + 1}]"


async def test_math_python_scripted_end_to_end(qwen_chat: ChatFormat) -> None:
    cfg = EngineConfig(max_turns=4)
    engine, out = _engine(ScriptedPolicy(qwen_chat), cfg)
    stats = await engine.run(plan_episodes("math-python", num_tasks=4, group_size=2))
    assert stats.done == 8 and stats.failed == 0
    assert all(t.reward == 1.0 and t.terminated and t.status is Status.OK for t in out), [
        t.status_reason for t in out
    ]
    for t in out:
        assert [s.action_kind for s in t.steps] == ["tool_calls", "answer"]
        assert t.steps[0].tool_calls[0].name == "python" and not t.steps[0].tool_calls[0].error
        assert check_trajectory(t) == []
    groups: dict[str, list[Trajectory]] = {}
    for t in out:
        groups.setdefault(t.group_id, []).append(t)
    assert len(groups) == 4 and all(len(g) == 2 and len({t.seed for t in g}) == 1 for g in groups.values())


async def test_model_policy_multi_turn_and_verify(qwen_tokenizer: Any) -> None:
    backend = MockLLMBackend(qwen_tokenizer, _counting_responder)
    cfg = EngineConfig(max_turns=5)
    engine, out = _engine(ModelPolicy(backend, cfg), cfg)
    await engine.run(plan_episodes("counter", num_tasks=3, group_size=1))
    assert [t.reward for t in out] == [1.0, 1.0, 1.0]
    t = out[0]
    assert len(t.steps) == 3 and all(s.valid for s in t.steps)
    assert [s.anchor for s in t.steps] == ["n=0", "n=1", "n=2"]
    assert check_trajectory(t) == []
    assert t.metadata["policy"] == "model" and t.token_faithful
    # each request the backend saw is the stored prefix before its sampled ids
    seq = t.sequence_ids(0)
    for step in t.steps:
        assert step.llm is not None
        assert seq[: step.llm.prompt_len][-3:] == [seq[step.llm.prompt_len - 3 + i] for i in range(3)]


async def test_transient_errors_are_retried(qwen_tokenizer: Any) -> None:
    backend = MockLLMBackend(qwen_tokenizer, _counting_responder, fail_first=2)
    cfg = EngineConfig(max_turns=5, llm_retries=3, retry_backoff_s=0.001)
    engine, out = _engine(ModelPolicy(backend, cfg), cfg)
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    assert out[0].status is Status.OK and out[0].steps[0].llm.attempts == 3  # type: ignore[union-attr]


async def test_persistent_failure_is_recorded_and_run_goes_on(qwen_tokenizer: Any) -> None:
    backend = MockLLMBackend(qwen_tokenizer, _counting_responder, fail_first=3)
    cfg = EngineConfig(max_turns=5, llm_retries=1, retry_backoff_s=0.001, max_live_episodes=1)
    engine, out = _engine(ModelPolicy(backend, cfg), cfg)
    stats = await engine.run(plan_episodes("counter", num_tasks=3, group_size=1))
    statuses = [t.status for t in out]
    assert statuses.count(Status.ERROR) == 1 and stats.failed == 1 and stats.done == 3
    failed = next(t for t in out if t.status is Status.ERROR)
    assert "failed after 2 attempt(s)" in (failed.status_reason or "")


async def test_llm_and_episode_timeouts(qwen_tokenizer: Any) -> None:
    slow = MockLLMBackend(qwen_tokenizer, _counting_responder, delay_s=0.5)
    cfg = EngineConfig(llm_timeout_s=0.05, llm_retries=0)
    engine, out = _engine(ModelPolicy(slow, cfg), cfg)
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    assert out[0].status is Status.ERROR and "timed out after 0.05s" in (out[0].status_reason or "")

    cfg2 = EngineConfig(episode_timeout_s=0.2)
    engine2, out2 = _engine(
        ModelPolicy(MockLLMBackend(qwen_tokenizer, _counting_responder, delay_s=0.1), cfg2),
        cfg2,
        env_kwargs={"target": 50},
    )
    await engine2.run(plan_episodes("counter", num_tasks=1, group_size=1))
    assert out2[0].status is Status.ERROR and "episode timed out" in (out2[0].status_reason or "")
    assert len(out2[0].steps) >= 1  # the partial episode is kept for inspection


async def test_budgets(qwen_tokenizer: Any) -> None:
    cfg = EngineConfig(max_turns=2)
    engine, out = _engine(
        ModelPolicy(MockLLMBackend(qwen_tokenizer, _counting_responder), cfg), cfg, env_kwargs={"target": 10}
    )
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    assert out[0].truncated and not out[0].terminated and "turn limit (2)" in (out[0].truncation_reason or "")

    cfg = EngineConfig(max_tokens_per_turn=3)
    engine, out = _engine(
        ModelPolicy(MockLLMBackend(qwen_tokenizer, ["count[1] and a long ramble " * 5]), cfg), cfg
    )
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    assert all(
        s.llm and s.llm.completion_tokens <= 3 and s.llm.finish_reason == "length" for s in out[0].steps
    )

    cfg = EngineConfig(max_tokens_per_trajectory=120, max_tokens_per_turn=64)
    engine, out = _engine(
        ModelPolicy(MockLLMBackend(qwen_tokenizer, _counting_responder), cfg), cfg, env_kwargs={"target": 100}
    )
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    assert out[0].truncated and "context budget" in (out[0].truncation_reason or "")
    assert len(out[0].sequence_ids(0)) <= 120 + 16


async def test_invalid_actions_and_env_errors(qwen_tokenizer: Any) -> None:
    cfg = EngineConfig(max_turns=3)
    engine, out = _engine(
        ModelPolicy(MockLLMBackend(qwen_tokenizer, ["", "count[7]", "<action>x"]), cfg), cfg
    )
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    t = out[0]
    assert t.status is Status.OK and [s.valid for s in t.steps] == [False, False, False]
    assert t.steps[0].error == "empty action"

    engine, out = _engine(ScriptedPolicy(ChatFormat(qwen_tokenizer)), cfg, env_kwargs={"fail_at": 1})
    await engine.run(plan_episodes("counter", num_tasks=2, group_size=1))
    assert all(
        t.status is Status.ERROR and "RuntimeError: environment exploded" in (t.status_reason or "")
        for t in out
    )
    assert all(len(t.steps) == 1 for t in out)


async def test_concurrency_bound_and_sandbox_release(qwen_chat: ChatFormat) -> None:
    CounterEnv.live = CounterEnv.max_live = 0
    sandboxes = CountingBackend()
    cfg = EngineConfig(max_live_episodes=3, max_sandboxes=2)
    engine, out = _engine(
        ScriptedPolicy(qwen_chat),
        cfg,
        sandbox_backend=sandboxes,
        env_kwargs={"needs_sandbox": True, "step_delay": 0.01},
    )
    await engine.run(plan_episodes("counter", num_tasks=10, group_size=1))
    assert len(out) == 10 and CounterEnv.max_live <= 3
    assert sandboxes.max_live <= 2 and sandboxes.acquired == sandboxes.released == 10


async def test_cancellation_releases_everything(qwen_tokenizer: Any) -> None:
    CounterEnv.live = 0
    CounterEnv.closed = 0
    sandboxes = CountingBackend()
    cfg = EngineConfig(max_live_episodes=4)
    policy = ModelPolicy(MockLLMBackend(qwen_tokenizer, _counting_responder, delay_s=0.05), cfg)
    engine, _out = _engine(
        policy, cfg, sandbox_backend=sandboxes, env_kwargs={"needs_sandbox": True, "target": 50}
    )
    task = asyncio.create_task(engine.run(plan_episodes("counter", num_tasks=20, group_size=1)))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sandboxes.acquired >= 4 and sandboxes.released == sandboxes.acquired and sandboxes.live == 0
    assert CounterEnv.live == 0 and engine.stats.running == 0


class EchoChat(ChatBackend):
    name = "echo-chat"
    model_name = "echo"

    async def chat(self, messages: Any, *, tools: Any, sampling: Any) -> ChatResult:
        n = sum(1 for m in messages if "Now at" in str(m.get("content")))
        return ChatResult(text=f"count[{n + 1}]", usage={"completion_tokens": 3})


async def test_chat_policy_is_marked_not_token_faithful() -> None:
    cfg = EngineConfig(max_turns=5)
    engine, out = _engine(ChatPolicy(EchoChat(), cfg), cfg)
    await engine.run(plan_episodes("counter", num_tasks=1, group_size=1))
    t = out[0]
    assert t.reward == 1.0 and not t.token_faithful and not t.trainable and t.segments == []
    assert [m["role"] for m in t.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert check_trajectory(t) == []
