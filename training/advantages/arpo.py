"""ARPO advantage attribution (Agentic Reinforced Policy Optimization, Dong et al., arXiv 2507.19849).

ARPO's rollouts branch: after a tool result with high token entropy, an episode is forked, and
the branch shares a token prefix with its parent (``Trajectory.parent_id``; ``branch_point`` =
number of leading tokens of sequence 0 shared with the parent). Branches of branches form a tree.
All copies of one task (roots and branches, one ``group_id``) form one GRPO group, and each copy's
advantage is GRPO's ``Â_i`` (see :mod:`.grpo`). The two attribution modes differ on shared tokens:

- ``soft``: plain GRPO over all copies. Each copy of a shared token keeps its own trajectory's
  ``Â_i``. Because the copies are the same tokens under the same context, their importance ratios
  are identical, so their summed contribution already equals the shared mean; ARPO reports this
  mode as the more stable one and uses it by default, and so does toolgym.

  What the published code does (dongguanting/ARPO, ``vllm_rollout_with_tools.py`` and its training
  scripts): the rollout returns every branch as a full, independent response (the copied prefix
  included, loss-masked like any other response except for tool results), the scripts train with
  ``algorithm.adv_estimator=grpo``, and verl's GRPO gives each response its own outcome advantage
  on all of its tokens. That is ``soft`` attribution; no code path of the release averages shared
  tokens. ``soft`` is therefore toolgym's default, and ``hard`` is the paper's alternative.
- ``hard``: a token shared by ``d`` trajectories gets ``(1/d) Σ Â_j`` over those ``d``; tokens after
  the divergence keep ``Â_i``. Every copy carries that mean, so the sum over copies is the same as in
  soft mode and only the per-copy values differ.

Sharing is structural: trajectories ``i`` and ``j`` share the first ``L(i, j)`` tokens, where
``L(i, j)`` is the smallest branch point on the tree path between them (a branch taken at 15 from
a branch taken at 20 shares 15 tokens with the root). Only sequence 0 is ever shared; tokens of
later sequences keep ``Â_i``.

Absent nodes. A trajectory absent from the batch (dropped as untrainable, say) contributes no
advantage of its own, but its place in the tree is kept, so that the same tokens under the same
context get the same advantage whichever nodes are missing. It is rebuilt, in this order, from:

1. the lineage its descendants carry (``Trajectory.metadata["arpo_lineage"]``, written by the
   engine on every fork: ``[[parent_id, branch_point], [grandparent_id, parent's branch_point], …]``
   up to the root), which places every absent ancestor exactly;
2. otherwise (hand-built records), the tokens: an absent node's first tokens are known from its
   branches (each shares its first ``branch_point`` tokens with it), and an absent node whose own
   parent is unknown is attached to the member of its group, outside its own subtree, whose
   sequence 0 shares the longest prefix with those known tokens, at that length (the longest
   matches first, so absent siblings meet at their common ancestor's depth). Where a branch's
   resampled token happens to equal its parent's, the rebuilt branch point is later than the true
   one; those tokens are then treated as shared, as they are the same tokens in the same context;
3. with neither (verl rows carry no tokens; they carry the lineage as ``RowMeta.lineage``, but a
   hand-built fork may have none) an absent node is the root of its own tree: it still links its
   branches to each other.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory

from .grpo import grpo_trajectory_advantages
from .tokens import episode_token_advantages

AttributionMode = Literal["soft", "hard"]
_INF = np.iinfo(np.int64).max


def _roots_and_depths(parent: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Root and depth of every node of a parent-pointer forest (pointer jumping, O(m log m))."""
    m = parent.size
    nxt = np.where(parent < 0, np.arange(m), parent)
    depth = (parent >= 0).astype(np.int64)
    for _ in range(int(np.ceil(np.log2(max(m, 2)))) + 1):
        depth = depth + np.where(nxt != np.arange(m), depth[nxt], 0)
        nxt = nxt[nxt]
    if np.any(parent[nxt] >= 0):
        raise ConfigError("parent links form a cycle; each branch's parent must be an earlier trajectory")
    return nxt, depth


