"""The tiny vision-language models, built here like every tiny model: ``--model tiny-vl``
(Qwen2.5-VL-shaped) and ``--model tiny-qwen3-vl`` (Qwen3-VL-shaped).

``ensure_tiny_model("qwen2.5-vl")`` / ``("qwen3-vl")`` build them like every tiny model (same
tokenizer trainer, cache directory and build lock, see :mod:`toolgym.core.llm.local.tiny`); this
module adds what a VLM has beyond a text model: a one-block vision tower whose merged patches feed
the 64-wide text model, and its own ``Qwen2VLImageProcessor`` (``preprocessor_config.json`` in the
model directory; no ``Qwen2_5_VLProcessor``: its video half needs torchvision, and toolgym expands
image tokens itself, see :mod:`toolgym.core.tokens.vision`).

**Which one can learn where things are.** A click needs the target's position in pixels, read off
the image tokens. Qwen2.5-VL's tower has no absolute position embedding (only 2D rotary attention,
which compares positions but puts none into a token's features), so nothing in what the text model
reads says where a patch is: a probe trained on the tiny tower's output to give the target's point on
MiniWoB click-test/focus-text screenshots does no better than guessing each task's median point.
Qwen3-VL's tower adds a learned position embedding to every patch, and the same probe then places
the target within 4-5 pixels. ``tiny-qwen3-vl`` starts that embedding as a 2D sinusoid
(:data:`POSITION_SCALE`), so positions are told apart from the first step, and makes its random
tower's output usable at the start (:func:`init_qwen3_tower`): a white patch embeds to zero (pages
are mostly white: what differs is the content), and the last layer is rescaled so that each output
feature has mean 0 and standard deviation 1 over :data:`CALIBRATION_PAGES` synthetic page images
(rectangles and bars on white, drawn from the build's seed). Without that rescaling the tower's
output varies by about 5 % between screenshots, around a shared offset, at the scale of the text
embeddings, and a 2-layer text model fine-tuned on 1,000 screenshot episodes still clicked one fixed
point per task after 1,500 steps; with it, the same fine-tuning clicks within the target.

The image processor is sized for screenshots of a few dozen tokens: 8-pixel patches merged 2x2, so
one ``<|image_pad|>`` per 16x16 pixels, and an image resized to between ``MIN_PIXELS`` and
``MAX_PIXELS`` (a 160x210 MiniWoB screenshot is resized to 96x144 pixels: 6x9 merged patches, 54
tokens). ``RECIPE`` is part of the family's recipe hash: changing it rebuilds the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PATCH_SIZE = 8
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
MIN_PIXELS = 4 * 16 * 16
"""At least 4 image tokens per image."""
MAX_PIXELS = 64 * 16 * 16
"""At most 64 image tokens per image (one token per 16x16 pixels)."""
_TOWER = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": PATCH_SIZE,
    "spatial_merge_size": MERGE_SIZE,
    "temporal_patch_size": TEMPORAL_PATCH_SIZE,
}
"""The sizes both tiny towers share."""
VISION = {**_TOWER, "window_size": PATCH_SIZE * MERGE_SIZE * 2, "fullatt_block_indexes": [0]}
"""The vision tower's config (``Qwen2_5_VLVisionConfig``); ``out_hidden_size`` is the text width."""
RECIPE = {**VISION, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "version": 1}
"""What the family's recipe (and so the cache directory's hash) holds of the vision side."""


def image_processor() -> Any:
    """The tiny VLM's image processor (pure PIL + numpy, no torchvision needed)."""
    from ...tokens.vision import qwen_vl_image_processor_class

    return qwen_vl_image_processor_class()(
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        min_pixels=MIN_PIXELS,
        max_pixels=MAX_PIXELS,
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
    )


VISION3 = {
    **_TOWER,
    "num_position_embeddings": 256,
    "deepstack_visual_indexes": [0],
    "hidden_act": "gelu_pytorch_tanh",
}
"""``tiny-qwen3-vl``'s tower (``Qwen3VLVisionConfig``): a 16x16 table of learned positions,
interpolated to each image's patch grid, and one deep-stack feature fed to the first text layer."""
POSITION_SCALE = 0.3
"""The 2D sinusoid the position table starts as is multiplied by this (a patch's content, embedded,
is of this order: larger and positions drown what the patch shows)."""
CALIBRATION_PAGES = 200
"""Synthetic page images the tower's last layer is standardised on (:func:`init_qwen3_tower`)."""
RECIPE3 = {
    **VISION3,
    "min_pixels": MIN_PIXELS,
    "max_pixels": MAX_PIXELS,
    "position_scale": POSITION_SCALE,
    "calibration_pages": CALIBRATION_PAGES,
    "version": 1,
}
"""What ``qwen3-vl``'s recipe (and so its cache directory's hash) holds of the vision side."""


