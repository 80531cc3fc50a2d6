"""toolgym's estimators on a verl batch: token advantages for padded rows. No verl import.

A verl batch holds rows (agent-loop outputs, see :mod:`.rows`), right-padded to one width, each
with a ``response_mask`` and a group key (verl's ``uid``: the prompt whose ``n`` rollouts form a
group). The functions here rebuild the trajectory-level view from the rows' :class:`RowMeta` and
call the array-level estimators of :mod:`toolgym.training.advantages`, so a batch gets exactly the
numbers those give on the same trajectories:

- ``gigpo``: :func:`~toolgym.training.advantages.gigpo_advantages` over every step of every row;
  each step's tokens get ``A_E + ω·A_S``, other loss-masked tokens of the row get ``A_E``.
- ``grpo``: :func:`~toolgym.training.advantages.grpo_advantages` over episode rewards, each
  trajectory counted once however many rows it has.
- ``arpo``: GRPO per trajectory, then :func:`~toolgym.training.advantages.arpo_attribution` on
  sequence-0 tokens shared between branches (``mode="hard"``); ``soft`` equals GRPO. Rows carry no
  token ids, so an absent trajectory is placed from its descendants' lineage (``RowMeta.lineage``,
  copied from ``Trajectory.metadata["arpo_lineage"]`` by :func:`.rows.trajectory_rows`), as the
  local path does; a fork without a lineage (hand-built records) makes an absent parent the root
  of its own tree (rules 1 and 3 of :mod:`toolgym.training.advantages.arpo`).

Rows whose metadata is None (verl's synthetic padding rows) take no part and get 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toolgym.core.errors import ConfigError
from toolgym.training.advantages import arpo_attribution, gigpo_advantages, grpo_advantages
from toolgym.training.advantages.arpo import link_absent_parents
from toolgym.training.filters import EpisodeFilters, decide

from .rows import RowMeta

ESTIMATORS: dict[str, str] = {"toolgym_grpo": "grpo", "toolgym_gigpo": "gigpo", "toolgym_arpo": "arpo"}
"""verl estimator name → toolgym estimator."""

_OPTIONS: dict[str, set[str]] = {
    "grpo": {"std_norm", "eps"},
    "gigpo": {
        "gamma",
        "omega",
        "mode",
        "invalid_penalty",
        "penalty_on",
        "similarity_threshold",
        "episode_stats",
        "eps",
    },
    "arpo": {"mode", "std_norm", "eps"},
    "graphgpo": {
        "omega",
        "step_weight",
        "episode_weight",
        "mode",
        "goal_reward",
        "normalize_distance",
        "invalid_penalty",
        "similarity_threshold",
        "episode_stats",
        "eps",
        "success_threshold",
    },
}
"""Options each toolgym estimator takes (the ``toolgym.advantage`` section is checked against them)."""

LOCAL_ONLY = frozenset({"graphgpo"})
"""Estimators the local trainer computes but the verl bridge does not: their rows would need each
trajectory's success, which :class:`~.rows.RowMeta` does not carry yet."""


def check_options(estimator: str, options: dict[str, Any]) -> None:
    """Raise ``ConfigError`` for an unknown estimator or an option it does not take."""
    if estimator not in _OPTIONS:
        raise ConfigError(f"unknown toolgym estimator {estimator!r}; use one of {', '.join(_OPTIONS)}")
    unknown = sorted(set(options) - _OPTIONS[estimator])
    if unknown:
        raise ConfigError(
            f"{estimator} takes no option {', '.join(map(repr, unknown))}; its options are {', '.join(sorted(_OPTIONS[estimator]))}"
        )


def row_advantages(
    estimator: str,
    metas: Sequence[RowMeta | None],
    groups: Sequence[Hashable],
    response_mask: NDArray[Any],
    **options: Any,
) -> NDArray[np.float32]:
    """Token advantages, shape ``response_mask.shape`` (rows × width), 0 where the mask is 0.

    Args:
        estimator: ``grpo``, ``gigpo`` or ``arpo``.
        metas: per row, its :class:`RowMeta` (None: the row is padding and gets 0).
        groups: per row, its group key (verl's ``uid``); constant within a trajectory.
        response_mask: rows × width, 1 on model-sampled response tokens; right padding is 0.
        options: the estimator's keyword options (see :mod:`toolgym.training.advantages`).
    """
    check_options(estimator, options)
    if estimator in LOCAL_ONLY:
        raise ConfigError(
            f"the verl bridge does not compute {estimator} yet; train it with `toolgym train --trainer local`"
        )
    mask = np.asarray(response_mask, dtype=np.float32)
    if mask.ndim != 2 or mask.shape[0] != len(metas) or len(groups) != len(metas):
        raise ConfigError(
            f"response_mask has shape {mask.shape} but there are {len(metas)} row metadata and {len(groups)} group keys; pass one per row"
        )
    live = [r for r, m in enumerate(metas) if m is not None]
    out = np.zeros(mask.shape, dtype=np.float32)
    if not live:
        return out
    trajs = _trajectories(metas, groups, live)
    if estimator == "gigpo":
        _fill_gigpo(out, metas, groups, live, trajs, options)
    else:
        std_norm = options.get("std_norm", True)
        eps = options.get("eps", 1e-6)
        rewards = np.array([trajs[t][1] for t in trajs], dtype=np.float64)
        per_traj = grpo_advantages(rewards, [trajs[t][0] for t in trajs], std_norm=std_norm, eps=eps)
        index = {t: k for k, t in enumerate(trajs)}
        for r in live:
            out[r, :] = per_traj[index[metas[r].trajectory_id]]  # type: ignore[union-attr]
        if estimator == "arpo" and options.get("mode", "soft") == "hard":
            _attribute_shared_prefixes(out, metas, live, trajs, per_traj)
    return out * mask


