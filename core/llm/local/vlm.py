"""What a local vision-language model (Qwen2-VL/Qwen2.5-VL family) needs beyond a causal LM.

Its forward pass takes ``pixel_values`` and ``image_grid_thw`` beside the ids and puts the vision
tower's output where the ids hold ``<|image_pad|>``; its rotary positions are three-dimensional
(temporal, height, width) over image tokens and advance by less than one per image token, so a
row's text positions after an image are shifted by ``rope_delta`` (``get_rope_index``). The
continuous batch and the local trainer both compute positions here, per row, from the row's own
ids, so sampling and training condition the model identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...errors import ConfigError, LLMError
from ...tokens.vision import image_pad_runs, image_token_count


def is_vlm(model: Any) -> bool:
    """True for a model whose forward takes images (has a vision config and Qwen-VL's rope index)."""
    config = getattr(model, "config", None)
    return getattr(config, "vision_config", None) is not None and hasattr(
        getattr(model, "model", None), "get_rope_index"
    )


@dataclass(slots=True)
class ImageRow:
    """One prompt's image inputs: ``pixel_values`` of its images in order, their grids, its
    rotary positions ``(3, len(ids))`` and the shift of the positions that follow the prompt."""

    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    positions: torch.Tensor
    rope_delta: int


def image_row(model: Any, processor: Any, ids: Sequence[int], images: Sequence[bytes]) -> ImageRow:
    """Process ``images`` and check the prompt holds exactly their image tokens, in order.

    Raises ``LLMError`` when the runs of ``<|image_pad|>`` in ``ids`` do not match the images (the
    prompt was rendered for other images, or with another processor)."""
    from ...tokens.vision import _pil

    config = model.config
    merge = int(config.vision_config.spatial_merge_size)
    inputs = processor(images=[_pil(b) for b in images], return_tensors="pt")
    grid = inputs["image_grid_thw"]
    want = [image_token_count(g.tolist(), merge) for g in grid]
    have = image_pad_runs(ids, int(config.image_token_id))
    if have != want:
        raise LLMError(
            f"the prompt holds image-token runs {have} but its {len(images)} image(s) need {want}; "
            "render the prompt with the model's image processor (ChatFormat(vision=...))"
        )
    positions, delta = rope_positions(model, ids, grid)
    return ImageRow(inputs["pixel_values"], grid, positions, delta)


def rope_positions(model: Any, ids: Sequence[int], grid: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """The model's 3D rotary positions of one unpadded row ``(3, len(ids))`` and its delta."""
    tensor = torch.tensor([list(ids)], dtype=torch.long)
    types = (tensor == int(model.config.image_token_id)).int()
    positions, delta = model.model.get_rope_index(tensor, types, image_grid_thw=grid)
    return positions[:, 0], int(delta.reshape(-1)[0])


def freeze_vision_tower(model: Any) -> int:
    """Keep the vision tower's weights out of training (``requires_grad`` off: an optimiser built after
    this does not hold them), as verl's ``actor.freeze_vision_tower`` does; returns the tensors frozen."""
    visual = getattr(getattr(model, "model", None), "visual", None)
    if visual is None:
        raise ConfigError(
            "freeze_vision_tower needs a vision-language model (one with a vision tower); this one is text-only"
        )
    frozen = 0
    for p in visual.parameters():
        p.requires_grad_(False)
        frozen += 1
    return frozen