def _shared_prefix_matrix(
    parent: NDArray[np.int64], branch_point: NDArray[np.int64], order: NDArray[np.int64]
) -> NDArray[np.int64]:
    """``L[i, j]`` for one tree given in local indices; ``order`` lists parents before children."""
    c = parent.size
    lcp = np.full((c, c), _INF, dtype=np.int64)
    done: list[int] = []
    for x in order.tolist():
        p = int(parent[x])
        if p >= 0:
            # Every node processed so far lies outside x's subtree, so its path to x runs through p.
            row = np.minimum(branch_point[x], lcp[p, done])
            lcp[x, done] = row
            lcp[done, x] = row
        done.append(x)
    return lcp


def arpo_attribution(
    advantages: ArrayLike,
    parent: ArrayLike,
    branch_point: ArrayLike,
    lengths: ArrayLike,
    *,
    mode: AttributionMode = "hard",
) -> list[NDArray[np.float64]]:
    """Advantage of each token position of sequence 0, per trajectory.

    Args:
        advantages: ``Â_i`` per trajectory; NaN marks a placeholder for an absent parent (it
            links its branches but has no tokens and no advantage; its length must be 0).
        parent: index of the parent trajectory, or -1 for a root.
        branch_point: tokens shared with the parent (ignored for roots); 0 ≤ it ≤ both lengths.
        lengths: number of tokens of sequence 0 of each trajectory.
        mode: ``hard`` (shared tokens get the mean over their sharers) or ``soft`` (own ``Â_i``).

    Returns:
        One float64 array of length ``lengths[i]`` per trajectory (loss mask not yet applied).

    Cost: O(c²) time and memory per tree of c trajectories (the shared-prefix matrix), plus
    O(L log c) per trajectory of L tokens; ARPO trees hold one task's rollouts, so c is small.
    """
    if mode not in ("soft", "hard"):
        raise ConfigError(f"unknown ARPO attribution mode {mode!r}; use 'soft' or 'hard'")
    adv = np.asarray(advantages, dtype=np.float64).reshape(-1)
    m = adv.size
    par = np.asarray(parent, dtype=np.int64).reshape(-1)
    bp = np.asarray(branch_point, dtype=np.int64).reshape(-1)
    length = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if not (par.size == bp.size == length.size == m):
        raise ConfigError("advantages, parent, branch_point and lengths need one entry per trajectory each")
    placeholder = np.isnan(adv)
    if np.any(placeholder & (length > 0)):
        raise ConfigError("a placeholder (NaN advantage) cannot have tokens; give it length 0")
    if np.any((par < -1) | (par >= m) | (par == np.arange(m))):
        raise ConfigError("parent must be -1 (root) or the index of another trajectory")
    branch = par >= 0
    if np.any(branch & ((bp < 0) | ((bp > length) & ~placeholder))):
        raise ConfigError(
            "a branch point must lie within the branch's own sequence 0 (0 ≤ branch_point ≤ length)"
        )
    real_parent = branch & ~placeholder[np.maximum(par, 0)]
    if np.any(real_parent & (bp > length[np.maximum(par, 0)])):
        raise ConfigError(
            "a branch point must lie within the parent's sequence 0 (branch_point ≤ parent length)"
        )

    out = [np.full(int(n), a) for n, a in zip(length.tolist(), np.nan_to_num(adv).tolist(), strict=True)]
    if mode == "soft" or not branch.any():
        return out
    roots, depth = _roots_and_depths(par)
    by_root = np.argsort(roots, kind="stable")
    bounds = np.flatnonzero(np.diff(roots[by_root])) + 1
    for members in np.split(by_root, bounds):
        if members.size < 2:
            continue
        local = {int(g): k for k, g in enumerate(members.tolist())}
        lpar = np.array([local.get(int(par[g]), -1) for g in members], dtype=np.int64)
        lcp = _shared_prefix_matrix(lpar, bp[members], np.argsort(depth[members], kind="stable"))
        a_local = adv[members]
        for k, g in enumerate(members.tolist()):
            if placeholder[g] or length[g] == 0:
                continue
            others = np.flatnonzero((np.arange(members.size) != k) & ~np.isnan(a_local))
            shared = lcp[k, others]
            desc = np.argsort(-shared, kind="stable")
            l_desc, a_desc = shared[desc], a_local[others][desc]
            csum = np.concatenate(([0.0], np.cumsum(a_desc)))
            positions = np.arange(length[g])
            sharers = np.searchsorted(-l_desc, -positions, side="left")  # count of l > t
            out[g] = (adv[g] + csum[sharers]) / (1.0 + sharers)
    return out


