"""ARPO hard attribution on verl rows (no verl import) when a trajectory of the tree is absent."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from toolgym.core.trajectory import LLMCall, Segment, Step, Trajectory
from toolgym.training.advantages import arpo_token_advantages
from toolgym.training.verl.advantage import row_advantages
from toolgym.training.verl.rows import RowMeta, trajectory_rows


def traj(
    tid: str, assistant: list[int], reward: float, parent: str | None = None, bp: int | None = None
) -> Trajectory:
    return Trajectory(
        trajectory_id=tid,
        group_id="g",
        task="demo",
        reward=reward,
        parent_id=parent,
        branch_point=bp,
        segments=[
            Segment(role="prompt", token_ids=[1, 2, 3], loss_mask=[0, 0, 0]),
            Segment(role="assistant", token_ids=assistant, loss_mask=[1] * len(assistant)),
        ],
        steps=[
            Step(index=0, action="a", llm=LLMCall(prompt_len=3, segment=1, completion_tokens=len(assistant)))
        ],
    )


def rows_of(trajs: list[Any], lineage: bool) -> tuple[list[RowMeta], list[str], np.ndarray]:
    """The trajectories' rows as the verl agent loop makes them (``trajectory_rows``), their metadata
    round-tripped through JSON as ``extra_fields`` are; ``lineage=False`` strips the lineage."""
    metas: list[RowMeta] = []
    rows = [trajectory_rows(t)[0] for t in trajs]
    width = max(len(r.response_ids) for r in rows)
    mask = np.zeros((len(trajs), width), dtype=np.float32)
    for k, row in enumerate(rows):
        data = json.loads(json.dumps(row.meta.to_dict()))
        if not lineage:
            data.pop("lineage")
        metas.append(RowMeta.from_dict(data))
        mask[k, : len(row.response_mask)] = row.response_mask
    return metas, [t.group_id for t in trajs], mask


def test_rows_carry_the_lineage_of_forks_only() -> None:
    r = traj("R", [10, 11, 12, 13], 1.0)
    d = traj("D", [10, 11, 20, 40], 0.0, parent="B", bp=6)
    d.metadata["arpo_lineage"] = [("B", 6), ("R", 5)]
    r.metadata["arpo_lineage"] = [["X", 1]]  # not a fork: ignored
    metas, _, _ = rows_of([r, d], lineage=True)
    assert metas[0].lineage is None
    assert metas[1].lineage == [["B", 6], ["R", 5]]


def test_rows_with_lineage_equal_the_trajectory_path_when_the_middle_branch_is_absent() -> None:
    # R ─5─ B ─6─ D; B is absent (dropped as untrainable): R and D share the prompt and 10 11
    r = traj("R", [10, 11, 12, 13], 1.0)
    d = traj("D", [10, 11, 20, 40], 0.0, parent="B", bp=6)
    d.metadata["arpo_lineage"] = [["B", 6], ["R", 5]]
    metas, groups, mask = rows_of([r, d], lineage=True)
    got = row_advantages("arpo", metas, groups, mask, mode="hard")
    want = arpo_token_advantages([r, d], mode="hard")
    for k, w in enumerate(want):
        np.testing.assert_allclose(got[k, : w[0].size - 3], w[0][3:], atol=1e-6)
    np.testing.assert_allclose(got[:, :2], 0.0, atol=1e-6)  # the two shared sampled tokens get the mean, 0


def test_rows_without_lineage_treat_an_unknown_absent_parent_as_a_root() -> None:
    r = traj("R", [10, 11, 12, 13], 1.0)
    d = traj("D", [10, 11, 20, 40], 0.0, parent="B", bp=6)
    metas, groups, mask = rows_of([r, d], lineage=False)
    got = row_advantages("arpo", metas, groups, mask, mode="hard")
    assert got[0, 0] > 0 > got[1, 0]  # rule 3: no tokens, no lineage, so nothing links them
