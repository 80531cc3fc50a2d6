"""End to end through the rollout engine: the scripted oracle, and the tiny tokenizer's mock model."""

from __future__ import annotations

from typing import Any

from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ModelPolicy, ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.testing import MockLLMBackend


async def run(env: str, policy: Any, num_tasks: int, group_size: int = 1, **config: Any) -> list[Trajectory]:
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=Registry.load(),
        policy=policy,
        config=EngineConfig(max_live_episodes=8, **config),
        on_trajectory=out.append,
        env_kwargs={"split": "test"},
    )
    await engine.run(plan_episodes(env, num_tasks=num_tasks, group_size=group_size))
    return sorted(out, key=lambda t: (t.task_index, t.sample_index))


def test_registered() -> None:
    reg = Registry.load()
    assert {"webshop", "webshop-verl"} <= set(reg.envs)
    assert not [e for e in reg.errors if "webshop" in str(e)]


async def test_scripted_policy_through_the_engine(qwen_chat: ChatFormat) -> None:
    trajectories = await run("webshop", ScriptedPolicy(qwen_chat), num_tasks=20, group_size=2)
    assert len(trajectories) == 40
    assert all(t.status is Status.OK and t.terminated and not t.truncated for t in trajectories)
    assert sum(t.reward == 1.0 for t in trajectories) / len(trajectories) >= 0.99
    first = trajectories[0]
    assert first.steps[0].action.startswith("search[") and first.steps[-1].action == "click[Buy Now]"
    assert all(s.valid for s in first.steps)
    # a group shares its seed, so its members pass through equal states with equal anchors
    twin = trajectories[1]
    assert [s.anchor for s in first.steps] == [s.anchor for s in twin.steps]


async def test_scripted_policy_verl_format(qwen_chat: ChatFormat) -> None:
    trajectories = await run("webshop-verl", ScriptedPolicy(qwen_chat), num_tasks=6)
    assert all(t.status is Status.OK and t.reward == 10.0 for t in trajectories)
    # one token sequence per turn: the prompt is rebuilt with the history window each time
    assert len(trajectories[0].segments) >= len(trajectories[0].steps)


async def test_mock_model_invalid_actions(qwen_tokenizer: Any) -> None:
    replies = [
        "I am not sure what to do.",
        "click[a product that is not here]",
        "search[olive oil]",
        "click[Next >]",
        "click[< Prev]",
        "Search[olive oil]",
    ]
    backend = MockLLMBackend(qwen_tokenizer, replies)
    config = EngineConfig(max_turns=6)
    trajectories = await run("webshop", ModelPolicy(backend, config), num_tasks=1, max_turns=6)
    (traj,) = trajectories
    assert traj.status is Status.OK and traj.truncated and traj.reward == 0.0
    assert [s.valid for s in traj.steps] == [False, False, True, True, True, True]
    assert traj.steps[0].error is None and "error" in traj.steps[0].info
    assert traj.steps[0].observation == traj.steps[1].observation  # no-ops keep the page
    assert traj.steps[2].observation.split(" [SEP] ")[3] == "Page 1 (Total results: 50)"
    assert traj.steps[3].observation.split(" [SEP] ")[3] == "Page 2 (Total results: 50)"
    assert traj.steps[2].anchor == traj.steps[0].anchor  # both before-states are the start page
    assert len(backend.requests) == 6


async def test_tiny_model_runs_episodes_end_to_end() -> None:
    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.local.transformers_backend import TransformersBackend

    backend = TransformersBackend(ensure_tiny_model("qwen"), max_batch_size=4)
    try:
        config = EngineConfig(max_turns=3, max_tokens_per_turn=24)
        trajectories = await run(
            "webshop",
            ModelPolicy(backend, config),
            num_tasks=1,
            group_size=2,
            max_turns=3,
            max_tokens_per_turn=24,
        )
    finally:
        await backend.aclose()
    assert len(trajectories) == 2
    for traj in trajectories:
        assert traj.status is Status.OK, traj.status_reason
        assert 1 <= len(traj.steps) <= 3 and all(s.anchor for s in traj.steps)
        assert traj.terminated or traj.truncated
        # random weights: whatever it wrote was parsed, and a no-op left the page unchanged
        for step in traj.steps:
            assert step.valid or "error" in step.info
