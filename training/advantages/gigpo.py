"""GiGPO (Group-in-Group Policy Optimization, Feng et al., arXiv 2505.10978), on a flat step table.

One row per step. Definitions (equation numbers from the paper):

- Episode advantage (Eq. 3): ``A_E(τ) = (R(τ) − mean_G R) / F_norm``, over the trajectories of one
  episode group G (same task instance, ``group_id``); ``F_norm`` is the sample std + eps
  (``mean_std_norm``) or 1 (``mean_norm``). Every step row of τ carries ``A_E(τ)``.
- Discounted step return (Eq. 5): ``R_t = Σ_{k ≥ t} γ^(k−t) r_k`` within one trajectory.
- Step groups (Eq. 6): inside one episode group, the steps whose anchor state (the environment
  state before the action) is identical, across all its trajectories; a trajectory that revisits
  a state contributes every visit.
- Step advantage (Eq. 7): ``A_S = (R_t − mean_S R) / F_norm`` over the step group S.
- Combined (Eq. 8): ``A = A_E + ω · A_S``.

Defaults follow verl-agent's published GiGPO scripts: γ = 0.95, ω = 1, ``mean_std_norm``, an
invalid-action penalty of 0.1.

Degenerate groups (both levels, both modes): a group of one, or one whose values are all equal,
gets advantage exactly 0. So a state visited once contributes no step signal, and a task whose
trajectories all scored the same contributes no episode signal. verl-agent also gives a step
group of one 0; at the episode level it gives a lone trajectory its raw reward (mean 0, std 1),
which we do not copy (see :mod:`.grpo`), and for equal values it divides rounding noise by eps. Steps with an empty or ``None`` anchor are never grouped: each is a
singleton, so its step advantage is 0.

Invalid-action penalty: ``penalty_on="reward"`` (default) subtracts it from the step's reward
``r_t`` before discounting, so earlier steps' returns see it discounted as well.
``penalty_on="return"`` subtracts it from that step's discounted return only, which is where
verl-agent applies it (verl-agent also subtracts it from that step's copy of the episode score;
here the episode return is the task outcome and is left alone).

Episode statistics: ``episode_stats="trajectory"`` (the paper's Eq. 3) counts each trajectory
once; ``"step"`` counts it once per step row, as verl-agent's default
(``compute_mean_std_cross_steps``) does, which weights long trajectories more.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toolgym.core.errors import ConfigError

from ._groups import (
    Keys,
    Mode,
    as_float_vector,
    check_length,
    check_mode,
    factorize,
    factorize_objects,
    group_normalize,
    object_vector,
)
from ._similarity import similarity_group_codes


class GiGPOAdvantages(NamedTuple):
    """Per-row advantages; unpacks as ``episode, step, combined``."""

    episode: NDArray[np.float64]
    """A_E of the row's trajectory."""
    step: NDArray[np.float64]
    """A_S of the row within its anchor-state group."""
    combined: NDArray[np.float64]
    """A_E + ω · A_S: what the policy loss uses."""


def _episode_order(
    episode_codes: NDArray[np.int64], step_index: NDArray[np.int64]
) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
    """Row order sorted by (episode, step) and, in that order, the number of later rows of the episode."""
    order = np.lexsort((step_index, episode_codes))
    ep = episode_codes[order]
    same_next = ep[1:] == ep[:-1]
    st = step_index[order]
    if np.any(same_next & (st[1:] == st[:-1])):
        row = int(order[1:][same_next & (st[1:] == st[:-1])][0])
        raise ConfigError(
            f"two rows of one episode have the same step_index (row {row}); each step of an episode "
            "needs its own index"
        )
    is_end = np.append(~same_next, True)
    end_pos = np.flatnonzero(is_end)
    run = np.cumsum(np.insert(~same_next, 0, False))  # run number of each sorted row
    remaining = end_pos[run] - np.arange(ep.size)
    return order, remaining