def _trajectories(
    metas: Sequence[RowMeta | None], groups: Sequence[Hashable], live: list[int]
) -> dict[str, tuple[Hashable, float]]:
    """trajectory id → (group key, episode reward), in order of first appearance; checks constancy."""
    out: dict[str, tuple[Hashable, float]] = {}
    for r in live:
        m = metas[r]
        assert m is not None
        seen = out.setdefault(m.trajectory_id, (groups[r], m.episode_reward))
        if seen != (groups[r], m.episode_reward):
            raise ConfigError(
                f"rows of trajectory {m.trajectory_id!r} disagree on their group or episode reward "
                f"({seen} vs {(groups[r], m.episode_reward)}); every row of a trajectory must carry the same"
            )
    return out


def _fill_gigpo(
    out: NDArray[np.float32],
    metas: Sequence[RowMeta | None],
    groups: Sequence[Hashable],
    live: list[int],
    trajs: dict[str, tuple[Hashable, float]],
    options: dict[str, Any],
) -> None:
    where: list[tuple[int, int, int]] = []
    traj_key, group_key, step_index, rewards, anchors, valid, episode_rewards = [], [], [], [], [], [], []
    for r in live:
        m = metas[r]
        assert m is not None
        for span in m.steps:
            where.append((r, span.start, span.end))
            traj_key.append(m.trajectory_id)
            group_key.append(groups[r])
            step_index.append(span.index)
            rewards.append(span.reward)
            anchors.append(span.anchor)
            valid.append(span.valid)
            episode_rewards.append(m.episode_reward)
    missing = [t for t in trajs if t not in set(traj_key)]
    if missing:
        raise ConfigError(
            f"trajectory {missing[0]!r} has rows but no steps; GiGPO needs the step metadata of every row"
        )
    adv = gigpo_advantages(
        traj_key, group_key, step_index, rewards, anchors, valid, episode_rewards, **options
    )
    episode_adv = {t: float(a) for t, a in zip(traj_key, adv.episode, strict=True)}
    for r in live:
        out[r, :] = episode_adv[metas[r].trajectory_id]  # type: ignore[union-attr]
    for (r, start, end), value in zip(where, adv.combined, strict=True):
        out[r, start:end] = value


def _attribute_shared_prefixes(
    out: NDArray[np.float32],
    metas: Sequence[RowMeta | None],
    live: list[int],
    trajs: dict[str, tuple[Hashable, float]],
    per_traj: NDArray[np.float64],
) -> None:
    """ARPO hard mode on sequence-0 rows (see :mod:`toolgym.training.advantages.arpo`)."""
    index = {t: k for k, t in enumerate(trajs)}
    m_count = len(trajs)
    parent_ids: list[str | None] = [None] * m_count
    branch = [0] * m_count
    lineages: list[Any] = [None] * m_count
    length = np.zeros(m_count, dtype=np.int64)
    for r in live:
        m = metas[r]
        assert m is not None
        k = index[m.trajectory_id]
        if m.sequence == 0:
            length[k] = m.sequence_len
        if m.parent_id is not None:
            if m.branch_point is None:
                raise ConfigError(
                    f"trajectory {m.trajectory_id!r} has a parent_id but no branch_point; set the number of shared tokens"
                )
            parent_ids[k], branch[k] = m.parent_id, m.branch_point
            lineages[k] = m.lineage  # absent ancestors' places (rule 1), as the local path reads them
    parent, bp, n_extra = link_absent_parents(
        list(trajs), [trajs[t][0] for t in trajs], parent_ids, branch, lineages=lineages
    )
    seq0 = arpo_attribution(
        np.concatenate([per_traj, np.full(n_extra, np.nan)]),
        parent,
        bp,
        np.concatenate([length, np.zeros(n_extra, dtype=np.int64)]),
        mode="hard",
    )
    for r in live:
        m = metas[r]
        assert m is not None
        if m.sequence != 0:
            continue
        values = seq0[index[m.trajectory_id]][m.offset : m.offset + out.shape[1]]
        out[r, : values.size] = values


def filter_rows(
    metas: Sequence[RowMeta | None],
    groups: Sequence[Hashable],
    filters: EpisodeFilters,
) -> tuple[list[RowMeta | None], list[bool], dict[str, float]]:
    """The episode filters (:mod:`toolgym.training.filters`) on a verl batch, per trajectory.

    Returns (metadata for :func:`row_advantages`, with the rows of dropped trajectories set to None
    so they take no part; per row, True when its advantages must be zeroed afterwards (masked:
    they count in the group's baseline only); the filters' counts, per trajectory)."""
    live = [r for r, m in enumerate(metas) if m is not None]
    trajs = _trajectories(metas, groups, live)
    outcome = {m.trajectory_id: m.outcome for m in metas if m is not None}
    ids = list(trajs)
    result = decide(
        [outcome[t] for t in ids], [trajs[t][0] for t in ids], [trajs[t][1] for t in ids], filters
    )
    fate = dict(zip(ids, result.actions, strict=True))
    kept: list[RowMeta | None] = [
        m if m is not None and fate[m.trajectory_id] != "drop" else None for m in metas
    ]
    masked = [m is not None and fate[m.trajectory_id] == "mask" for m in metas]
    return kept, masked, result.counts
