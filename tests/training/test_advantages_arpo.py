"""ARPO attribution on a small branched example: soft vs hard, nested branches, absent parents."""

from __future__ import annotations

import numpy as np
import pytest

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Segment, Trajectory
from toolgym.training.advantages import arpo_attribution, arpo_token_advantages, compute_token_advantages

PROMPT = [1, 2, 3]


def traj(tid: str, assistant: list[int], reward: float, parent: str | None = None, bp: int | None = None, group: str = "g") -> Trajectory:
    return Trajectory(
        trajectory_id=tid, group_id=group, task="demo", reward=reward, parent_id=parent, branch_point=bp,
        segments=[
            Segment(role="prompt", token_ids=PROMPT, loss_mask=[0, 0, 0]),
            Segment(role="assistant", token_ids=assistant, loss_mask=[1] * len(assistant)),
        ],
    )


def example() -> list[Trajectory]:
    """R: root; B: branch of R sharing 5 tokens (prompt + 10 11); C: independent root.

    Rewards R 1, B 0, C 1 → mean-centred GRPO advantages 1/3, −2/3, 1/3.
    """
    return [
        traj("R", [10, 11, 12, 13], 1.0),
        traj("B", [10, 11, 20, 21], 0.0, parent="R", bp=5),
        traj("C", [30, 31], 1.0),
    ]


def seq0(tokens: list[list[np.ndarray]]) -> list[list[float]]:
    return [np.round(t[0].astype(np.float64), 6).tolist() for t in tokens]


def test_soft_is_plain_grpo_over_all_copies() -> None:
    out = seq0(arpo_token_advantages(example(), mode="soft", std_norm=False))
    third = round(1 / 3, 6)
    assert out == [[0, 0, 0] + [third] * 4, [0, 0, 0] + [round(-2 / 3, 6)] * 4, [0, 0, 0, third, third]]
    assert seq0(compute_token_advantages(example(), "arpo", std_norm=False)) == out  # soft is the default


def test_default_is_the_published_soft_attribution_on_a_branching_tree() -> None:
    """Published ARPO trains every branch as an independent response under plain GRPO: on a tree
    R → B → D plus an independent root C, each token of each copy carries its own trajectory's
    GRPO advantage (std-normalised, as verl's GRPO), the shared prefix included."""
    trajs = [*example(), traj("D", [10, 11, 20, 40, 41], 1.0, parent="B", bp=6)]
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    grpo = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)  # torch.std is unbiased, as in verl
    out = arpo_token_advantages(trajs)
    for t, a, o in zip(trajs, grpo, out, strict=True):
        mask = np.asarray(t.sequence_mask(0), dtype=np.float64)
        np.testing.assert_allclose(o[0], a * mask, rtol=1e-5)
    assert out[0][0][3] != out[1][0][3]  # the shared tokens 10 11 are not averaged between R and B


