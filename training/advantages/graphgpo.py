"""GraphGPO (Graph-based Group Policy Optimization, arXiv 2605.26684), on a flat step table.

One row per step. Within one episode group G (same task instance, ``group_id``) the steps of all
its trajectories are merged into one directed state-transition graph, and each step is credited
by how close to the goal its transition leads, whatever became of the trajectory that took it.

- Nodes: the anchor states (the environment state before an action), keyed exactly as GiGPO keys
  its step groups (:func:`~toolgym.training.advantages.gigpo.step_groups`: same episode group and
  the same anchor, or anchor texts merged by ``similarity_threshold``), so two episode groups never
  share a node. Each group has one goal node: "the task was solved".
- Edges: step t of a trajectory leads from its anchor to the anchor of step t + 1 (rows ordered by
  ``step_index``); the last step of a successful trajectory leads to the goal node. Repeated visits
  and self-loops (an action that leaves the state as it was) are ordinary edges. Every edge costs 1,
  as in all of the paper's experiments.
- Distance (§4): ``d(s)`` is the length of the shortest path from ``s`` to the goal node, found by a
  breadth-first search backwards from the goal; ``d(goal) = 0``. A state with no path to the goal
  gets ``d_max + 1``, ``d_max`` being the largest finite distance in its group.
- Graph return of a step ``s → s'`` (the reference recipe's form): ``R^G = r_goal · ω^d(s')``; with
  ``normalize_distance`` it is ``r_goal · ω^(d(s') − d(s) + 1)``, which scores the reduction of the
  distance rather than the proximity it reaches. The paper's Eq. 4 writes ``r_goal · ω^(d(s') + c)``,
  which with unit costs is the default times ω.
- Step advantage: ``A^G = (R^G − mean_S R^G) / F_norm`` over the step group S of steps that leave
  the same state (GiGPO's step groups; a state left several times contributes every visit).
  ``F_norm`` is the sample std + eps (``mean_std_norm``) or 1 (``mean_norm``).
- Episode advantage: ``A^E`` exactly as GiGPO's (Eq. 3 of the GiGPO paper) over ``episode_rewards``;
  ``episode_stats="step"`` weights each trajectory by its length, as verl-agent's shared GiGPO code
  does by default (see :mod:`.gigpo`).
- Combined: ``A = β^E · A^E + β^G · A^G`` (``episode_weight``, ``step_weight``).

All steps of a step group leave the same state ``s``, so ``ω^d(s')`` ranks them as the distance
reduction ``d(s) − d(s')`` does: a step towards the goal beats its siblings, a detour or a loop
loses to them, in a failed trajectory as in a successful one. The three forms of ``R^G`` above
differ within a step group by a constant factor only, so under ``mean_std_norm`` they give the same
advantages (up to eps); under ``mean_norm`` they scale them differently.

Defaults follow the reference recipe's (verl-agent ``recipe/GraphGPO``, its README): ω = 0.1 (that
recipe's ``algorithm.gamma``), ``r_goal`` = 10, β^G = β^E = 1, ``mean_std_norm`` at both levels,
``normalize_distance`` off, exact anchors. Note that ω here is the distance discount, not the step
weight that GiGPO calls ω.

A group with no successful trajectory has no goal: every state is unreachable, so all its graph
returns are equal and ``A^G = 0``; its steps get ``β^E · A^E``, GRPO-style credit (0 if its episode
rewards are equal too). Degenerate groups (a state left once, equal values) get exactly 0, as in
GiGPO here.

Sources and our choices. The definitions above come from the paper (§4, "Proposed Method") and the
reference recipe's README; the reference code itself (``recipe/GraphGPO/core_graph.py``) was not
available to us, so these conventions are ours:

- A trajectory's last step leads to the goal if it succeeded, else to a dead-end node of its own:
  a step records the state before its action, not after, so the state a failed trajectory ended
  in is unknown here. The reference uses the observation after the last action, which can coincide
  with a state of another trajectory (a truncated episode that stopped on a good state); we treat
  that state as unreachable.
- Success is an input (``success``); the trajectory layer reads it from the environment (see
  :func:`~toolgym.training.advantages.steps.reached_goal`).
- In a group without success ``d_max`` is taken as 0, so every distance is 1 (any constant gives
  the same advantages: none).
- ``invalid_penalty`` (default 0, off) is subtracted from the graph return of an invalid step, as
  GiGPO's ``penalty_on="return"``; the paper's graph return has no such term, and how the reference
  trainer applies verl-agent's invalid-action penalty to it is not known to us.
- Rows with an empty or ``None`` anchor are nodes of their own (never merged), as they are
  singleton step groups in GiGPO.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toolgym.core.errors import ConfigError

from ._groups import Keys, Mode, as_float_vector, check_length, check_mode, factorize, group_normalize
from .gigpo import _check_constant_per_episode, _episode_order, step_groups


class GraphGPOAdvantages(NamedTuple):
    """Per-row advantages and graph distances; unpacks as ``episode, step, combined, distance, next_distance``."""

    episode: NDArray[np.float64]
    """A^E of the row's trajectory (before weighting)."""
    step: NDArray[np.float64]
    """A^G of the row within the steps that leave the same state (before weighting)."""
    combined: NDArray[np.float64]
    """β^E · A^E + β^G · A^G: what the policy loss uses."""
    distance: NDArray[np.float64]
    """d(s): distance from the row's state to the goal (``d_max + 1`` when it cannot reach it)."""
    next_distance: NDArray[np.float64]
    """d(s'): the same for the state the step led to (0 for the goal)."""


