"""``ScriptedPolicy``'s latency and noise: what the SWE rollout and anchor benchmarks rely on."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from toolgym.core.env.contract import Env
from toolgym.core.errors import ConfigError
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat


class Planned(Env):
    """A solver that walks a plan: each call to ``scripted_action`` moves it on by one turn."""

    def __init__(self) -> None:
        self.turn = 0

    async def reset(self, *, seed: int, options: Any = None) -> Any:
        return [], {}

    async def step(self, action: Any) -> Any:
        raise NotImplementedError

    async def scripted_action(self) -> str | None:
        self.turn += 1
        return f"plan {self.turn}"


async def noisy(env: Env, rng: random.Random) -> str | None:
    return "noise"


def texts(policy: ScriptedPolicy, env: Env, n: int, chat: ChatFormat) -> list[str]:
    async def go() -> list[str]:
        return [
            chat.tokenizer.decode((await policy.act(env)).output_ids, skip_special_tokens=True)
            for _ in range(n)
        ]

    return asyncio.run(go())


def test_noise_replaces_turns_without_moving_the_plan_on(qwen_chat: ChatFormat) -> None:
    env = Planned()
    assert texts(ScriptedPolicy(qwen_chat, noise=1.0, noise_action=noisy), env, 3, qwen_chat) == ["noise"] * 3
    assert env.turn == 0
    mixed = texts(ScriptedPolicy(qwen_chat, noise=0.5, noise_action=noisy, seed=3), env, 40, qwen_chat)
    plan = [t for t in mixed if t != "noise"]
    assert plan == [f"plan {i}" for i in range(1, len(plan) + 1)] and 5 < len(plan) < 35
    assert texts(ScriptedPolicy(qwen_chat), Planned(), 2, qwen_chat) == ["plan 1", "plan 2"]


def test_latency_is_waited_per_turn(qwen_chat: ChatFormat) -> None:
    start = time.perf_counter()
    texts(ScriptedPolicy(qwen_chat, latency_s=0.1), Planned(), 3, qwen_chat)
    assert time.perf_counter() - start >= 0.3


def test_bad_settings_are_refused(qwen_chat: ChatFormat) -> None:
    with pytest.raises(ConfigError, match="between 0 and 1"):
        ScriptedPolicy(qwen_chat, noise=1.5, noise_action=noisy)
    with pytest.raises(ConfigError, match="needs a noise_action"):
        ScriptedPolicy(qwen_chat, noise=0.2)
    with pytest.raises(ConfigError, match="0 or more seconds"):
        ScriptedPolicy(qwen_chat, latency_s=-1)


def test_sim_model_replays_the_scripted_solver_on_request() -> None:
    from toolgym.collect.run import make_policy
    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.policy import ModelPolicy

    policy = make_policy(
        "sim:0.25", backend=None, tokenizer=None, config=EngineConfig(), options={"replay": "scripted"}
    )
    assert isinstance(policy, ScriptedPolicy) and policy.latency_s == 0.25
    assert isinstance(
        make_policy("sim:0.25", backend=None, tokenizer=None, config=EngineConfig()), ModelPolicy
    )
    with pytest.raises(ConfigError, match="replays only the env's scripted solver"):
        make_policy("sim", backend=None, tokenizer=None, config=EngineConfig(), options={"replay": "model"})