def build_vl_weights(spec: Any, tokenizer: Any, common: dict[str, Any], out: Path) -> None:
    """Write the VLM's weights, config, image processor and processor into ``out`` (which holds
    the tokenizer already). ``common`` is the text model's config, shared with the text families."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    section = _mrope_section(spec.hidden_size // spec.num_heads)
    text = {
        **common,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
    }
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config={**VISION, "out_hidden_size": spec.hidden_size},
        tie_word_embeddings=True,
        **_vision_token_ids(tokenizer),
    )
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out), safe_serialization=True)
    image_processor().save_pretrained(str(out))  # preprocessor_config.json


def build_qwen3_vl_weights(spec: Any, tokenizer: Any, common: dict[str, Any], out: Path) -> None:
    """``tiny-qwen3-vl``: as :func:`build_vl_weights`, with Qwen3-VL's tower and text model (interleaved
    3D rotary positions, a head width of its own), its tower initialised by :func:`init_qwen3_tower`."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    head_dim = spec.hidden_size // spec.num_heads
    section = _mrope_section(head_dim)
    text = {
        **{k: v for k, v in common.items() if k != "tie_word_embeddings"},
        "head_dim": head_dim,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": section,
            "mrope_interleaved": True,
        },
    }
    config = Qwen3VLConfig(
        text_config=text,
        vision_config={**VISION3, "out_hidden_size": spec.hidden_size},
        tie_word_embeddings=True,
        **_vision_token_ids(tokenizer),
    )
    model = Qwen3VLForConditionalGeneration(config)
    init_qwen3_tower(model.model.visual, image_processor(), seed=spec.seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out), safe_serialization=True)
    image_processor().save_pretrained(str(out))


def _mrope_section(head_dim: int) -> list[int]:
    """The rotary frequencies of a head, split among (temporal, height, width)."""
    half = head_dim // 2
    return [half - 2 * (half // 3), half // 3, half // 3]


def _vision_token_ids(tokenizer: Any) -> dict[str, Any]:
    return {
        name: tokenizer.convert_tokens_to_ids(token)
        for name, token in (
            ("image_token_id", "<|image_pad|>"),
            ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"),
        )
    }


def init_qwen3_tower(visual: Any, processor: Any, *, seed: int) -> None:
    """Start a random Qwen3-VL tower where a small model can learn from it (module docstring):
    positions as a 2D sinusoid, a white patch embedded as zero, and each output feature standardised
    over :data:`CALIBRATION_PAGES` synthetic pages. Deterministic: one thread, statistics in float64."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            table = visual.pos_embed.weight  # (side * side, width), row-major over the grid
            side = round(table.shape[0] ** 0.5)
            table.copy_(sinusoid_2d(side, table.shape[1]) * POSITION_SCALE)
            conv = visual.patch_embed.proj
            mean = torch.tensor(processor.image_mean, dtype=torch.float64)
            std = torch.tensor(processor.image_std, dtype=torch.float64)
            # a white pixel after the processor's normalisation
            white = ((1.0 - mean) / std).view(1, -1, 1, 1, 1)
            conv.bias.copy_(-(conv.weight.double() * white).sum((1, 2, 3, 4)).to(conv.bias.dtype))
            outs = []
            for page in synthetic_pages(CALIBRATION_PAGES, seed=seed):
                inputs = processor(images=[page], return_tensors="pt")
                out = visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
                outs.append((out if isinstance(out, torch.Tensor) else out.pooler_output).double())
            features = torch.cat(outs)
            mu, sd = features.mean(0), features.std(0) + 1e-6
            fc2 = visual.merger.linear_fc2
            fc2.weight.copy_((fc2.weight.double() / sd.unsqueeze(1)).to(fc2.weight.dtype))
            fc2.bias.copy_(((fc2.bias.double() - mu) / sd).to(fc2.bias.dtype))
    finally:
        torch.set_num_threads(threads)


def sinusoid_2d(side: int, width: int) -> Any:
    """A ``(side * side, width)`` table: row ``i * side + j`` holds sines and cosines of ``i`` (first
    half) and ``j`` (second half) at ``width // 4`` frequencies, the slowest a half turn over the grid."""
    import math

    import torch

    quarter = width // 4
    rows = []
    for i in range(side):
        for j in range(side):
            row: list[float] = []
            for a in (i, j):
                for k in range(quarter):
                    angle = math.pi * a / side * 2**k / 2
                    row += [math.sin(angle), math.cos(angle)]
            rows.append(row + [0.0] * (width - len(row)))
    return torch.tensor(rows, dtype=torch.float32)


def synthetic_pages(n: int, *, seed: int) -> list[Any]:
    """``n`` page-like images (PIL), drawn from ``seed``: a white page of one of a few sizes, often a
    coloured band at the top, and a few boxes, filled or outlined, some with dark bars for text lines.
    Only rectangles, so the same on every machine (no font)."""
    import random

    from PIL import Image, ImageDraw

    g = random.Random(seed)
    pages = []
    for _ in range(n):
        w, h = g.choice([(160, 210), (200, 260), (120, 160), (300, 200)])
        page = Image.new("RGB", (w, h), (255, 255, 255))
        draw = ImageDraw.Draw(page)
        if g.random() < 0.7:
            draw.rectangle([0, 0, w, g.randint(20, 60)], fill=tuple(g.randint(150, 255) for _ in range(3)))
        for _ in range(g.randint(1, 5)):
            x0, y0 = g.randint(0, w - 20), g.randint(0, h - 12)
            x1, y1 = g.randint(x0 + 8, min(w, x0 + 120)), g.randint(y0 + 8, min(h, y0 + 40))
            fill = tuple(g.randint(0, 255) for _ in range(3)) if g.random() < 0.5 else None
            draw.rectangle([x0, y0, x1, y1], fill=fill, outline=tuple(g.randint(0, 200) for _ in range(3)))
            if g.random() < 0.5:  # a line of "text"
                draw.rectangle([x0 + 2, y0 + 2, min(x1, x0 + 2 + g.randint(10, 60)), y0 + 5], fill=(0, 0, 0))
        pages.append(page)
    return pages
