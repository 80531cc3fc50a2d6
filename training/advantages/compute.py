"""One entry point for trainers: token advantages for a batch of trajectories, by estimator name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory

from .arpo import arpo_token_advantages
from .grpo import grpo_trajectory_advantages
from .steps import gigpo_trajectory_advantages, graphgpo_trajectory_advantages
from .tokens import episode_token_advantages, token_advantages

Estimator = Literal["grpo", "gigpo", "arpo", "graphgpo"]
ESTIMATORS: tuple[str, ...] = ("grpo", "gigpo", "arpo", "graphgpo")


def compute_token_advantages(
    trajectories: Sequence[Trajectory], estimator: Estimator, **options: Any
) -> list[list[NDArray[np.float32]]]:
    """``result[i][s]`` holds one advantage per token of sequence ``s`` of trajectory ``i``.

    Aligned with ``trajectories[i].sequence_ids(s)`` and 0 wherever the loss mask is 0. Every
    trajectory passed counts towards its group's statistics: drop untrainable ones first.

    - ``grpo``: every assistant token gets the trajectory's GRPO advantage; options ``std_norm``, ``eps``.
    - ``gigpo``: each step's assistant tokens get ``A_E + ω·A_S``; assistant tokens no step claims
      get ``A_E``; options as :func:`~toolgym.training.advantages.gigpo.gigpo_advantages`.
    - ``arpo``: GRPO with shared-prefix attribution; options ``mode``, ``std_norm``, ``eps``, ``check_prefix``.
    - ``graphgpo``: each step's assistant tokens get ``β^E·A^E + β^G·A^G``; assistant tokens no step
      claims get ``β^E·A^E``; options as :func:`~toolgym.training.advantages.graphgpo.graphgpo_advantages`
      plus ``success_threshold`` (:func:`~toolgym.training.advantages.steps.reached_goal`).
    """
    if estimator == "grpo":
        adv = grpo_trajectory_advantages(trajectories, **options)
        return [episode_token_advantages(t, float(a)) for t, a in zip(trajectories, adv, strict=True)]
    if estimator == "gigpo":
        per = gigpo_trajectory_advantages(trajectories, **options)
        return [
            token_advantages(t, p.combined, unassigned=float(p.episode[0]) if p.episode.size else 0.0)
            for t, p in zip(trajectories, per, strict=True)
        ]
    if estimator == "arpo":
        return arpo_token_advantages(trajectories, **options)
    if estimator == "graphgpo":
        graph = graphgpo_trajectory_advantages(trajectories, **options)
        beta_e = float(options.get("episode_weight", 1.0))
        return [
            token_advantages(
                t, p.combined, unassigned=beta_e * float(p.episode[0]) if p.episode.size else 0.0
            )
            for t, p in zip(trajectories, graph, strict=True)
        ]
    raise ConfigError(f"unknown advantage estimator {estimator!r}; use one of {', '.join(ESTIMATORS)}")
