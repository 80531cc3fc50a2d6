"""The tiny vision-language model (``--model tiny-vl``): Qwen2.5-VL-shaped, random weights, built here.

``ensure_tiny_model("qwen2.5-vl")`` builds it like every tiny model (same tokenizer trainer, cache
directory and build lock, see :mod:`toolgym.core.llm.local.tiny`); this module adds what a VLM has
beyond a text model: a one-block vision tower whose merged patches feed the 64-wide text model, and
its own ``Qwen2VLImageProcessor`` (``preprocessor_config.json`` in the model directory; no
``Qwen2_5_VLProcessor``: its video half needs torchvision, and toolgym expands image tokens itself,
see :mod:`toolgym.core.tokens.vision`).

The image processor is sized for screenshots of a few dozen tokens: 8-pixel patches merged 2x2, so
one ``<|image_pad|>`` per 16x16 pixels, and an image resized to between ``MIN_PIXELS`` and
``MAX_PIXELS`` (a 160x210 MiniWoB screenshot becomes 10x13 merged patches, 130 tokens at most,
usually fewer). ``RECIPE`` is part of the family's recipe hash: changing it rebuilds the model.
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
VISION = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": PATCH_SIZE,
    "spatial_merge_size": MERGE_SIZE,
    "temporal_patch_size": TEMPORAL_PATCH_SIZE,
    "window_size": PATCH_SIZE * MERGE_SIZE * 2,
    "fullatt_block_indexes": [0],
}
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


def build_vl_weights(spec: Any, tokenizer: Any, common: dict[str, Any], out: Path) -> None:
    """Write the VLM's weights, config, image processor and processor into ``out`` (which holds
    the tokenizer already). ``common`` is the text model's config, shared with the text families."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    head_dim = spec.hidden_size // spec.num_heads
    half = head_dim // 2  # rotary frequencies, split among (temporal, height, width)
    section = [half - 2 * (half // 3), half // 3, half // 3]
    ids = {
        name: tokenizer.convert_tokens_to_ids(token)
        for name, token in (
            ("image_token_id", "<|image_pad|>"),
            ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"),
        )
    }
    text = {
        **common,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
    }
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config={**VISION, "out_hidden_size": spec.hidden_size},
        tie_word_embeddings=True,
        **ids,
    )
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out), safe_serialization=True)
    image_processor().save_pretrained(str(out))  # preprocessor_config.json
