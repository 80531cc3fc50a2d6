"""Supervised warm start: cross-entropy on the model-written tokens of stored trajectories.

The rows are the trajectories' own token sequences (never re-tokenized); the loss covers exactly
the loss-mask-1 ids (what the policy wrote: tool calls and answers), not the prompt or the tool
results. Scripted trajectories have no logprobs, which SFT does not need. A vision-language
model's trajectories (``metadata.vision``, e.g. ``--model scripted --tokenizer tiny-vl`` screenshot
episodes) give rows that carry their stored screenshots, so the SFT forward passes see the pixels.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory
from toolgym.trajectories.store import iter_trajectories

from .batch import Row, trajectory_rows
from .trainer import PolicyTrainer


def sft_rows(
    trajectories: Iterable[Trajectory],
    *,
    min_reward: float | None = None,
    images_root: str | Path | None = None,
) -> list[Row]:
    """Rows of the trainable trajectories (with ``reward >= min_reward`` when given);
    ``images_root``: the dataset directory, for trajectories with screenshots."""
    rows: list[Row] = []
    for traj in trajectories:
        if not traj.trainable or (min_reward is not None and traj.reward < min_reward):
            continue
        rows.extend(trajectory_rows(traj, None, require_logprobs=False, images_root=images_root))
    return rows


def balance_weights(kinds: Sequence[str], power: float) -> list[float]:
    """Sampling weights that give each kind of row (e.g. the action's verb) total weight in
    proportion to ``count ** (1 - power)``: 0 keeps the data's proportions, 1 makes every kind equally
    likely, 0.5 is between. A behaviour-cloning policy otherwise learns the frequent choice (``go
    to``, 60 % of ALFWorld turns) and not the rare decisive ones (``take``, ``heat``: 1–7 %)."""
    if power < 0:
        raise ConfigError(f"balance power must be 0 or more, got {power}")
    counts = Counter(kinds)
    return [counts[k] ** -power for k in kinds]


def load_sft_rows(dataset: str | Path, *, min_reward: float | None = None) -> list[Row]:
    """Rows of a stored dataset directory (see :mod:`toolgym.trajectories.store`)."""
    rows = sft_rows(iter_trajectories(dataset), min_reward=min_reward, images_root=dataset)
    if not rows:
        raise ConfigError(
            f"{dataset} holds no trainable trajectories to learn from; collect some first (`toolgym collect`)"
        )
    return rows


def run_sft(
    trainer: PolicyTrainer,
    rows: list[Row],
    *,
    steps: int,
    batch_size: int,
    seed: int = 0,
    on_step: Callable[[int, dict[str, Any]], Any] | None = None,
    context_weight: float = 0.0,
    weights: Sequence[float] | None = None,
) -> list[float]:
    """``steps`` optimiser steps on shuffled batches of ``batch_size`` rows (epochs wrap around);
    returns the loss of each step (on the loss-masked tokens). ``context_weight``: see
    :meth:`PolicyTrainer.sft_step`. ``weights`` (one per row): draw each batch with replacement in
    proportion to them instead (see :func:`balance_weights`)."""
    if batch_size < 1:
        raise ConfigError(f"SFT batch size must be at least 1, got {batch_size}")
    if weights is not None and (
        len(weights) != len(rows) or min(weights, default=0) < 0 or sum(weights) <= 0
    ):
        raise ConfigError(f"SFT weights must be {len(rows)} non-negative numbers with a positive sum")
    rng = random.Random(seed)
    order: list[int] = []
    losses = []
    for step in range(steps):
        if weights is not None:
            order = rng.choices(range(len(rows)), weights=weights, k=batch_size)
        elif len(order) < batch_size:
            fresh = list(range(len(rows)))
            rng.shuffle(fresh)
            order.extend(fresh)
        batch = [rows[i] for i in order[:batch_size]]
        del order[:batch_size]
        metrics = trainer.sft_step(batch, context_weight=context_weight)
        losses.append(metrics["loss"])
        if on_step is not None:
            on_step(step, metrics)
    return losses
