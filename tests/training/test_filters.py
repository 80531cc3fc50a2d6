"""Episode filters: each class is recognised, each action does what it says, counts are right."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toolgym.core.trajectory import Status, Trajectory
from toolgym.training.filters import EpisodeFilters, apply_filters, classify


def traj(tid: str, group: str = "g", reward: float = 0.0, **fields: Any) -> Trajectory:
    return Trajectory(trajectory_id=tid, group_id=group, task="swe", reward=reward, **fields)


OVERLONG = {"truncated": True, "truncation_reason": "context budget (max_tokens_per_trajectory) used up"}
TURNS = {"truncated": True, "truncation_reason": "turn limit (30) reached; the diff was graded (autosubmit)"}
TIMEOUT = {"status": Status.ERROR, "status_reason": "episode timed out after 600s"}
ENV_TIMEOUT = {"status": Status.ERROR, "status_reason": "TimeoutError: "}
SANDBOX = {
    "status": Status.ERROR,
    "status_reason": "SandboxBrokenError: the sandbox's agent exited (code 137)",
}
DOCKER = {"status": Status.ERROR, "status_reason": "RuntimeError: docker run failed: no space left on device"}
LLM = {"status": Status.ERROR, "status_reason": "LLMError: HTTP 500 after 3 attempts"}
REWRITE = {"status": Status.UNTRAINABLE, "status_reason": "template rewrote history"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "ok"),
        ({"terminated": True}, "ok"),
        (OVERLONG, "overlong"),
        (TURNS, "turn_limit"),
        (TIMEOUT, "timeout"),
        (ENV_TIMEOUT, "timeout"),
        (SANDBOX, "sandbox_error"),
        (DOCKER, "sandbox_error"),
        (LLM, "error"),
        (REWRITE, "untrainable"),
        ({"token_faithful": False}, "untrainable"),
        (
            {"terminated": True, "truncated": True, "truncation_reason": "context budget"},
            "ok",
        ),  # ended by the task first
    ],
)
def test_classify(fields: dict[str, Any], expected: str) -> None:
    assert classify(traj("a", **fields)) == expected


def test_defaults_train_every_sound_rollout_and_drop_failed_ones() -> None:
    batch = [traj("a"), traj("b", **OVERLONG), traj("c", **TURNS), traj("d", **TIMEOUT), traj("e", **REWRITE)]
    res = apply_filters(batch, EpisodeFilters())
    assert res.actions == ["keep", "keep", "keep", "drop", "drop"]
    part, masked = res.select(batch)
    assert [t.trajectory_id for t in part] == ["a", "b", "c"] and masked == [False] * 3
    assert res.counts["filter/overlong"] == 1 and res.counts["filter/turn_limit"] == 1
    assert res.counts["filter/timeout"] == 1 and res.counts["filter/untrainable"] == 1
    assert (
        res.counts["filter/dropped"] == 2
        and res.counts["filter/masked"] == 0
        and res.counts["filter/kept"] == 3
    )


def test_mask_keeps_the_rollout_in_the_baseline_but_not_in_the_loss() -> None:
    batch = [traj("a", reward=1.0), traj("b", **OVERLONG), traj("c", **SANDBOX)]
    f = EpisodeFilters(overlong="mask", sandbox_error="mask")
    res = apply_filters(batch, f)
    part, masked = res.select(batch)
    assert [t.trajectory_id for t in part] == ["a", "b", "c"]
    assert masked == [False, True, True]
    assert res.counts["filter/masked"] == 2 and res.counts["filter/sandbox_error"] == 1


def test_drop_removes_the_rollout_from_its_group() -> None:
    batch = [traj("a", reward=1.0), traj("b", **TURNS), traj("c", **OVERLONG)]
    res = apply_filters(batch, EpisodeFilters(turn_limit="drop", overlong="drop"))
    part, masked = res.select(batch)
    assert [t.trajectory_id for t in part] == ["a"] and masked == [False]


def test_equal_reward_groups_are_dropped_whole_and_counted_once() -> None:
    batch = [
        traj("a1", "A", 1.0),
        traj("a2", "A", 1.0),
        traj("b1", "B", 0.0),
        traj("b2", "B", 1.0),
        traj("c1", "C", 0.0),
        traj("c2", "C", 0.0, **TIMEOUT),
    ]
    res = apply_filters(batch, EpisodeFilters(equal_reward_groups="drop"))
    assert res.actions == ["drop", "drop", "keep", "keep", "drop", "drop"]
    # C: the timed-out rollout is dropped first; the one left is a group of equal rewards
    assert res.counts["filter/equal_reward_groups"] == 2
    kept = apply_filters(batch, EpisodeFilters())
    assert kept.actions[:5] == ["keep"] * 5 and kept.counts["filter/equal_reward_groups"] == 0


def test_masked_rollouts_take_part_in_the_equal_reward_test() -> None:
    # a masked rollout with another reward is part of the baseline: the group has signal
    batch = [traj("a", "A", 1.0), traj("b", "A", 0.0, **OVERLONG)]
    res = apply_filters(batch, EpisodeFilters(overlong="mask", equal_reward_groups="drop"))
    assert res.actions == ["keep", "mask"]


def test_unsound_rollouts_cannot_be_kept() -> None:
    with pytest.raises(ValidationError):
        EpisodeFilters(timeout="keep")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EpisodeFilters(sandbox_error="keep")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EpisodeFilters(overlong="skip")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EpisodeFilters(no_such_filter="drop")  # type: ignore[call-arg]


def test_the_progress_line_says_what_was_filtered() -> None:
    from toolgym.training.local.progress import progress_line

    rec = {
        "step": 1,
        "train_success": 0.5,
        "mean_reward": 0.5,
        "policy_loss": 0.1,
        "kl": 0.0,
        "kl_kind": "old",
        "entropy": 1.0,
        "tokens_per_s": 10.0,
        "episodes_per_s": 1.0,
        "wall_s": 3.0,
    }
    batch = [traj("a", "A", 1.0), traj("b", "A", 0.0, **OVERLONG), traj("c", "B", 0.0), traj("d", "B", 0.0)]
    counts = apply_filters(batch, EpisodeFilters(overlong="mask", equal_reward_groups="drop")).counts
    line = progress_line({**rec, "filters": counts}, total=2, eta_s=3)
    assert "filtered 1 masked/2 dropped (overlong 1, 1 equal group)" in line
    assert "filtered" not in progress_line(
        {**rec, "filters": apply_filters(batch[:1], EpisodeFilters()).counts}, total=2, eta_s=3
    )