def discounted_returns(
    episode_index: ArrayLike, step_index: ArrayLike, rewards: ArrayLike, gamma: float = 0.95
) -> NDArray[np.float64]:
    """``R_t = Σ_{k ≥ t} γ^(k−t) r_k`` for every row, in input order.

    Rows of one episode (``episode_index``) are ordered by ``step_index``; the discount counts
    rows, so gaps in ``step_index`` are ignored. Vectorised as a log-step scan: O(n log T) for
    episodes of at most T steps, no Python loop over rows.
    """
    r = as_float_vector("rewards", rewards)
    n = r.size
    check_length("episode_index", episode_index, n)
    check_length("step_index", step_index, n)
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
    if n == 0:
        return np.zeros(0)
    episode_codes, _ = factorize(episode_index)
    order, remaining = _episode_order(episode_codes, np.asarray(step_index, dtype=np.int64).reshape(-1))
    out = r[order]
    d, g = 1, float(gamma)
    longest = int(remaining.max())
    while d <= longest:
        # After this pass each row holds the discounted sum of its next 2d rewards (within its episode).
        rows = np.flatnonzero(remaining >= d)
        out[rows] = out[rows] + g * out[rows + d]
        d, g = 2 * d, g * g
    result = np.empty(n)
    result[order] = out
    return result


def _factorize_anchors(anchors: NDArray[np.generic]) -> tuple[NDArray[np.int64], int, NDArray[np.bool_]]:
    """Anchor codes, their number, and which rows have no anchor (empty or None)."""
    if anchors.dtype.kind in "iub":
        codes, n_codes = factorize(anchors)
        return codes, n_codes, np.zeros(anchors.size, dtype=bool)
    codes, table = factorize_objects(anchors)
    absent = [table[k] for k in ("", b"", None) if k in table]
    return codes, len(table), np.isin(codes, absent)


def step_groups(
    group_ids: ArrayLike, anchors: ArrayLike, similarity_threshold: float | None = None
) -> tuple[NDArray[np.int64], int]:
    """Dense step-group code per row, and the number of step groups.

    Two rows share a step group when they have the same ``group_ids`` and the same anchor (exact
    match; with ``similarity_threshold``, anchor texts whose ``SequenceMatcher`` ratio reaches it,
    see :mod:`._similarity`). Rows with an empty or ``None`` anchor each form their own group.
    """
    n = len(group_ids)  # type: ignore[arg-type]
    check_length("anchors", anchors, n)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    group_codes, _ = factorize(group_ids)
    anchor_arr = np.asarray(anchors) if not isinstance(anchors, list) else object_vector(anchors)
    if anchor_arr.ndim != 1:  # a sequence of tuples became a 2-D array: keep one hashable per row
        anchor_arr = object_vector(anchor_arr)
    anchor_codes, n_anchor, missing = _factorize_anchors(anchor_arr)
    if similarity_threshold is None or similarity_threshold >= 1.0:
        if similarity_threshold is not None and similarity_threshold > 1.0:
            raise ConfigError(f"similarity_threshold must be in (0, 1], got {similarity_threshold}")
        key = group_codes * max(n_anchor, 1) + anchor_codes
    else:
        key = np.zeros(n, dtype=np.int64)
        keep = np.flatnonzero(~missing)
        if keep.size:
            key[keep] = similarity_group_codes(
                group_codes[keep], anchor_codes[keep], anchor_arr[keep].tolist(), similarity_threshold
            )
    if missing.any():
        key = key.copy()
        key[missing] = -1 - np.flatnonzero(missing)  # distinct negative keys: one group per row
    uniq, codes = np.unique(key, return_inverse=True)
    return codes.astype(np.int64, copy=False).reshape(-1), int(uniq.size)


