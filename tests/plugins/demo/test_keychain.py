"""The demo's ``keychain`` task: scripted solver, splits, anchors, rewards and errors."""

from __future__ import annotations

import pytest

from toolgym.core.errors import ConfigError
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import Action, ActionKind, ToolCall
from toolgym.plugins.demo.keychain import (
    KEYS,
    VALUES,
    KeychainEnv,
    answer_text,
    call_text,
    make_chain,
    split_of,
)


def test_registered_through_the_plugin_hook() -> None:
    spec = get_registry().env("keychain")
    assert isinstance(spec.make(), KeychainEnv)


@pytest.mark.parametrize("split", ["train", "test"])
async def test_scripted_solver_solves_every_task(split: str, qwen_chat: ChatFormat) -> None:
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=8),
        env_kwargs={"split": split, "max_hops": 4},
    )
    got = []
    engine.on_trajectory = got.append
    await engine.run(plan_episodes("keychain", num_tasks=40, group_size=1, seed=11))
    assert len(got) == 40
    assert all(t.reward == 1.0 and t.terminated and t.status.value == "ok" for t in got)
    assert {len(t.steps) for t in got} == {2, 3, 4, 5}  # 1..4 links, then the answer


def test_splits_are_disjoint_and_deterministic() -> None:
    train = {make_chain(s, "train").visible for s in range(600)}
    test = {make_chain(s, "test").visible for s in range(600)}
    assert not train & test
    assert all(split_of(v) == "train" for v in train) and all(split_of(v) == "test" for v in test)
    assert make_chain(5, "test") == make_chain(5, "test")
    assert 0.1 < len(test) / (len(test) + len(train)) < 0.9


def test_chain_shape() -> None:
    chain = make_chain(3, "train", min_hops=2, max_hops=2)
    assert chain.hops == 2 and set(chain.table) == set(KEYS) and chain.value in VALUES
    assert chain.table[chain.keys[0]] == f"next:{chain.keys[1]}"
    assert chain.table[chain.keys[1]] == f"value:{chain.value}"
    with pytest.raises(ConfigError, match="split"):
        make_chain(0, "dev")
    with pytest.raises(ConfigError, match="min_hops"):
        KeychainEnv(min_hops=3, max_hops=2)


def _call(key: str) -> Action:
    return Action(call_text(key), ActionKind.TOOL_CALLS, tool_calls=[ToolCall("get", {"key": key})])


async def test_anchor_is_the_tool_state() -> None:
    a, b = KeychainEnv(), KeychainEnv()
    await a.reset(seed=4)
    await b.reset(seed=4)
    start = a.anchor()
    assert start == b.anchor()  # same task, nothing called: one GiGPO step group
    first = a.chain.keys[0]  # type: ignore[union-attr]
    wrong = next(k for k in KEYS if k != first)
    await a.step(_call(first))
    await b.step(_call(wrong))
    assert a.anchor() != b.anchor()
    c = KeychainEnv()
    await c.reset(seed=4)
    await c.step(_call(first))
    assert c.anchor() == a.anchor()
    other = KeychainEnv()
    await other.reset(seed=5)
    assert other.anchor() != start  # another task


async def test_rewards_and_invalid_calls() -> None:
    env = KeychainEnv(min_hops=1, max_hops=1)
    await env.reset(seed=0)
    chain = env.chain
    assert chain is not None
    result = await env.step(_call(chain.start))
    assert result.observation[0]["content"] == f"value:{chain.value}" and result.valid
    bad = await env.step(_call("zebra"))
    assert not bad.valid and "no key 'zebra'" in bad.observation[0]["content"]
    wrong = next(v for v in VALUES if v != chain.value)
    assert (await env.step(Action(answer_text(wrong), ActionKind.ANSWER, answer=wrong))).reward == 0.0
    assert (
        await env.step(Action(answer_text(chain.value), ActionKind.ANSWER, answer=chain.value))
    ).reward == 1.0
