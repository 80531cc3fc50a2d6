"""Rate limits for hosted APIs (token buckets on a fake clock, settling with reported usage) and
black-box collection from a chat endpoint, rate-limited, recorded as not token-faithful."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.helpers import dataset_registry
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.errors import ConfigError
from toolgym.core.llm.base import ChatBackend
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.policy import ChatPolicy, estimate_chat_tokens
from toolgym.core.types import ChatResult, Message, SamplingParams
from toolgym.core.util.ratelimit import RateLimiter
from toolgym.trajectories.store import iter_trajectories


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def _limiter(clock: FakeClock, **limits: float) -> RateLimiter:
    return RateLimiter(clock=clock.time, sleep=clock.sleep, **limits)


async def test_requests_per_second_bucket() -> None:
    clock = FakeClock()
    lim = _limiter(clock, requests_per_s=2)
    for _ in range(6):
        await lim.acquire()
    assert clock.now == pytest.approx(2.0)  # a burst of 2, then one every 0.5 s
    clock.now += 10  # idle time refills only up to the burst size
    for _ in range(3):
        await lim.acquire()
    assert clock.now == pytest.approx(12.5)
    assert lim.requests == 9 and lim.waited_s == pytest.approx(2.5)


async def test_tokens_per_minute_bucket_settles_with_usage() -> None:
    clock = FakeClock()
    lim = _limiter(clock, tokens_per_min=600)  # 10 tokens/s, a minute's burst
    assert await lim.acquire(600) == 600 and clock.now == 0
    lim.settle(600, 300)  # the call used half its estimate: the rest comes back
    await lim.acquire(300)
    assert clock.now == 0
    await lim.acquire(100)  # the bucket is empty: 100 tokens take 10 s
    assert clock.now == pytest.approx(10.0)
    lim.settle(100, 400)  # used more than estimated: a debt of 300 tokens
    await lim.acquire(0)
    assert clock.now == pytest.approx(40.0)
    assert await lim.acquire(10_000) == 600  # an estimate above the bucket is charged at its size
    assert lim.tokens == 600 - 300 + 300 + 100 + 300 + 600


async def test_concurrent_callers_share_the_limit() -> None:
    clock = FakeClock()
    lim = _limiter(clock, requests_per_s=5, tokens_per_min=60_000)
    await asyncio.gather(*(lim.acquire(100) for _ in range(25)))
    assert clock.now == pytest.approx(4.0)  # 5 at once, then 20 more at 5/s
    with pytest.raises(ConfigError, match="needs requests_per_s or tokens_per_min"):
        RateLimiter()
    with pytest.raises(ConfigError, match="must be positive"):
        RateLimiter(requests_per_s=0)


class CountingChat(ChatBackend):
    name = "counting-chat"

    def __init__(self) -> None:
        self.calls = 0

    async def chat(
        self, messages: Sequence[Message], *, tools: Sequence[dict[str, Any]] | None, sampling: SamplingParams
    ) -> ChatResult:
        self.calls += 1
        return ChatResult(text="hi", usage={"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35})


async def test_chat_policy_charges_estimates_and_settles_reported_usage() -> None:
    backend = CountingChat()
    policy = ChatPolicy(backend, EngineConfig())
    clock = FakeClock()
    policy.limiter = _limiter(clock, tokens_per_min=6_000, requests_per_s=100)
    messages = [{"role": "user", "content": "x" * 400}]
    assert estimate_chat_tokens(messages, None) == 103
    for _ in range(4):
        result, attempts = await policy.chat(messages, None, SamplingParams(max_new_tokens=50))
        assert attempts == 1 and result.text == "hi"
    assert (
        backend.calls == 4 and policy.limiter.tokens == 4 * 35
    )  # estimates replaced by the usage the API reported


def test_black_box_chat_collection_is_rate_limited_and_not_token_faithful(tmp_path: Path) -> None:
    from toolgym.core.llm.serving.server import serve

    with serve("tiny") as server:
        opts = CollectOptions(
            env="counter",
            out=tmp_path,
            model=server.url,
            backend="openai-chat",
            episodes=3,
            sandbox_backend="none",
            engine=EngineConfig(max_turns=2, max_tokens_per_turn=6, sampling={"temperature": 1.0}),
            max_requests_per_s=2,
            max_tokens_per_min=1_000_000,
        )
        started = time.perf_counter()
        result = asyncio.run(collect(opts, registry=dataset_registry()))
        elapsed = time.perf_counter() - started
    trajs = list(iter_trajectories(tmp_path))
    assert result.written == 3 and len(trajs) == 3
    calls = sum(len(t.steps) for t in trajs)
    for t in trajs:
        assert not t.token_faithful and not t.trainable and t.segments == []
        assert t.messages[0]["role"] == "user" and [m["role"] for m in t.messages[1:3]] == [
            "assistant",
            "user",
        ]
        assert all(s.llm is not None and s.llm.attempts == 1 for s in t.steps)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["policy"] == "chat" and manifest["token_faithful"] is False
    assert manifest["rate_limits"]["requests_per_s"] == 2
    stats = manifest["rate_limit_stats"]
    assert stats["requests"] == calls and stats["tokens"] > 0  # every chat call went through the limiter
    assert elapsed >= (calls - 2) / 2 * 0.9  # beyond a burst of 2, at most 2 requests per second


async def test_rate_limit_paces_model_calls_of_a_collection(tmp_path: Path) -> None:
    opts = CollectOptions(
        env="counter",
        out=tmp_path,
        model="sim:0.0",
        backend_options={"text": "count[1]"},
        env_kwargs={"target": 1},
        episodes=20,
        sandbox_backend="none",
        max_requests_per_s=10,
    )
    started = time.perf_counter()
    result = await collect(opts, registry=dataset_registry())
    elapsed = time.perf_counter() - started
    stats = json.loads((tmp_path / "manifest.json").read_text())["rate_limit_stats"]
    assert result.written == 20 and stats["requests"] == 20  # one model call per episode
    assert 0.95 <= elapsed < 60  # a burst of 10, then 10 more at 10/s: the last starts ≥ 1 s after the first
    assert stats["waited_s"] >= 0.5  # most of that second was spent waiting for the limiter
