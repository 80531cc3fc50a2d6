"""Properties of the estimators, checked with hypothesis against a plain-loop reference."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.training.advantages import arpo_attribution, gigpo_advantages, grpo_advantages
from toolgym.training.advantages.reference import loop_normalize

SETTINGS = settings(deadline=None, max_examples=60)  # per test: a global profile would change other suites

rewards_st = st.floats(-10, 10, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 3))


def naive_gigpo(
    episodes: list[list[tuple[str, float, bool]]],
    groups: list[str],
    rewards: list[float],
    *,
    gamma: float,
    std_norm: bool,
    penalty: float,
    on_return: bool,
) -> list[float]:
    """Reference GiGPO, one trajectory at a time; rows in trajectory order then step order."""
    ep_adv = loop_normalize(rewards, groups, std_norm, 1e-6)
    rows_value, rows_key, rows_ep = [], [], []
    for e, steps in enumerate(episodes):
        returns = [0.0] * len(steps)
        acc = 0.0
        for t in range(len(steps) - 1, -1, -1):
            anchor, r, valid = steps[t]
            acc = (r if on_return or valid else r - penalty) + gamma * acc
            returns[t] = acc
        for t, (anchor, _r, valid) in enumerate(steps):
            rows_value.append(returns[t] - (penalty if on_return and not valid else 0.0))
            rows_key.append((groups[e], anchor))
            rows_ep.append(e)
    step_adv = loop_normalize(rows_value, rows_key, std_norm, 1e-6)
    return [ep_adv[e] + s for e, s in zip(rows_ep, step_adv, strict=True)]


# "room a" ~ "room b" (ratio 0.83) and "hall a" ~ "hall b", so similarity 0.5 merges some states
step_st = st.tuples(st.sampled_from(["room a", "room b", "hall a", "hall b"]), rewards_st, st.booleans())
batch_st = st.lists(
    st.tuples(st.sampled_from(["g1", "g2", "g3"]), st.lists(step_st, min_size=1, max_size=6)),
    min_size=1,
    max_size=10,
)


def flatten(batch: list[tuple[str, list[tuple[str, float, bool]]]]) -> dict[str, list]:
    cols: dict[str, list] = defaultdict(list)
    for e, (group, steps) in enumerate(batch):
        total = sum(r for _a, r, _v in steps)
        for t, (anchor, r, valid) in enumerate(steps):
            cols["episode_index"].append(e)
            cols["group_ids"].append(group)
            cols["step_index"].append(t)
            cols["step_rewards"].append(r)
            cols["anchors"].append(anchor)
            cols["valid"].append(valid)
            cols["episode_rewards"].append(total)
    return cols


@SETTINGS
@given(
    batch_st,
    st.sampled_from(["mean_norm", "mean_std_norm"]),
    st.sampled_from([0.0, 0.5, 0.95, 1.0]),
    st.booleans(),
)
def test_gigpo_matches_reference(batch: list, mode: str, gamma: float, on_return: bool) -> None:
    cols = flatten(batch)
    adv = gigpo_advantages(**cols, gamma=gamma, mode=mode, penalty_on="return" if on_return else "reward")  # type: ignore[arg-type]
    expected = naive_gigpo(
        [s for _g, s in batch],
        [g for g, _s in batch],
        [sum(r for _a, r, _v in s) for _g, s in batch],
        gamma=gamma,
        std_norm=mode == "mean_std_norm",
        penalty=0.1,
        on_return=on_return,
    )
    np.testing.assert_allclose(adv.combined, expected, rtol=1e-6, atol=1e-6)


@SETTINGS
@given(batch_st, st.randoms(use_true_random=False), st.sampled_from([None, 0.5]))
def test_gigpo_is_permutation_invariant(batch: list, rnd, threshold: float | None) -> None:
    cols = flatten(batch)
    n = len(cols["step_rewards"])
    perm = list(range(n))
    rnd.shuffle(perm)
    shuffled = {k: [v[i] for i in perm] for k, v in cols.items()}
    a = gigpo_advantages(**cols, similarity_threshold=threshold)  # type: ignore[arg-type]
    b = gigpo_advantages(**shuffled, similarity_threshold=threshold)  # type: ignore[arg-type]
    np.testing.assert_allclose(a.combined[perm], b.combined, rtol=1e-9, atol=1e-12)


@SETTINGS
@given(st.lists(st.tuples(rewards_st, st.integers(0, 4)), min_size=1, max_size=40), st.booleans())
def test_grpo_matches_reference_and_centres_each_group(rows: list, std_norm: bool) -> None:
    rewards, groups = [r for r, _g in rows], [g for _r, g in rows]
    adv = grpo_advantages(rewards, groups, std_norm=std_norm)
    np.testing.assert_allclose(adv, loop_normalize(rewards, groups, std_norm, 1e-6), rtol=1e-9, atol=1e-9)
    for g in set(groups):
        assert abs(adv[np.array(groups) == g].sum()) < 1e-6  # mean 0 within every group


@SETTINGS
@given(batch_st)
def test_gigpo_mean_norm_episode_advantages_sum_to_zero_per_group(batch: list) -> None:
    cols = flatten(batch)
    adv = gigpo_advantages(**cols, mode="mean_norm")  # type: ignore[arg-type]
    _, first = np.unique(cols["episode_index"], return_index=True)
    groups = np.array(cols["group_ids"], dtype=object)[first]
    for g in set(groups.tolist()):
        assert abs(adv.episode[first][groups == g].sum()) < 1e-9


@st.composite
def branched_trees(draw: st.DrawFn) -> tuple[list[float], list[int], list[int], list[int]]:
    """A random forest: node i > 0 may branch from an earlier node at a point within both lengths."""
    m = draw(st.integers(1, 8))
    lengths, parent, bp, adv = [], [], [], []
    for i in range(m):
        length = draw(st.integers(0, 12))
        p = draw(st.integers(-1, i - 1)) if i else -1
        point = draw(st.integers(0, min(length, lengths[p]))) if p >= 0 else 0
        lengths.append(length)
        parent.append(p)
        bp.append(point)
        adv.append(draw(rewards_st))
    return adv, parent, bp, lengths


def naive_shared(parent: list[int], bp: list[int], i: int, j: int) -> int:
    """Shared prefix of i and j: smallest branch point on the tree path (via the ancestor lists)."""

    def path(x: int) -> list[int]:
        out = [x]
        while parent[out[-1]] >= 0:
            out.append(parent[out[-1]])
        return out

    pi, pj = path(i), path(j)
    if pi[-1] != pj[-1]:
        return 0
    common = next(x for x in pi if x in pj)
    edges = [bp[x] for x in pi[: pi.index(common)]] + [bp[x] for x in pj[: pj.index(common)]]
    return min(edges, default=10**9)


@SETTINGS
@given(branched_trees())
def test_arpo_hard_matches_reference_and_keeps_soft_totals(tree: tuple) -> None:
    adv, parent, bp, lengths = tree
    hard = arpo_attribution(adv, parent, bp, lengths, mode="hard")
    soft = arpo_attribution(adv, parent, bp, lengths, mode="soft")
    m = len(adv)
    for i in range(m):
        for t in range(lengths[i]):
            sharers = [j for j in range(m) if j == i or naive_shared(parent, bp, i, j) > t]
            assert abs(hard[i][t] - np.mean([adv[j] for j in sharers])) < 1e-9
            # the d copies of this token carry the same total in both modes
            assert abs(sum(hard[j][t] for j in sharers) - sum(soft[j][t] for j in sharers)) < 1e-9
