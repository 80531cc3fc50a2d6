"""End to end through the rollout engine: scripted oracle, a garbage-emitting mock model, the tiny model."""

from __future__ import annotations

import random
from typing import Any

from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ModelPolicy, ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.testing import MockLLMBackend
from toolgym.trajectories.verify import check_trajectory


async def run(
    env: str, policy: Any, num_tasks: int, group_size: int = 1, env_kwargs: dict | None = None, **config: Any
) -> list[Trajectory]:
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=Registry.load(),
        policy=policy,
        config=EngineConfig(max_live_episodes=8, **config),
        on_trajectory=out.append,
        env_kwargs=env_kwargs,
    )
    await engine.run(plan_episodes(env, num_tasks=num_tasks, group_size=group_size))
    return sorted(out, key=lambda t: (t.task_index, t.sample_index))


def test_registered() -> None:
    reg = Registry.load()
    assert {"alfworld", "alfworld-verl", "alfworld-real"} <= set(reg.envs)
    assert not [e for e in reg.errors if "alfworld" in str(e)]
    assert reg.env("alfworld-verl").make().parser == "think_action"


async def test_scripted_policy_through_the_engine(qwen_chat: ChatFormat) -> None:
    policy = ScriptedPolicy(qwen_chat)
    trajectories = await run("alfworld", policy, num_tasks=24, group_size=2)
    assert len(trajectories) == 48
    assert all(t.status is Status.OK and t.terminated and not t.truncated for t in trajectories), [
        t.status_reason for t in trajectories
    ]
    assert sum(t.reward == 1.0 for t in trajectories) / len(trajectories) >= 0.99
    types = {t.metadata["env_info"]["task_type"] for t in trajectories}
    assert len(types) == 6, "seeds cycle through the six task types"
    first, twin = trajectories[0], trajectories[1]
    assert all(s.valid for s in first.steps) and first.steps[-1].step_reward == 1.0
    assert [s.anchor for s in first.steps] == [s.anchor for s in twin.steps], (
        "a group passes through equal states"
    )
    assert len({s.anchor for s in first.steps}) == len(first.steps)
    assert first.steps[0].observation.startswith("You arrive at ")
    for t in trajectories[:6]:
        assert check_trajectory(t) == []


async def test_scripted_policy_verl_format(qwen_chat: ChatFormat) -> None:
    policy = ScriptedPolicy(qwen_chat)
    trajectories = await run(
        "alfworld-verl", policy, num_tasks=12, env_kwargs={"split": "eval_out_of_distribution"}
    )
    assert all(t.status is Status.OK and t.reward == 1.0 for t in trajectories), [
        t.status_reason for t in trajectories
    ]
    traj = trajectories[0]
    assert traj.steps[0].action.startswith("<think>") and "<action>go to " in traj.steps[0].action
    # one token sequence per turn: the prompt is rebuilt with the history window each time
    assert len({s.sequence for s in traj.segments}) == len(traj.steps)
    assert check_trajectory(traj) == []


def _garbage(_prompt: str, index: int) -> str:
    rng = random.Random(index)
    junk = [
        "",
        "I think I should look around first.",
        "take everything",
        "<action>fly to the moon</action>",
        "go to",
        "}{][",
        "PUT apple IN microwave",
        "<think>hmm</think>",
    ]
    return rng.choice(junk) + " " + "".join(rng.choice("abcxyz ") for _ in range(rng.randint(0, 12)))


async def test_mock_model_emitting_garbage(qwen_tokenizer: Any) -> None:
    tokenizer = qwen_tokenizer
    backend = MockLLMBackend(tokenizer, _garbage)
    config = EngineConfig(max_turns=8)
    trajectories = await run("alfworld", ModelPolicy(backend, config), num_tasks=3, max_turns=8)
    for traj in trajectories:
        assert traj.status is Status.OK and traj.truncated and not traj.terminated and traj.reward == 0.0
        assert len(traj.steps) == 8 and not any(s.valid for s in traj.steps)
        assert all(s.observation == "Nothing happens." for s in traj.steps)
        assert len({s.anchor for s in traj.steps[1:]}) == 1, "every later state reads 'Nothing happens.'"
        assert check_trajectory(traj) == []
    verl = await run(
        "alfworld-verl", ModelPolicy(MockLLMBackend(tokenizer, _garbage), config), num_tasks=2, max_turns=5
    )
    for traj in verl:
        assert traj.status is Status.OK and traj.truncated and not any(s.valid for s in traj.steps)
        assert any(s.error for s in traj.steps), "parse errors are recorded on the step"


async def test_a_valid_mock_command_counts_as_valid(llama_tokenizer: Any) -> None:
    backend = MockLLMBackend(llama_tokenizer, ["inventory", "look", "help"])
    config = EngineConfig(max_turns=3)
    (traj,) = await run("alfworld", ModelPolicy(backend, config), num_tasks=1, max_turns=3)
    assert [s.valid for s in traj.steps] == [True, True, True]
    assert traj.steps[0].observation == "You are not carrying anything."
    assert traj.steps[1].observation.endswith("you see nothing.")


async def test_tiny_model_runs_episodes_end_to_end() -> None:
    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.local.transformers_backend import TransformersBackend

    backend = TransformersBackend(ensure_tiny_model("qwen"), max_batch_size=4)
    try:
        config = EngineConfig(max_turns=3, max_tokens_per_turn=16)
        trajectories = await run(
            "alfworld",
            ModelPolicy(backend, config),
            num_tasks=1,
            group_size=2,
            max_turns=3,
            max_tokens_per_turn=16,
        )
        verl = await run(
            "alfworld-verl", ModelPolicy(backend, config), num_tasks=1, max_turns=2, max_tokens_per_turn=16
        )
    finally:
        await backend.aclose()
    assert len(trajectories) == 2
    for traj in [*trajectories, *verl]:
        assert traj.status is Status.OK, traj.status_reason
        assert traj.steps and all(s.llm is not None and s.llm.completion_tokens > 0 for s in traj.steps)
        assert check_trajectory(traj) == []
