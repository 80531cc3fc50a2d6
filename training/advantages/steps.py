"""From trajectories to the step table and back: the trajectory layer of GiGPO and GraphGPO."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toolgym.core.trajectory import Trajectory

from ._groups import object_vector
from .gigpo import GiGPOAdvantages, gigpo_advantages
from .graphgpo import GraphGPOAdvantages, graphgpo_advantages


@dataclass(frozen=True)
class StepTable:
    """One row per step of a list of trajectories, in trajectory order then step order."""

    trajectory: NDArray[np.int64]
    """Index of the row's trajectory in the list given to :func:`step_table`."""
    step: NDArray[np.int64]
    """Position of the row's step in ``Trajectory.steps``."""
    group_ids: NDArray[np.object_]
    """``Trajectory.group_id``."""
    step_index: NDArray[np.int64]
    """``Step.index``."""
    step_rewards: NDArray[np.float64]
    """``Step.step_reward``."""
    anchors: NDArray[np.object_]
    """``Step.anchor``."""
    valid: NDArray[np.bool_]
    """``Step.valid``."""
    episode_rewards: NDArray[np.float64]
    """``Trajectory.reward`` of the row's trajectory."""

    def __len__(self) -> int:
        return int(self.trajectory.size)


def step_table(trajectories: Sequence[Trajectory]) -> StepTable:
    """Flatten the steps of ``trajectories`` into a :class:`StepTable`.

    Trajectories without steps contribute no rows, so they take no part in GiGPO's statistics.
    """
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.int64, count=len(trajectories))
    n = int(counts.sum())
    traj = np.repeat(np.arange(len(trajectories), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    steps = [s for t in trajectories for s in t.steps]
    group_ids = object_vector([t.group_id for t in trajectories])[traj]
    episode_rewards = np.fromiter(
        (t.reward for t in trajectories), dtype=np.float64, count=len(trajectories)
    )[traj]
    return StepTable(
        trajectory=traj,
        step=np.arange(n, dtype=np.int64) - starts[traj],
        group_ids=group_ids,
        step_index=np.fromiter((s.index for s in steps), dtype=np.int64, count=n),
        step_rewards=np.fromiter((s.step_reward for s in steps), dtype=np.float64, count=n),
        anchors=object_vector([s.anchor for s in steps]),
        valid=np.fromiter((s.valid for s in steps), dtype=bool, count=n),
        episode_rewards=episode_rewards,
    )


def gigpo_trajectory_advantages(trajectories: Sequence[Trajectory], **options: Any) -> list[GiGPOAdvantages]:
    """GiGPO over ``trajectories``: per trajectory, arrays aligned with its ``steps``.

    Episode groups are ``Trajectory.group_id``, episode returns ``Trajectory.reward``, immediate
    rewards ``Step.step_reward``, anchors ``Step.anchor``, validity ``Step.valid``. ``options`` are
    the keyword arguments of :func:`~toolgym.training.advantages.gigpo.gigpo_advantages` (gamma,
    omega, mode, invalid_penalty, penalty_on, similarity_threshold, episode_stats, eps). Map the
    result onto tokens with :func:`~toolgym.training.advantages.tokens.token_advantages`.
    """
    table = step_table(trajectories)
    adv = gigpo_advantages(
        table.trajectory,
        table.group_ids,
        table.step_index,
        table.step_rewards,
        table.anchors,
        table.valid,
        table.episode_rewards,
        **options,
    )
    bounds = np.cumsum([len(t.steps) for t in trajectories])[:-1]
    parts = [np.split(a, bounds) for a in adv]
    return [GiGPOAdvantages(e, s, c) for e, s, c in zip(*parts, strict=True)]


def reached_goal(trajectory: Trajectory, success_threshold: float | None = None) -> bool:
    """Whether ``trajectory`` solved its task: GraphGPO's goal.

    With ``success_threshold``: ``Trajectory.reward >= success_threshold``. Otherwise the last
    step's ``info["won"]`` when the environment reports it (ALFWorld, WebShop: a partial WebShop
    score is not a success), else ``terminated`` with a positive reward.
    """
    if success_threshold is not None:
        return trajectory.reward >= success_threshold
    won = trajectory.steps[-1].info.get("won") if trajectory.steps else None
    if isinstance(won, bool):
        return won
    return trajectory.terminated and trajectory.reward > 0


def graphgpo_trajectory_advantages(
    trajectories: Sequence[Trajectory], *, success_threshold: float | None = None, **options: Any
) -> list[GraphGPOAdvantages]:
    """GraphGPO over ``trajectories``: per trajectory, arrays aligned with its ``steps``.

    Graphs and episode groups are per ``Trajectory.group_id``, states ``Step.anchor``, episode
    returns ``Trajectory.reward``, validity ``Step.valid``, success :func:`reached_goal` (with
    ``success_threshold``). ``options`` are the keyword arguments of
    :func:`~toolgym.training.advantages.graphgpo.graphgpo_advantages` (omega, step_weight,
    episode_weight, mode, goal_reward, normalize_distance, invalid_penalty, similarity_threshold,
    episode_stats, eps). Map the result onto tokens with
    :func:`~toolgym.training.advantages.tokens.token_advantages`.
    """
    if not trajectories:
        return []
    table = step_table(trajectories)
    won = np.fromiter(
        (reached_goal(t, success_threshold) for t in trajectories), dtype=bool, count=len(trajectories)
    )
    adv = graphgpo_advantages(
        table.trajectory,
        table.group_ids,
        table.step_index,
        table.anchors,
        table.valid,
        won[table.trajectory],
        table.episode_rewards,
        **options,
    )
    bounds = np.cumsum([len(t.steps) for t in trajectories])[:-1]
    parts = [np.split(a, bounds) for a in adv]
    return [GraphGPOAdvantages(*arrays) for arrays in zip(*parts, strict=True)]
