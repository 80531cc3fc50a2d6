"""From token-faithful trajectories to the rows the local trainer trains on.

One row per token sequence of a trajectory (a trajectory that kept one conversation has one): its
ids exactly as recorded, its loss mask, the behaviour logprobs the sampler recorded (0 where the
mask is 0, or where a scripted policy wrote the ids) and one advantage per token (from
:func:`toolgym.training.advantages.compute_token_advantages`, already 0 off the mask). Nothing is
re-tokenized. Rows are padded only when a micro-batch is built, to that micro-batch's longest row.

A vision-language model's trajectory (``metadata.vision``) gives rows that carry their images
(the stored screenshots of the sequence's image-token runs, in order); ``collate`` turns them into
the model's pixel inputs and 3D rotary positions (:mod:`toolgym.core.llm.local.vlm`), exactly as
the sampler conditioned on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import image_path, image_refs
from toolgym.core.tokens.vision import image_pad_runs
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
    images: tuple[bytes, ...] = ()
    """A VLM's row: the encoded images of its image-token runs, in order; empty for text."""

    @property
    def num_tokens(self) -> int:
        """Loss-masked tokens the row contributes (the first id is never one: nothing predicts it)."""
        return int(self.loss_mask[1:].sum())


def trajectory_rows(
    trajectory: Trajectory,
    advantages: Sequence[NDArray[np.float32]] | None = None,
    *,
    require_logprobs: bool = True,
    images_root: str | Path | None = None,
) -> list[Row]:
    """The rows of one trajectory; ``advantages[s]`` aligns with sequence ``s`` (None: zeros, for SFT).

    ``require_logprobs``: refuse assistant segments without behaviour logprobs (RL needs them;
    SFT on scripted demonstrations does not). ``images_root``: the dataset directory, needed for a
    VLM's trajectory (``metadata.vision``), whose rows carry the stored images.
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
                images=_sequence_images(trajectory, s, ids, images_root),
            )
        )
    return [r for r in rows if r.num_tokens > 0]


def _sequence_images(
    trajectory: Trajectory, sequence: int, ids: list[int], root: str | Path | None
) -> tuple[bytes, ...]:
    """The images of one sequence of a VLM's trajectory (``metadata.vision.sequence_images``; for a
    record without it, as many of the messages' last images as the ids have image-token runs)."""
    vision = trajectory.metadata.get("vision")
    if not isinstance(vision, dict):
        return ()
    k = len(image_pad_runs(ids, int(vision["image_token_id"])))
    if not k:
        return ()
    per_sequence = vision.get("sequence_images")
    refs = list(per_sequence[sequence]) if per_sequence else image_refs(trajectory.messages)[-k:]
    if root is None:
        raise ConfigError(
            f"trajectory {trajectory.trajectory_id!r} was sampled from images; give images_root= "
            "(the dataset directory that holds images/)"
        )
    return tuple(image_path(root, ref).read_bytes() for ref in refs)


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
    vision: dict[str, torch.Tensor] | None = None
    """A VLM's extra forward inputs (``position_ids`` in 3D, ``pixel_values``, ``image_grid_thw``)
    when a row has images; None for text."""


def collate(
    rows: Sequence[Row],
    indices: Sequence[int],
    *,
    pad_id: int,
    device: torch.device | str = "cpu",
    vision: Callable[[list[int], Sequence[bytes]], Any] | None = None,
) -> MicroBatch:
    """Pad ``rows[i] for i in indices`` into one micro-batch; ``indices`` are the rows' mini-batch indices.

    ``vision(ids, images)``: a VLM's :func:`~toolgym.core.llm.local.vlm.image_row`, for rows with images."""
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
        vision=_vision_inputs(rows, indices, width, vision, dev),
    )


def _vision_inputs(
    rows: Sequence[Row], indices: Sequence[int], width: int, vision: Any, dev: torch.device
) -> dict[str, torch.Tensor] | None:
    if not any(rows[i].images for i in indices):
        return None
    if vision is None:
        raise ConfigError(
            "rows with images need a vision-language model (PolicyTrainer(image_processor=...))"
        )
    positions = torch.arange(width).view(1, 1, -1).repeat(3, len(indices), 1)
    pixels, grids = [], []
    for b, i in enumerate(indices):
        if rows[i].images:
            made = vision([int(t) for t in rows[i].input_ids], rows[i].images)
            positions[:, b, : made.positions.shape[-1]] = made.positions
            pixels.append(made.pixel_values)
            grids.append(made.image_grid_thw)
    return {
        "position_ids": positions.to(dev),
        "pixel_values": torch.cat(pixels).to(dev),
        "image_grid_thw": torch.cat(grids).to(dev),
    }


def micro_batches(rows: Sequence[Row], indices: Sequence[int], size: int) -> list[list[int]]:
    """Split mini-batch ``indices`` into micro-batches of at most ``size`` rows, grouping rows of
    similar length to waste little on padding (the summed gradient does not depend on the split)."""
    if size < 1:
        raise ConfigError(f"micro_batch_size must be at least 1, got {size}")
    order = sorted(indices, key=lambda i: len(rows[i].input_ids))
    return [order[k : k + size] for k in range(0, len(order), size)]
