"""GRPO: the advantage of a sample is its reward relative to the other samples of its group.

``A_i = R_i − mean(R_group)`` and, with std normalisation, ``A_i = (R_i − mean) / (std + eps)``,
where the group is every sample with the same ``group_id`` (one task instance sampled ``n`` times)
and ``std`` is the sample standard deviation (ddof = 1). Singleton groups and groups whose rewards
are all equal get advantage exactly 0 (see :func:`~toolgym.training.advantages._groups.group_normalize`).

Note for verl users: verl's ``compute_grpo_outcome_advantage`` gives a group of one mean 0 and
std 1, so a lone sample's advantage is its raw reward. toolgym gives it 0: with nothing to compare
against there is no relative signal, and a raw reward would not be on the scale of the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toolgym.core.trajectory import Trajectory

from ._groups import Keys, as_float_vector, check_length, factorize, group_normalize


def grpo_advantages(
    rewards: ArrayLike,
    group_ids: Keys,
    *,
    std_norm: bool = True,
    eps: float = 1e-6,
) -> NDArray[np.float64]:
    """Group-relative advantages, one per row of ``rewards``.

    Args:
        rewards: scalar reward per sample, shape ``(n,)``.
        group_ids: group key per sample (ints, strings, any hashable), shape ``(n,)``.
        std_norm: divide by the group's sample std plus ``eps`` (GRPO); False gives the
            mean-centred variant (Dr. GRPO, GiGPO's ``mean_norm``).
        eps: added to the std before dividing.

    Returns:
        float64 array of shape ``(n,)``; within each non-degenerate group it sums to 0.
    """
    values = as_float_vector("rewards", rewards)
    check_length("group_ids", group_ids, values.size)
    if values.size == 0:
        return np.zeros(0)
    codes, n_groups = factorize(group_ids)
    return group_normalize(values, codes, n_groups, std_norm=std_norm, eps=eps)


def grpo_trajectory_advantages(
    trajectories: Sequence[Trajectory], *, std_norm: bool = True, eps: float = 1e-6
) -> NDArray[np.float64]:
    """:func:`grpo_advantages` over ``Trajectory.reward``, grouped by ``Trajectory.group_id``.

    Every trajectory passed counts towards its group's statistics: drop untrainable ones first if
    they should not. Returns one advantage per trajectory, in input order; spread it over the
    trajectory's tokens with :func:`~toolgym.training.advantages.tokens.episode_token_advantages`.
    """
    rewards = np.fromiter((t.reward for t in trajectories), dtype=np.float64, count=len(trajectories))
    return grpo_advantages(rewards, [t.group_id for t in trajectories], std_norm=std_norm, eps=eps)
