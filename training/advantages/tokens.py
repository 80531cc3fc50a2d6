"""Spread step-level or episode-level advantages over a trajectory's tokens.

A trainer needs one advantage per token, aligned with the token ids and loss mask of each
sequence (``Trajectory.sequence_ids(s)`` / ``Trajectory.sequence_mask(s)``). The functions here
return exactly that: a list with one float32 array per sequence, 0 wherever the loss mask is 0.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory


def segment_offsets(trajectory: Trajectory) -> tuple[list[int], list[int]]:
    """Start offset of each segment within its sequence, and the length of each sequence."""
    lengths = [0] * trajectory.num_sequences
    offsets = []
    for seg in trajectory.segments:
        offsets.append(lengths[seg.sequence])
        lengths[seg.sequence] += len(seg.token_ids)
    return offsets, lengths


def _spread(trajectory: Trajectory, segment_values: NDArray[np.float64]) -> list[NDArray[np.float32]]:
    """One value per segment, repeated over its tokens and multiplied by the loss mask, per sequence."""
    segments = trajectory.segments
    seq = np.fromiter((seg.sequence for seg in segments), dtype=np.int64, count=len(segments))
    size = np.fromiter((len(seg.token_ids) for seg in segments), dtype=np.int64, count=len(segments))
    out = []
    for s in range(trajectory.num_sequences):
        members = np.flatnonzero(seq == s)
        n = int(size[members].sum())
        mask = np.fromiter(
            chain.from_iterable(segments[k].loss_mask for k in members.tolist()), dtype=np.float32, count=n
        )
        out.append(np.repeat(segment_values[members].astype(np.float32), size[members]) * mask)
    return out


def episode_token_advantages(trajectory: Trajectory, advantage: float) -> list[NDArray[np.float32]]:
    """Every loss-masked token of every sequence gets ``advantage`` (GRPO, or ARPO's soft mode)."""
    return _spread(trajectory, np.full(len(trajectory.segments), float(advantage)))


def token_advantages(
    trajectory: Trajectory, step_advantages: ArrayLike, *, unassigned: float = 0.0
) -> list[NDArray[np.float32]]:
    """Per-sequence token advantages for one trajectory from one advantage per step.

    Step ``i``'s advantage goes to the tokens of the assistant segment its model call produced
    (``steps[i].llm.segment``), times that segment's loss mask. Steps without token-level data
    (no ``llm`` or ``segment < 0``, as from chat backends) place nothing. Loss-masked tokens that no
    step claims get ``unassigned`` (pass the episode advantage to give them episode-level credit).

    Raises ConfigError when the lengths disagree, or a step points at a segment that does not
    exist, is not an assistant segment, lies in another sequence than ``llm.sequence`` says, or
    is claimed by two steps.
    """
    adv = np.asarray(step_advantages, dtype=np.float64).reshape(-1)
    if adv.size != len(trajectory.steps):
        raise ConfigError(
            f"trajectory {trajectory.trajectory_id!r} has {len(trajectory.steps)} steps but "
            f"{adv.size} step advantages were given; pass one per step"
        )
    values = np.full(len(trajectory.segments), float(unassigned))
    claimed: dict[int, int] = {}
    for i, step in enumerate(trajectory.steps):
        if step.llm is None or step.llm.segment < 0:
            continue
        k = step.llm.segment
        where = f"trajectory {trajectory.trajectory_id!r} step {i}"
        if k >= len(trajectory.segments):
            raise ConfigError(
                f"{where} points at segment {k} but there are {len(trajectory.segments)}; the record is corrupt"
            )
        seg = trajectory.segments[k]
        if seg.role != "assistant":
            raise ConfigError(
                f"{where} points at segment {k}, a {seg.role!r} segment; it must be the assistant segment the call produced"
            )
        if seg.sequence != step.llm.sequence:
            raise ConfigError(
                f"{where}: segment {k} is in sequence {seg.sequence} but the call says {step.llm.sequence}"
            )
        if k in claimed:
            raise ConfigError(
                f"{where} and step {claimed[k]} both claim segment {k}; each model call has its own segment"
            )
        claimed[k] = i
        values[k] = adv[i]
    return _spread(trajectory, values)