def test_hard_gives_shared_tokens_the_mean_of_their_sharers() -> None:
    out = arpo_token_advantages(example(), mode="hard", std_norm=False)
    shared = (1 / 3 - 2 / 3) / 2
    np.testing.assert_allclose(out[0][0], [0, 0, 0, shared, shared, 1 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(out[1][0], [0, 0, 0, shared, shared, -2 / 3, -2 / 3], rtol=1e-6)
    np.testing.assert_allclose(out[2][0], [0, 0, 0, 1 / 3, 1 / 3], rtol=1e-6)


def test_soft_and_hard_put_the_same_total_on_each_shared_token() -> None:
    soft = arpo_token_advantages(example(), mode="soft")
    hard = arpo_token_advantages(example(), mode="hard")
    np.testing.assert_allclose(soft[0][0][:5] + soft[1][0][:5], hard[0][0][:5] + hard[1][0][:5], rtol=1e-6)
    assert not np.allclose(soft[0][0][3:5], hard[0][0][3:5])


def test_nested_branches() -> None:
    # D branches from B at 6 (shares prompt + 10 11 20); rewards R 1, B 0, C 1, D 1 → 0.25, −0.75, 0.25, 0.25.
    trajs = [*example(), traj("D", [10, 11, 20, 40, 41], 1.0, parent="B", bp=6)]
    out = arpo_token_advantages(trajs, mode="hard", std_norm=False)
    three = (0.25 - 0.75 + 0.25) / 3  # R, B, D share the first 5 tokens
    two = (-0.75 + 0.25) / 2  # B and D share token 5
    np.testing.assert_allclose(out[0][0], [0, 0, 0, three, three, 0.25, 0.25], rtol=1e-6)
    np.testing.assert_allclose(out[1][0], [0, 0, 0, three, three, two, -0.75], rtol=1e-6)
    np.testing.assert_allclose(out[3][0], [0, 0, 0, three, three, two, 0.25, 0.25], rtol=1e-6)


def test_absent_parent_still_links_its_branches() -> None:
    # X is not in the batch; E and F branched from it at 4 and 6, so they share 4 tokens.
    trajs = [traj("E", [10, 11, 12], 1.0, parent="X", bp=4), traj("F", [10, 11, 13], 0.0, parent="X", bp=6)]
    out = arpo_token_advantages(trajs, mode="hard", std_norm=False)
    np.testing.assert_allclose(out[0][0], [0, 0, 0, 0, 0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(out[1][0], [0, 0, 0, 0, -0.5, -0.5], atol=1e-7)


def test_single_trajectory_and_equal_rewards() -> None:
    (only,) = arpo_token_advantages([traj("R", [10, 11], 1.0)], mode="hard")
    assert only[0].tolist() == [0.0] * 5
    tied = arpo_token_advantages([traj("R", [10, 11], 1.0), traj("B", [10, 12], 1.0, parent="R", bp=4)], mode="hard")
    assert all(t[0].tolist() == [0.0] * 5 for t in tied)


def test_array_layer_with_placeholder() -> None:
    # nodes: 0 real (A=1, 6 tokens), 1 real (A=−1, 4 tokens, branch of 2 at 3), 2 placeholder; 0 branch of 2 at 2
    out = arpo_attribution([1.0, -1.0, np.nan], [2, 2, -1], [2, 3, 0], [6, 4, 0], mode="hard")
    np.testing.assert_allclose(out[0], [0, 0, 1, 1, 1, 1])
    np.testing.assert_allclose(out[1], [0, 0, -1, -1])
    assert out[2].size == 0
    soft = arpo_attribution([1.0, -1.0, np.nan], [2, 2, -1], [2, 3, 0], [6, 4, 0], mode="soft")
    np.testing.assert_allclose(soft[0], [1.0] * 6)


@pytest.mark.parametrize(
    ("trajs", "message"),
    [
        ([traj("R", [10, 11], 1.0), traj("B", [10, 12], 0.0, parent="R")], "no branch_point"),
        ([traj("R", [10, 11], 1.0), traj("B", [19, 12], 0.0, parent="R", bp=4)], "token ids differ"),
        ([traj("R", [10, 11], 1.0), traj("B", [10, 12], 0.0, parent="R", bp=9)], "outside its own sequence 0"),
        ([traj("R", [10], 1.0), traj("B", [10, 12, 13], 0.0, parent="R", bp=5)], "parent's sequence 0 has only 4"),
        ([traj("R", [10, 11], 1.0), traj("B", [10, 12], 0.0, parent="R", bp=4, group="h")], "belong to their parent's group"),
        ([traj("R", [10, 11], 1.0), traj("R", [10, 12], 0.0)], "appears twice"),
        ([traj("A", [10, 11], 1.0, parent="B", bp=3), traj("B", [10, 12], 0.0, parent="A", bp=3)], "cycle"),
    ],
)
def test_inconsistent_branches_are_refused(trajs: list[Trajectory], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        arpo_token_advantages(trajs, mode="hard")


def test_bad_mode() -> None:
    with pytest.raises(ConfigError, match="use 'soft' or 'hard'"):
        arpo_token_advantages(example(), mode="medium")  # type: ignore[arg-type]
