"""Trajectory → verl rows: token-faithful prompts and responses, masks, logprobs, step spans."""

from __future__ import annotations

import pytest

from tests.required import need_module

need_module("verl")

from verl_helpers import synthetic_trajectory

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Status
from toolgym.training.verl.agent_loop import agent_loop_outputs
from toolgym.training.verl.rows import META_KEY, RowMeta, trajectory_rows

STEPS = [("s0", 0.0, True), ("s1", 1.0, False), ("s0", 0.5, True)]


def test_trajectory_layout_is_the_sequence_after_the_first_prompt() -> None:
    traj = synthetic_trajectory("t", "g", STEPS)
    (row,) = trajectory_rows(traj)
    ids, mask = traj.sequence_ids(0), traj.sequence_mask(0)
    prompt_len = traj.steps[0].llm.prompt_len  # type: ignore[union-attr]
    assert row.prompt_ids == ids[:prompt_len]
    assert row.response_ids == ids[prompt_len:] and row.response_mask == mask[prompt_len:]
    assert row.response_logprobs is not None and len(row.response_logprobs) == len(row.response_ids)
    for span, step in zip(row.meta.steps, traj.steps, strict=True):
        seg = traj.segments[step.llm.segment]  # type: ignore[union-attr]
        assert row.response_ids[span.start : span.end] == seg.token_ids
        assert row.response_logprobs[span.start : span.end] == seg.logprobs
        assert (span.anchor, span.reward, span.valid, span.index) == (
            step.anchor,
            step.step_reward,
            step.valid,
            step.index,
        )
    assert all(lp == 0.0 for lp, m in zip(row.response_logprobs, row.response_mask, strict=True) if not m)
    assert (row.meta.offset, row.meta.sequence_len, row.meta.rows) == (prompt_len, len(ids), 1)


def test_step_layout_is_each_calls_prompt_and_sampled_ids() -> None:
    traj = synthetic_trajectory("t", "g", STEPS)
    rows = trajectory_rows(traj, "step")
    assert len(rows) == 3
    ids = traj.sequence_ids(0)
    for row, step in zip(rows, traj.steps, strict=True):
        assert row.prompt_ids == ids[: step.llm.prompt_len]  # type: ignore[union-attr]
        assert row.response_ids == traj.segments[step.llm.segment].token_ids  # type: ignore[union-attr]
        assert row.response_mask == [1] * len(row.response_ids)
        assert [(s.start, s.end) for s in row.meta.steps] == [(0, len(row.response_ids))]


def test_history_window_gives_one_row_per_sequence() -> None:
    traj = synthetic_trajectory("t", "g", STEPS, window=True)
    rows = trajectory_rows(traj)
    assert [r.meta.sequence for r in rows] == [0, 1, 2] and [r.meta.row for r in rows] == [0, 1, 2]
    assert all(r.meta.rows == 3 and len(r.meta.steps) == 1 for r in rows)


def test_trailing_environment_tokens_are_dropped_and_long_responses_cut() -> None:
    traj = synthetic_trajectory("t", "g", STEPS)
    traj.segments.append(traj.segments[2].model_copy(deep=True))  # an observation after the last call
    (row,) = trajectory_rows(traj)
    assert row.response_mask[-1] == 1
    (cut,) = trajectory_rows(traj, max_response_len=4)
    assert len(cut.response_ids) == 4 and cut.meta.truncated_tokens == len(row.response_ids) - 4
    assert all(s.end <= 4 for s in cut.meta.steps)


def test_unusable_trajectories_are_refused() -> None:
    traj = synthetic_trajectory("t", "g", STEPS)
    with pytest.raises(ConfigError, match=r"exceeds rollout\.prompt_length=2"):
        trajectory_rows(traj, max_prompt_len=2)
    broken = traj.model_copy(update={"status": Status.ERROR, "status_reason": "tool crashed"})
    with pytest.raises(ConfigError, match="not trainable: tool crashed"):
        trajectory_rows(broken)
    with pytest.raises(ConfigError, match="unknown row layout"):
        trajectory_rows(traj, "episode")  # type: ignore[arg-type]


def test_agent_loop_outputs_carry_reward_and_metadata() -> None:
    traj = synthetic_trajectory("t", "g", STEPS)
    outputs = agent_loop_outputs(traj, "step", global_steps=(3, 4))
    assert len(outputs) == 3
    for out in outputs:
        assert out.reward_score == pytest.approx(1.5)
        meta = RowMeta.from_dict(out.extra_fields[META_KEY])
        assert meta.trajectory_id == "t" and meta.episode_reward == pytest.approx(1.5)
        assert out.extra_fields["reward_extra_info"]["num_steps"] == 3
        assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 4)
        fields = out.as_dict()  # what verl's TransferQueue worker stores
        assert float(fields["rm_scores"].sum()) == pytest.approx(1.5) and "rollout_log_probs" in fields


def test_cut_rows_are_named_once_with_the_fix() -> None:
    need_module("transfer_queue")
    from toolgym.training.verl.trainer import truncation_warning

    traj = synthetic_trajectory("t", "g", STEPS)
    (whole,) = trajectory_rows(traj)
    (cut,) = trajectory_rows(traj, max_response_len=4)
    assert truncation_warning([whole.meta, None], 64) is None
    line = truncation_warning([cut.meta, whole.meta, None], 4)
    assert line is not None and line.startswith("1 of 2 rows") and "max_response_length=4" in line
    assert f"up to {cut.meta.truncated_tokens} tokens" in line