def _next_nodes(
    node: NDArray[np.int64],
    n_nodes: int,
    ep_codes: NDArray[np.int64],
    step_index: ArrayLike,
    g_codes: NDArray[np.int64],
    n_groups: int,
    success: NDArray[np.bool_],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Each row's target node, each node's group, and the goal nodes that some edge reaches.

    Node codes: ``[0, n_nodes)`` anchor states, ``n_nodes + g`` the goal of group g, then one dead
    end per trajectory that did not succeed.
    """
    n = node.size
    order, remaining = _episode_order(ep_codes, np.asarray(step_index, dtype=np.int64).reshape(-1))
    sorted_node = node[order]
    target_sorted = np.empty(n, dtype=np.int64)
    inner = np.flatnonzero(remaining > 0)
    target_sorted[inner] = sorted_node[inner + 1]
    ends = np.flatnonzero(remaining == 0)
    end_rows = order[ends]
    won = success[end_rows]
    end_groups = g_codes[end_rows]
    target_sorted[ends] = np.where(won, n_nodes + end_groups, n_nodes + n_groups + np.arange(ends.size))
    target = np.empty(n, dtype=np.int64)
    target[order] = target_sorted
    anchor_group = np.empty(n_nodes, dtype=np.int64)
    anchor_group[node] = g_codes
    node_group = np.concatenate([anchor_group, np.arange(n_groups, dtype=np.int64), end_groups])
    goals = n_nodes + np.unique(end_groups[won])
    return target, node_group, goals


def goal_distances(
    source: NDArray[np.int64],
    target: NDArray[np.int64],
    node_group: NDArray[np.int64],
    n_groups: int,
    goals: NDArray[np.int64],
) -> NDArray[np.float64]:
    """Unit-cost shortest distance from every node to its group's goal; ``d_max + 1`` where there is no path.

    One edge per row (``source → target``). Level-synchronous breadth-first search backwards from
    all goals at once (each group's nodes reach only their own goal): every pass is one vectorised
    sweep over the edges, and there are as many passes as the longest finite distance.
    """
    dist = np.full(node_group.size, np.inf)
    dist[goals] = 0.0
    level = 0.0
    while True:
        fresh = source[(dist[target] == level) & np.isinf(dist[source])]
        if fresh.size == 0:
            break
        level += 1.0
        dist[fresh] = level
    finite = np.isfinite(dist)
    d_max = np.zeros(n_groups)
    np.maximum.at(d_max, node_group[finite], dist[finite])
    return np.where(finite, dist, d_max[node_group] + 1.0)


def graphgpo_advantages(
    episode_index: Keys,
    group_ids: Keys,
    step_index: ArrayLike,
    anchors: ArrayLike,
    valid: ArrayLike | None,
    success: ArrayLike,
    episode_rewards: ArrayLike,
    *,
    omega: float = 0.1,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    mode: Mode = "mean_std_norm",
    goal_reward: float = 10.0,
    normalize_distance: bool = False,
    invalid_penalty: float = 0.0,
    similarity_threshold: float | None = None,
    episode_stats: Literal["trajectory", "step"] = "trajectory",
    eps: float = 1e-6,
) -> GraphGPOAdvantages:
    """GraphGPO advantages for a step table (one row per step; see the module docstring).

    Args:
        episode_index: trajectory key per row (any hashable); rows with equal keys are one trajectory.
        group_ids: episode-group key per row (task instance); constant within a trajectory. Each
            group gets its own graph.
        step_index: position of the step in its trajectory; orders the rows into transitions.
        anchors: state before the step, per row (str, bytes, int, tuple); empty/None: a node of its own.
        valid: False where the action was invalid (only used by ``invalid_penalty``); None: all valid.
        success: whether the row's trajectory solved its task (constant within a trajectory); the
            last step of a successful trajectory leads to the goal node.
        episode_rewards: the trajectory's return ``R(τ)`` on each of its rows, for ``A^E``.
        omega: distance discount ω in (0, 1]; smaller gives steeper differences between distances.
        step_weight: β^G, weight of the graph (step) advantage.
        episode_weight: β^E, weight of the episode advantage.
        mode: ``mean_std_norm`` (divide by std + eps) or ``mean_norm`` (centre only), both levels.
        goal_reward: ``r_goal`` > 0, the scale of the graph returns (cancels under ``mean_std_norm``).
        normalize_distance: score ``d(s') − d(s) + 1`` (progress) instead of ``d(s')`` (proximity).
        invalid_penalty: subtracted from an invalid step's graph return (≥ 0; 0, the default, disables it).
        similarity_threshold: None for exact anchors, else merge anchor texts with ratio ≥ it.
        episode_stats: ``trajectory`` (each trajectory once) or ``step`` (once per row), as GiGPO's.
        eps: added to the std in ``mean_std_norm``.
    """
    check_mode(mode)
    if not 0.0 < omega <= 1.0:
        raise ConfigError(f"omega (GraphGPO's distance discount) must be in (0, 1], got {omega}")
    if not goal_reward > 0.0:
        raise ConfigError(
            f"goal_reward must be > 0 (the graph return of reaching the goal), got {goal_reward}"
        )
    if invalid_penalty < 0:
        raise ConfigError(f"invalid_penalty must be ≥ 0 (it is subtracted), got {invalid_penalty}")
    if episode_stats not in ("trajectory", "step"):
        raise ConfigError(f"episode_stats must be 'trajectory' or 'step', got {episode_stats!r}")
    ep_r = as_float_vector("episode_rewards", episode_rewards)
    n = ep_r.size
    for name, arr in (
        ("episode_index", episode_index),
        ("group_ids", group_ids),
        ("step_index", step_index),
        ("anchors", anchors),
        ("success", success),
    ):
        check_length(name, arr, n)
    if n == 0:
        empty = np.zeros(0)
        return GraphGPOAdvantages(empty, empty.copy(), empty.copy(), empty.copy(), empty.copy())
    won = np.asarray(success, dtype=bool).reshape(-1)
    invalid = np.zeros(n, dtype=bool) if valid is None else ~np.asarray(valid, dtype=bool).reshape(-1)
    check_length("valid", invalid, n)
    std_norm = mode == "mean_std_norm"

    ep_codes, n_ep = factorize(episode_index)
    g_codes, n_groups = factorize(group_ids)
    _check_constant_per_episode("group_ids", g_codes.astype(np.float64), ep_codes, n_ep)
    _check_constant_per_episode("episode_rewards", ep_r, ep_codes, n_ep)
    _check_constant_per_episode("success", won.astype(np.float64), ep_codes, n_ep)

    # Episode level, as GiGPO's.
    if episode_stats == "trajectory":
        _, first = np.unique(ep_codes, return_index=True)
        per_ep = group_normalize(ep_r[first], g_codes[first], n_groups, std_norm=std_norm, eps=eps)
        a_episode = per_ep[ep_codes]
    else:
        a_episode = group_normalize(ep_r, g_codes, n_groups, std_norm=std_norm, eps=eps)

    # Graph level: nodes are GiGPO's step groups, so a step group is "the steps leaving one node".
    node, n_nodes = step_groups(g_codes, anchors, similarity_threshold)
    target, node_group, goals = _next_nodes(node, n_nodes, ep_codes, step_index, g_codes, n_groups, won)
    dist = goal_distances(node, target, node_group, n_groups, goals)
    d_from, d_to = dist[node], dist[target]
    exponent = d_to - d_from + 1.0 if normalize_distance else d_to
    returns = goal_reward * np.power(float(omega), exponent) - invalid_penalty * invalid
    a_step = group_normalize(returns, node, n_nodes, std_norm=std_norm, eps=eps)
    combined = episode_weight * a_episode + step_weight * a_step
    return GraphGPOAdvantages(a_episode, a_step, combined, d_from, d_to)