Lineage = Sequence[Sequence[Any]]
"""``[[parent_id, branch_point], [grandparent_id, parent's branch_point], …]`` up to the root."""


def link_absent_parents(
    ids: Sequence[str],
    groups: Sequence[Hashable],
    parent_ids: Sequence[str | None],
    branch_points: Sequence[int],
    *,
    lineages: Sequence[Lineage | None] | None = None,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """Parent links for :func:`arpo_attribution`, with a placeholder for every absent ancestor.

    Args:
        ids, groups, parent_ids, branch_points: per present trajectory (``branch_points`` is read
            only where ``parent_ids`` is set).
        lineages: per trajectory, its lineage or None (see the module docstring, rule 1).
        prefixes: per trajectory, its sequence-0 token ids, for rule 2; None skips that rule.

    Returns:
        ``(parent, branch_point, placeholders)``: arrays over the ``len(ids)`` trajectories followed
        by ``placeholders`` absent nodes (give those NaN advantages and length 0).
    """
    m = len(ids)
    index = {t: i for i, t in enumerate(ids)}
    parent: list[int] = [-1] * m
    bp: list[int] = [0] * m
    group: list[Hashable] = list(groups)
    placed: list[bool] = []  # per placeholder: its own parent (or rootness) is known
    ph_index: dict[str, int] = {}

    def node(tid: str, g: Hashable) -> int:
        if tid in index:
            return index[tid]
        if tid not in ph_index:
            ph_index[tid] = len(parent)
            parent.append(-1)
            bp.append(0)
            group.append(g)
            placed.append(False)
        return ph_index[tid]

    for i, pid in enumerate(parent_ids):
        if pid is not None:
            parent[i], bp[i] = node(pid, groups[i]), int(branch_points[i])
    for i, lineage in enumerate(lineages or ()):
        if not lineage or parent_ids[i] is None:
            continue
        chain = [(str(a), int(b)) for a, b in lineage]
        if chain[0][0] != parent_ids[i]:
            raise ConfigError(
                f"trajectory {ids[i]!r}: its arpo_lineage starts at {chain[0][0]!r}, not at its parent {parent_ids[i]!r}"
            )
        for (child, _), (up, up_bp) in itertools.pairwise(chain):
            k = node(child, groups[i])
            if k < m:
                break  # a present trajectory's own record gives the rest
            if not placed[k - m]:
                parent[k], bp[k], placed[k - m] = node(up, groups[i]), up_bp, True
        if chain[-1][0] in ph_index:
            placed[ph_index[chain[-1][0]] - m] = True  # the lineage ends at a root

    if prefixes is not None and not all(placed):
        _attach_by_tokens(m, parent, bp, group, placed, prefixes)
    return np.asarray(parent, dtype=np.int64), np.asarray(bp, dtype=np.int64), len(placed)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def _attach_by_tokens(
    m: int,
    parent: list[int],
    bp: list[int],
    group: list[Hashable],
    placed: list[bool],
    prefixes: Sequence[Sequence[int]],
) -> None:
    """Rule 2 of the module docstring: attach each unplaced absent node where its tokens put it."""
    n = len(parent)
    children: dict[int, list[int]] = {}
    for x in range(n):
        if parent[x] >= 0:
            children.setdefault(parent[x], []).append(x)
    known: dict[int, Sequence[int]] = {}

    def tokens(x: int) -> Sequence[int]:
        if x < m:
            return prefixes[x]
        if x not in known:
            known[x] = ()
            best: Sequence[int] = ()
            for c in children.get(x, []):
                own = tokens(c)[: bp[c]]
                if _lcp(own, best) < min(len(own), len(best)):
                    raise ConfigError(
                        "two branches of one absent trajectory disagree on its first tokens; they cannot both be its branches"
                    )
                best = own if len(own) > len(best) else best
            known[x] = best
        return known[x]

    root = list(range(n))

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    for x in range(n):
        if parent[x] >= 0:
            root[find(x)] = find(parent[x])
    edges = []
    for k, done in enumerate(placed):
        if done:
            continue
        p = m + k
        mine = tokens(p)
        for x in range(n):
            if x != p and group[x] == group[p] and find(x) != find(p):
                w = min(_lcp(mine, tokens(x)), len(mine))
                if w > 0:
                    edges.append((-w, p, x))
    for neg_w, p, x in sorted(edges):
        if placed[p - m] or find(x) == find(p):
            continue
        parent[p], bp[p], placed[p - m] = x, -neg_w, True
        root[find(p)] = find(x)


def arpo_token_advantages(
    trajectories: Sequence[Trajectory],
    *,
    mode: AttributionMode = "soft",
    std_norm: bool = True,
    eps: float = 1e-6,
    check_prefix: bool = True,
) -> list[list[NDArray[np.float32]]]:
    """Per-trajectory, per-sequence token advantages for an ARPO batch (loss mask applied).

    GRPO advantages are computed over ``Trajectory.reward`` by ``group_id``; shared-prefix tokens
    are then attributed per ``mode`` (see the module docstring). With ``check_prefix`` the shared
    token ids are compared with the parent's, and a mismatch raises ConfigError.
    """
    adv = grpo_trajectory_advantages(trajectories, std_norm=std_norm, eps=eps)
    index: dict[str, int] = {}
    for i, t in enumerate(trajectories):
        if t.trajectory_id in index:
            raise ConfigError(f"trajectory id {t.trajectory_id!r} appears twice; ARPO links branches by id")
        index[t.trajectory_id] = i
    lengths = np.array(
        [sum(len(s.token_ids) for s in t.segments if s.sequence == 0) for t in trajectories], dtype=np.int64
    )
    for i, t in enumerate(trajectories):
        if t.parent_id is None:
            continue
        if t.branch_point is None:
            raise ConfigError(
                f"trajectory {t.trajectory_id!r} has a parent_id but no branch_point; set the number of shared tokens"
            )
        where = f"trajectory {t.trajectory_id!r} (branch of {t.parent_id!r} at {t.branch_point})"
        if not 0 <= t.branch_point <= lengths[i]:
            raise ConfigError(
                f"{where}: the branch point lies outside its own sequence 0 of {lengths[i]} tokens"
            )
        if t.parent_id in index:
            p = index[t.parent_id]
            up = trajectories[p]
            if up.group_id != t.group_id:
                raise ConfigError(
                    f"{where} is in group {t.group_id!r} but its parent is in {up.group_id!r}; branches belong to their parent's group"
                )
            if t.branch_point > lengths[p]:
                raise ConfigError(f"{where}: the parent's sequence 0 has only {lengths[p]} tokens")
            if check_prefix and t.sequence_ids(0)[: t.branch_point] != up.sequence_ids(0)[: t.branch_point]:
                raise ConfigError(
                    f"{where}: the first {t.branch_point} token ids differ from the parent's; the record is not a branch of it"
                )
    if mode == "soft":
        return [episode_token_advantages(t, float(a)) for t, a in zip(trajectories, adv, strict=True)]
    all_parent, all_bp, n_extra = link_absent_parents(
        [t.trajectory_id for t in trajectories],
        [t.group_id for t in trajectories],
        [t.parent_id for t in trajectories],
        [t.branch_point or 0 for t in trajectories],
        lineages=[t.metadata.get("arpo_lineage") for t in trajectories],
        prefixes=[t.sequence_ids(0) for t in trajectories],
    )
    all_adv = np.concatenate([adv, np.full(n_extra, np.nan)])
    all_len = np.concatenate([lengths, np.zeros(n_extra, dtype=np.int64)])
    seq0 = arpo_attribution(all_adv, all_parent, all_bp, all_len, mode=mode)
    out = []
    for i, t in enumerate(trajectories):
        per_seq = episode_token_advantages(t, float(adv[i]))
        if np.any(seq0[i] != adv[i]):  # some of its tokens are shared (hard mode)
            per_seq[0] = (seq0[i] * np.asarray(t.sequence_mask(0), dtype=np.float64)).astype(np.float32)
        out.append(per_seq)
    return out
