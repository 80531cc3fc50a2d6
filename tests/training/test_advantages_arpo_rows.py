"""ARPO hard attribution on verl rows (no verl import) when a trajectory of the tree is absent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from toolgym.core.trajectory import Segment, Trajectory
from toolgym.training.advantages import arpo_token_advantages
from toolgym.training.verl.advantage import row_advantages
from toolgym.training.verl.rows import RowMeta


def traj(tid: str, assistant: list[int], reward: float, parent: str | None = None, bp: int | None = None) -> Trajectory:
    return Trajectory(
        trajectory_id=tid, group_id="g", task="demo", reward=reward, parent_id=parent, branch_point=bp,
        segments=[Segment(role="prompt", token_ids=[1, 2, 3], loss_mask=[0, 0, 0]),
                  Segment(role="assistant", token_ids=assistant, loss_mask=[1] * len(assistant))],
    )


@dataclass(slots=True)
class LineageMeta(RowMeta):
    """RowMeta plus the lineage the engine records on forks (``Trajectory.metadata['arpo_lineage']``)."""

    lineage: list[Any] | None = None


def rows_of(trajs: list[Any], lineage: bool) -> tuple[list[RowMeta], list[str], np.ndarray]:
    metas: list[RowMeta] = []
    width = max(len(t.sequence_ids(0)) - 3 for t in trajs)
    mask = np.zeros((len(trajs), width), dtype=np.float32)
    for r, t in enumerate(trajs):
        n = len(t.sequence_ids(0))
        cls = LineageMeta if lineage else RowMeta
        extra = {"lineage": t.metadata.get("arpo_lineage")} if lineage else {}
        metas.append(cls(trajectory_id=t.trajectory_id, group_id=t.group_id, episode_reward=t.reward, sequence=0, offset=3,
                         sequence_len=n, steps=[], row=0, rows=1, parent_id=t.parent_id, branch_point=t.branch_point, **extra))
        mask[r, : n - 3] = 1
    return metas, [t.group_id for t in trajs], mask


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
