"""Mapping step and episode advantages onto tokens, aligned with the loss masks."""

from __future__ import annotations

import numpy as np
import pytest

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import LLMCall, Segment, Step, Trajectory
from toolgym.training.advantages import (
    compute_token_advantages,
    episode_token_advantages,
    gigpo_trajectory_advantages,
    step_table,
    token_advantages,
)


def seg(role: str, ids: list[int], sequence: int = 0) -> Segment:
    mask = [1 if role == "assistant" else 0] * len(ids)
    return Segment(sequence=sequence, role=role, token_ids=ids, loss_mask=mask)  # type: ignore[arg-type]


def step(
    i: int, segment: int, *, sequence: int = 0, anchor: str = "", reward: float = 0.0, valid: bool = True
) -> Step:
    llm = LLMCall(sequence=sequence, prompt_len=0, segment=segment, completion_tokens=1)
    return Step(index=i, action=f"a{i}", anchor=anchor, step_reward=reward, valid=valid, llm=llm)


def two_turns(
    tid: str = "t",
    group: str = "g",
    reward: float = 0.0,
    anchors: tuple[str, str] = ("s0", "s1"),
    rewards: tuple[float, float] = (0.0, 0.0),
) -> Trajectory:
    """prompt [1 2 3] · assistant [4 5] · tool [6] · assistant [7 8 9]; one step per assistant segment."""
    return Trajectory(
        trajectory_id=tid,
        group_id=group,
        task="demo",
        reward=reward,
        segments=[
            seg("prompt", [1, 2, 3]),
            seg("assistant", [4, 5]),
            seg("tool", [6]),
            seg("assistant", [7, 8, 9]),
        ],
        steps=[
            step(0, 1, anchor=anchors[0], reward=rewards[0]),
            step(1, 3, anchor=anchors[1], reward=rewards[1]),
        ],
    )


def test_step_advantages_land_on_their_assistant_segments() -> None:
    (seq0,) = token_advantages(two_turns(), [0.5, -1.0])
    assert seq0.dtype == np.float32
    np.testing.assert_allclose(seq0, [0, 0, 0, 0.5, 0.5, 0, -1, -1, -1])


def test_aligned_with_sequence_mask_everywhere() -> None:
    traj = two_turns()
    (seq0,) = token_advantages(traj, [0.5, -1.0])
    mask = np.array(traj.sequence_mask(0))
    assert seq0.size == len(traj.sequence_ids(0))
    assert np.all(seq0[mask == 0] == 0) and np.all(seq0[mask == 1] != 0)


def test_several_sequences() -> None:
    traj = Trajectory(
        trajectory_id="t",
        group_id="g",
        task="demo",
        segments=[
            seg("prompt", [1, 2]),
            seg("assistant", [3]),
            seg("prompt", [1, 9], sequence=1),
            seg("assistant", [4, 5], sequence=1),
        ],
        steps=[step(0, 1), step(1, 3, sequence=1)],
    )
    seq0, seq1 = token_advantages(traj, [2.0, 3.0])
    np.testing.assert_allclose(seq0, [0, 0, 2])
    np.testing.assert_allclose(seq1, [0, 0, 3, 3])


def test_unclaimed_tokens_and_chat_steps() -> None:
    traj = two_turns()
    traj.steps[1].llm = LLMCall(prompt_len=0, segment=-1, completion_tokens=3)  # chat backend: no token data
    (seq0,) = token_advantages(traj, [0.5, -1.0], unassigned=0.25)
    np.testing.assert_allclose(seq0, [0, 0, 0, 0.5, 0.5, 0, 0.25, 0.25, 0.25])


def test_episode_level_fills_every_assistant_token() -> None:
    (seq0,) = episode_token_advantages(two_turns(), -0.5)
    np.testing.assert_allclose(seq0, [0, 0, 0, -0.5, -0.5, 0, -0.5, -0.5, -0.5])


def test_broken_step_records_are_reported() -> None:
    with pytest.raises(ConfigError, match="2 steps but 3 step advantages"):
        token_advantages(two_turns(), [1.0, 2.0, 3.0])
    traj = two_turns()
    traj.steps[0].llm.segment = 0  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="'prompt' segment"):
        token_advantages(traj, [1.0, 2.0])
    traj = two_turns()
    traj.steps[0].llm.segment = 3  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="both claim segment 3"):
        token_advantages(traj, [1.0, 2.0])
    traj = two_turns()
    traj.steps[0].llm.segment = 9  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="there are 4"):
        token_advantages(traj, [1.0, 2.0])
    traj = two_turns()
    traj.steps[0].llm.sequence = 1  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="call says 1"):
        token_advantages(traj, [1.0, 2.0])


def test_step_table_rows() -> None:
    trajs = [
        two_turns("a", reward=1.0, rewards=(0.0, 1.0)),
        Trajectory(trajectory_id="empty", group_id="g", task="demo"),
        two_turns("b", anchors=("s0", "s9")),
    ]
    table = step_table(trajs)
    assert len(table) == 4
    assert table.trajectory.tolist() == [0, 0, 2, 2]
    assert table.step.tolist() == [0, 1, 0, 1]
    assert table.anchors.tolist() == ["s0", "s1", "s0", "s9"]
    assert table.episode_rewards.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_gigpo_trajectory_layer_and_tokens() -> None:
    # a: rewards 0, 1 (R = 1); b: 0, 0 (R = 0); shared first state s0; γ = 0.5, mean_norm.
    trajs = [two_turns("a", reward=1.0, rewards=(0.0, 1.0)), two_turns("b", anchors=("s0", "s9"))]
    per = gigpo_trajectory_advantages(trajs, gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(per[0].episode, [0.5, 0.5])
    np.testing.assert_allclose(per[0].step, [0.25, 0.0])  # s0: returns 0.5 vs 0
    np.testing.assert_allclose(per[1].combined, [-0.75, -0.5])
    tokens = compute_token_advantages(trajs, "gigpo", gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(tokens[0][0], [0, 0, 0, 0.75, 0.75, 0, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(tokens[1][0], [0, 0, 0, -0.75, -0.75, 0, -0.5, -0.5, -0.5])


def test_compute_token_advantages_grpo_and_unknown() -> None:
    trajs = [two_turns("a", reward=1.0), two_turns("b", reward=0.0)]
    tokens = compute_token_advantages(trajs, "grpo", std_norm=False)
    np.testing.assert_allclose(tokens[0][0], [0, 0, 0, 0.5, 0.5, 0, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(tokens[1][0], [0, 0, 0, -0.5, -0.5, 0, -0.5, -0.5, -0.5])
    with pytest.raises(ConfigError, match="unknown advantage estimator 'ppo'"):
        compute_token_advantages(trajs, "ppo")  # type: ignore[arg-type]


def test_public_surface() -> None:
    import toolgym.training.advantages as api

    assert sorted(api.__all__) == [
        "ESTIMATORS",
        "GiGPOAdvantages",
        "GraphGPOAdvantages",
        "StepTable",
        "arpo_attribution",
        "arpo_token_advantages",
        "compute_token_advantages",
        "discounted_returns",
        "episode_token_advantages",
        "gigpo_advantages",
        "gigpo_trajectory_advantages",
        "graphgpo_advantages",
        "graphgpo_trajectory_advantages",
        "grpo_advantages",
        "grpo_trajectory_advantages",
        "segment_offsets",
        "step_groups",
        "step_table",
        "token_advantages",
    ]
    assert all(hasattr(api, name) for name in api.__all__)