def gigpo_advantages(
    episode_index: Keys,
    group_ids: Keys,
    step_index: ArrayLike,
    step_rewards: ArrayLike,
    anchors: ArrayLike,
    valid: ArrayLike | None,
    episode_rewards: ArrayLike,
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    mode: Mode = "mean_std_norm",
    invalid_penalty: float = 0.1,
    penalty_on: Literal["reward", "return"] = "reward",
    similarity_threshold: float | None = None,
    episode_stats: Literal["trajectory", "step"] = "trajectory",
    eps: float = 1e-6,
) -> GiGPOAdvantages:
    """GiGPO advantages for a step table (one row per step; see the module docstring).

    Args:
        episode_index: trajectory key per row (any hashable); rows with equal keys are one trajectory.
        group_ids: episode-group key per row (task instance); constant within a trajectory.
        step_index: position of the step in its trajectory; orders the rows for discounting.
        step_rewards: immediate reward ``r_t`` per row.
        anchors: anchor state per row (str, bytes, int, tuple); empty/None means "no anchor".
        valid: False where the action was invalid (penalised); None means all valid.
        episode_rewards: the trajectory's return ``R(τ)`` on each of its rows (constant within it).
        gamma: discount γ in [0, 1] for the step returns.
        omega: weight ω of the step advantage.
        mode: ``mean_std_norm`` (divide by std + eps) or ``mean_norm`` (centre only).
        invalid_penalty: subtracted for each invalid step (≥ 0; 0 disables it).
        penalty_on: ``reward`` (before discounting) or ``return`` (after); see the module docstring.
        similarity_threshold: None for exact anchors, else group anchor texts with ratio ≥ it.
        episode_stats: ``trajectory`` (each trajectory once, Eq. 3) or ``step`` (once per row).
        eps: added to the std in ``mean_std_norm``.
    """
    check_mode(mode)
    if penalty_on not in ("reward", "return"):
        raise ConfigError(f"penalty_on must be 'reward' or 'return', got {penalty_on!r}")
    if episode_stats not in ("trajectory", "step"):
        raise ConfigError(f"episode_stats must be 'trajectory' or 'step', got {episode_stats!r}")
    if invalid_penalty < 0:
        raise ConfigError(f"invalid_penalty must be ≥ 0 (it is subtracted), got {invalid_penalty}")
    r = as_float_vector("step_rewards", step_rewards)
    n = r.size
    ep_r = as_float_vector("episode_rewards", episode_rewards, n)
    for name, arr in (
        ("episode_index", episode_index),
        ("group_ids", group_ids),
        ("step_index", step_index),
        ("anchors", anchors),
    ):
        check_length(name, arr, n)
    if n == 0:
        empty = np.zeros(0)
        return GiGPOAdvantages(empty, empty.copy(), empty.copy())
    invalid = np.zeros(n, dtype=bool) if valid is None else ~np.asarray(valid, dtype=bool).reshape(-1)
    check_length("valid", invalid, n)
    std_norm = mode == "mean_std_norm"

    ep_codes, n_ep = factorize(episode_index)
    g_codes, n_groups = factorize(group_ids)
    _check_constant_per_episode("group_ids", g_codes.astype(np.float64), ep_codes, n_ep)
    _check_constant_per_episode("episode_rewards", ep_r, ep_codes, n_ep)

    # Episode level.
    if episode_stats == "trajectory":
        _, first = np.unique(ep_codes, return_index=True)
        per_ep = group_normalize(ep_r[first], g_codes[first], n_groups, std_norm=std_norm, eps=eps)
        a_episode = per_ep[ep_codes]
    else:
        a_episode = group_normalize(ep_r, g_codes, n_groups, std_norm=std_norm, eps=eps)

    # Step level.
    penalty = invalid_penalty * invalid
    if penalty_on == "reward":
        returns = discounted_returns(ep_codes, step_index, r - penalty, gamma)
    else:
        returns = discounted_returns(ep_codes, step_index, r, gamma) - penalty
    s_codes, n_step_groups = step_groups(g_codes, anchors, similarity_threshold)
    a_step = group_normalize(returns, s_codes, n_step_groups, std_norm=std_norm, eps=eps)
    return GiGPOAdvantages(a_episode, a_step, a_episode + omega * a_step)


def _check_constant_per_episode(
    name: str, values: NDArray[np.float64], ep_codes: NDArray[np.int64], n_ep: int
) -> None:
    hi = np.full(n_ep, -np.inf)
    lo = np.full(n_ep, np.inf)
    np.maximum.at(hi, ep_codes, values)
    np.minimum.at(lo, ep_codes, values)
    bad = np.flatnonzero(hi != lo)
    if bad.size:
        row = int(np.flatnonzero(ep_codes == bad[0])[0])
        raise ConfigError(
            f"{name} differs between rows of one trajectory (first at row {row}); "
            f"it must be the same on every step row of a trajectory"
        )
