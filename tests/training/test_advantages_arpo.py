"""ARPO attribution on a small branched example: soft vs hard, nested branches, absent parents."""

from __future__ import annotations

import numpy as np
import pytest

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Segment, Trajectory
from toolgym.training.advantages import arpo_attribution, arpo_token_advantages, compute_token_advantages

PROMPT = [1, 2, 3]


def traj(
    tid: str,
    assistant: list[int],
    reward: float,
    parent: str | None = None,
    bp: int | None = None,
    group: str = "g",
) -> Trajectory:
    return Trajectory(
        trajectory_id=tid,
        group_id=group,
        task="demo",
        reward=reward,
        parent_id=parent,
        branch_point=bp,
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
    tied = arpo_token_advantages(
        [traj("R", [10, 11], 1.0), traj("B", [10, 12], 1.0, parent="R", bp=4)], mode="hard"
    )
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
        (
            [traj("R", [10, 11], 1.0), traj("B", [10, 12], 0.0, parent="R", bp=9)],
            "outside its own sequence 0",
        ),
        (
            [traj("R", [10], 1.0), traj("B", [10, 12, 13], 0.0, parent="R", bp=5)],
            "parent's sequence 0 has only 4",
        ),
        (
            [traj("R", [10, 11], 1.0), traj("B", [10, 12], 0.0, parent="R", bp=4, group="h")],
            "belong to their parent's group",
        ),
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


# -- absent nodes: the same tokens in the same context get the same advantage -------


def _shared_len(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _check_same_tokens_same_advantage(trajs: list[Trajectory], out: list[list[np.ndarray]]) -> None:
    for i, a in enumerate(trajs):
        for j, b in enumerate(trajs):
            if i < j and a.group_id == b.group_id:
                n = _shared_len(a.sequence_ids(0), b.sequence_ids(0))
                np.testing.assert_allclose(
                    out[i][0][:n], out[j][0][:n], atol=1e-6, err_msg=f"{a.trajectory_id} vs {b.trajectory_id}"
                )


def _without(trajs: list[Trajectory], *ids: str) -> list[Trajectory]:
    return [t for t in trajs if t.trajectory_id not in ids]


def tree() -> list[Trajectory]:
    """R ─5─ B ─6─ D ─7─ E, B ─7─ F, R ─4─ G, and an independent root C (prompt: 3 tokens).

    Every branch resamples fresh tokens after its branch point, so tokens coincide only where shared.
    """
    return [
        traj("R", [10, 11, 12, 13, 14], 1.0),
        traj("B", [10, 11, 20, 21, 22], 0.0, parent="R", bp=5),
        traj("D", [10, 11, 20, 30, 31], 1.0, parent="B", bp=6),
        traj("E", [10, 11, 20, 30, 40], 0.0, parent="D", bp=7),
        traj("F", [10, 11, 20, 21, 50], 1.0, parent="B", bp=7),
        traj("G", [10, 60, 61], 0.0, parent="R", bp=4),
        traj("C", [70, 71, 72], 1.0),
    ]


def _reference(trajs: list[Trajectory], full: list[Trajectory]) -> list[np.ndarray]:
    """Hard attribution with the full tree's links, absent trajectories as NaN placeholders."""
    from toolgym.training.advantages.grpo import grpo_trajectory_advantages

    present = {t.trajectory_id for t in trajs}
    adv = dict(
        zip([t.trajectory_id for t in trajs], grpo_trajectory_advantages(trajs, std_norm=False), strict=True)
    )
    pos = {t.trajectory_id: k for k, t in enumerate(full)}
    a = [adv.get(t.trajectory_id, np.nan) for t in full]
    parent = [pos[t.parent_id] if t.parent_id else -1 for t in full]
    bp = [t.branch_point or 0 for t in full]
    lengths = [len(t.sequence_ids(0)) if t.trajectory_id in present else 0 for t in full]
    out = arpo_attribution(a, parent, bp, lengths, mode="hard")
    return [out[pos[t.trajectory_id]] * np.asarray(t.sequence_mask(0)) for t in trajs]


def test_issue_minimal_case_root_and_grandchild_with_the_branch_between_absent() -> None:
    # R and D share the prompt and 10 11 through the absent B: both get the mean (0) there
    trajs = [traj("R", [10, 11, 12, 13], 1.0), traj("D", [10, 11, 20, 40], 0.0, parent="B", bp=6)]
    out = arpo_token_advantages(trajs, mode="hard")
    np.testing.assert_allclose(out[0][0][3:5], [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(out[1][0][3:5], [0.0, 0.0], atol=1e-6)
    assert out[0][0][5] > 0 > out[1][0][5]  # their own tokens keep ±Â


@pytest.mark.parametrize(
    "missing",
    [
        (),
        ("R",),
        ("B",),
        ("D",),
        ("B", "D"),
        ("R", "B"),
        ("B", "G"),
        ("R", "B", "D"),
        ("E",),
        ("F", "B"),
        ("R", "C"),
    ],
    ids=lambda m: "none" if not m else "-".join(m),
)
def test_absent_nodes_keep_their_place_in_the_tree(missing: tuple[str, ...]) -> None:
    full = tree()
    trajs = _without(full, *missing)
    out = arpo_token_advantages(trajs, mode="hard", std_norm=False)
    _check_same_tokens_same_advantage(trajs, out)
    for got, want in zip(out, _reference(trajs, full), strict=True):
        np.testing.assert_allclose(got[0], want, atol=1e-6)


def test_engine_lineage_places_absent_ancestors_exactly() -> None:
    """A resampled token equal to its parent's would fool the token rule; the lineage does not."""
    full = [
        traj("R", [10, 11, 12, 13], 1.0),
        traj("B", [10, 11, 12, 20], 0.0, parent="R", bp=4),  # B resampled 11 at position 4, like R
        traj("D", [10, 11, 12, 20, 30], 1.0, parent="B", bp=7),
    ]
    full[2].metadata["arpo_lineage"] = [["B", 7], ["R", 4]]
    trajs = _without(full, "B")
    out = arpo_token_advantages(trajs, mode="hard", std_norm=False)
    for got, want in zip(out, _reference(trajs, full), strict=True):
        np.testing.assert_allclose(got[0], want, atol=1e-6)  # R and D share 4 tokens, not 6


def test_lineage_must_start_at_the_parent() -> None:
    d = traj("D", [10, 11], 1.0, parent="B", bp=4)
    d.metadata["arpo_lineage"] = [["X", 4]]
    with pytest.raises(ConfigError, match="arpo_lineage starts at 'X'"):
        arpo_token_advantages([traj("R", [10, 12], 0.0), d], mode="hard")


def test_branches_of_an_absent_parent_must_agree_on_its_tokens() -> None:
    trajs = [
        traj("R", [10, 12], 0.0),
        traj("E", [10, 11, 12], 1.0, parent="X", bp=5),
        traj("F", [10, 19, 13], 0.0, parent="X", bp=5),
    ]
    with pytest.raises(ConfigError, match="disagree on its first tokens"):
        arpo_token_advantages(trajs, mode="hard")


@pytest.mark.parametrize("seed", range(40))
def test_random_trees_with_random_absent_nodes_match_the_full_tree(seed: int) -> None:
    """Random branching trees (fresh tokens after every branch point), any subset of nodes absent,
    no lineage: the attribution equals the one made with the full tree's links."""
    import random

    rng = random.Random(seed)
    fresh = iter(range(100, 10_000))
    full: list[Trajectory] = []
    for k in range(rng.randint(2, 12)):
        if full and rng.random() < 0.75:
            up = rng.choice(full)
            ids = up.sequence_ids(0)[3:]
            bp = rng.randint(3, len(ids) + 3)
            own = ids[: bp - 3] + [next(fresh) for _ in range(rng.randint(1, 5))]
            full.append(traj(f"n{k}", own, float(rng.randint(0, 3)), parent=up.trajectory_id, bp=bp))
        else:
            full.append(
                traj(f"n{k}", [next(fresh) for _ in range(rng.randint(1, 6))], float(rng.randint(0, 3)))
            )
    absent = {t.trajectory_id for t in full if rng.random() < 0.4}
    trajs = [t for t in full if t.trajectory_id not in absent] or full[:1]
    out = arpo_token_advantages(trajs, mode="hard", std_norm=False)
    _check_same_tokens_same_advantage(trajs, out)
    for got, want in zip(out, _reference(trajs, full), strict=True):
        np.testing.assert_allclose(got[0], want, atol=1e-6)
