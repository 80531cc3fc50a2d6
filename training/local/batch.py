"""From token-faithful trajectories to the rows the local trainer trains on.

One row per token sequence of a trajectory (a trajectory that kept one conversation has one): its
ids exactly as recorded, its loss mask, the behaviour logprobs the sampler recorded (0 where the
mask is 0, or where a scripted policy wrote the ids) and one advantage per token (from
:func:`toolgym.training.advantages.compute_token_advantages`, already 0 off the mask). Nothing is
re-tokenized. Rows are padded only when a micro-batch is built, to that micro-batch's longest row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory


@dataclass(slots=True)
class Row:
    """One token sequence. All arrays have the sequence's length."""

    input_ids: NDArray[np.int64]
    loss_mask: NDArray[np.int8]
    """1 on model-sampled ids (trained on), 0 on prompt, tool and environment ids."""
    old_logprobs: NDArray[np.float32]
    """Behaviour logprobs of the sampled ids (temperature-scaled), 0 elsewhere."""
    advantages: NDArray[np.float32]
    """0 wherever ``loss_mask`` is 0."""
    trajectory_id: str = ""
    rollout_logprobs: NDArray[np.float32] | None = None
    """With truncated importance sampling: the sampler's logprobs, while ``old_logprobs`` holds the
    trainer's own recomputation (see :meth:`PolicyTrainer.ppo_update`); None otherwise."""

    @property
    def num_tokens(self) -> int:
        """Loss-masked tokens the row contributes (the first id is never one: nothing predicts it)."""
        return int(self.loss_mask[1:].sum())


def trajectory_rows(
    trajectory: Trajectory,
    advantages: Sequence[NDArray[np.float32]] | None = None,
    *,
    require_logprobs: bool = True,
) -> list[Row]:
    """The rows of one trajectory; ``advantages[s]`` aligns with sequence ``s`` (None: zeros, for SFT).

    ``require_logprobs``: refuse assistant segments without behaviour logprobs (RL needs them;
    SFT on scripted demonstrations does not).
    """
    if not trajectory.trainable:
        raise ConfigError(
            f"trajectory {trajectory.trajectory_id!r} is not trainable (status {trajectory.status}, "
            f"token_faithful={trajectory.token_faithful}); filter with `t.trainable` first"
        )
    rows = []
    for s in range(trajectory.num_sequences):
        ids: list[int] = []
        mask: list[int] = []
        logps: list[float] = []
        for seg in trajectory.segments:
            if seg.sequence != s:
                continue
            ids.extend(seg.token_ids)
            mask.extend(seg.loss_mask)
            if seg.logprobs is not None:
                logps.extend(seg.logprobs)
            elif require_logprobs and any(seg.loss_mask):
                raise ConfigError(
                    f"trajectory {trajectory.trajectory_id!r} has sampled tokens without logprobs; "
                    "PPO needs the behaviour logprobs: collect with a sampling backend (not a scripted or chat policy)"
                )
            else:
                logps.extend([0.0] * len(seg.token_ids))
        mask_arr = np.asarray(mask, dtype=np.int8)
        if advantages is None:
            adv = np.zeros(len(ids), dtype=np.float32)
        else:
            adv = np.asarray(advantages[s], dtype=np.float32)
            if adv.shape != (len(ids),):
                raise ConfigError(
                    f"trajectory {trajectory.trajectory_id!r} sequence {s}: {adv.size} advantages for {len(ids)} tokens"
                )
        rows.append(
            Row(
                np.asarray(ids, dtype=np.int64),
                mask_arr,
                np.asarray(logps, dtype=np.float32) * mask_arr,
                adv * mask_arr,
                trajectory.trajectory_id,
            )
        )
    return [r for r in rows if r.num_tokens > 0]


@dataclass(slots=True)
class MicroBatch:
    """Right-padded tensors for one forward pass, plus flat per-target-token tensors.

    Target token ``j`` is ``input_ids[b, t]`` with ``loss_mask[b, t] == 1`` (t ≥ 1), predicted from
    position ``t − 1``; ``rows[j]`` is its row's index in the mini-batch.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    target_mask: torch.Tensor
    """Shape ``[B, T-1]``: which positions ``t-1`` predict a loss-masked token at ``t``."""
    targets: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    rows: torch.Tensor
    rollout_logprobs: torch.Tensor | None = None
    """Flat, like ``old_logprobs``; present only when every row has ``rollout_logprobs``."""


def collate(
    rows: Sequence[Row], indices: Sequence[int], *, pad_id: int, device: torch.device | str = "cpu"
) -> MicroBatch:
    """Pad ``rows[i] for i in indices`` into one micro-batch; ``indices`` are the rows' mini-batch indices."""
    if not indices:
        raise ConfigError("a micro-batch needs at least one row")
    width = max(len(rows[i].input_ids) for i in indices)
    n = len(indices)
    ids = np.full((n, width), pad_id, dtype=np.int64)
    att = np.zeros((n, width), dtype=np.int64)
    mask = np.zeros((n, width), dtype=bool)
    old = np.zeros((n, width), dtype=np.float32)
    adv = np.zeros((n, width), dtype=np.float32)
    row_ix = np.zeros((n, width), dtype=np.int64)
    with_rollout = all(rows[i].rollout_logprobs is not None for i in indices)
    rollout = np.zeros((n, width), dtype=np.float32) if with_rollout else None
    for b, i in enumerate(indices):
        r = rows[i]
        k = len(r.input_ids)
        ids[b, :k] = r.input_ids
        att[b, :k] = 1
        mask[b, :k] = r.loss_mask.astype(bool)
        old[b, :k] = r.old_logprobs
        adv[b, :k] = r.advantages
        row_ix[b, :] = i
        if rollout is not None:
            rollout[b, :k] = rows[i].rollout_logprobs
    mask[:, 0] = False  # nothing predicts the first id
    target = mask[:, 1:]
    dev = torch.device(device)
    return MicroBatch(
        input_ids=torch.from_numpy(ids).to(dev),
        attention_mask=torch.from_numpy(att).to(dev),
        target_mask=torch.from_numpy(target).to(dev),
        targets=torch.from_numpy(ids[:, 1:][target]).to(dev),
        old_logprobs=torch.from_numpy(old[:, 1:][target]).to(dev),
        advantages=torch.from_numpy(adv[:, 1:][target]).to(dev),
        rows=torch.from_numpy(row_ix[:, 1:][target]).to(dev),
        rollout_logprobs=None if rollout is None else torch.from_numpy(rollout[:, 1:][target]).to(dev),
    )


def micro_batches(rows: Sequence[Row], indices: Sequence[int], size: int) -> list[list[int]]:
    """Split mini-batch ``indices`` into micro-batches of at most ``size`` rows, grouping rows of
    similar length to waste little on padding (the summed gradient does not depend on the split)."""
    if size < 1:
        raise ConfigError(f"micro_batch_size must be at least 1, got {size}")
    order = sorted(indices, key=lambda i: len(rows[i].input_ids))
    return [order[k : k + size] for k in range(0, len(order), size)]
