"""Image tokens of a vision-language model: how many, and the pixels that fill them.

A Qwen2-VL/Qwen2.5-VL model sees an image as ``<|vision_start|>``, then one ``<|image_pad|>`` per
merged patch group of the resized image, then ``<|vision_end|>``; its forward pass replaces the pad
tokens' embeddings with the vision tower's output for ``pixel_values`` (``image_grid_thw`` gives
each image's grid of patches). ``VisionInputs`` does that expansion the way the model's own
image processor does, so toolgym renders the *expanded* placeholder into the text it tokenizes:
the recorded prompt ids are the ids the model is conditioned on, and the delta appended for a tool
message with a screenshot already holds its image tokens (token-faithful, see
``docs/trajectory-format.md``, "Images").

Images are read by reference (``sha256:<hex>``, see :mod:`toolgym.core.tokens.images`) from a
dataset directory; ``VisionInputs.record()`` is what a trajectory keeps so that ``toolgym verify``
can re-process the stored images and compare the image-token runs with the recorded ids.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import image_path

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"


def load_image_processor(model_dir: str | os.PathLike[str]) -> Any:
    """The image processor saved in ``model_dir`` (``preprocessor_config.json``), or None.

    Qwen2-VL's PIL implementation is used when transformers' default one needs torchvision."""
    path = Path(model_dir)
    if not (path / "preprocessor_config.json").is_file():
        return None
    try:
        from transformers import AutoImageProcessor

        return AutoImageProcessor.from_pretrained(str(path))
    except ImportError:
        return qwen_vl_image_processor_class().from_pretrained(str(path))


def qwen_vl_image_processor_class() -> Any:
    """Qwen2-VL's image processor class that needs only PIL and numpy (transformers 5 names it
    apart from the default, torchvision one; earlier versions have only this one)."""
    import transformers

    return getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor


def processor_from_record(record: dict[str, Any]) -> Any:
    """The image processor a trajectory's ``metadata.vision.processor`` describes."""
    config = {k: v for k, v in record.items() if not k.startswith("_") and k != "image_processor_type"}
    return qwen_vl_image_processor_class()(**config)


class VisionInputs:
    """Image tokens and pixel inputs for one image processor (Qwen2-VL family).

    ``load(ref)`` returns an image's encoded bytes (PNG) for a ``sha256:`` reference; by default
    from ``<root>/images/`` (``root`` may be set later: the engine sets it to the dataset directory
    of its ``artifacts_dir``). Grids are cached per reference: equal screenshots cost one resize.
    """

    def __init__(
        self,
        processor: Any,
        *,
        root: str | os.PathLike[str] | None = None,
        load: Callable[[str], bytes] | None = None,
    ) -> None:
        self.processor = processor
        self.merge = int(getattr(processor, "merge_size", 1) or 1)
        self.root = Path(root) if root is not None else None
        self._load = load
        self._grids: dict[str, tuple[int, int, int]] = {}

    def load(self, ref: str) -> bytes:
        if self._load is None and self.root is None:
            raise ConfigError(
                "a vision-language model needs the dataset directory that holds the images; "
                "collect with --out DIR (or give VisionInputs root=)"
            )
        try:
            if self._load is not None:
                return self._load(ref)
            assert self.root is not None
            return image_path(self.root, ref).read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"image {ref} cannot be read ({exc}); is the dataset directory right?"
            ) from None

    def grid(self, ref: str) -> tuple[int, int, int]:
        """The (temporal, height, width) patch grid of the stored image ``ref``."""
        if ref not in self._grids:
            self._grids[ref] = grids(self.processor, [self.load(ref)])[0]
        return self._grids[ref]

    def placeholder(self, part: dict[str, Any]) -> str:
        """The text an image part becomes: the vision markers around its run of pad tokens."""
        return expanded_placeholder(self.grid(str(part.get("image", ""))), self.merge)

    def pixel_inputs(self, images: Sequence[bytes]) -> dict[str, Any]:
        """``pixel_values`` and ``image_grid_thw`` (torch tensors) for the model's forward pass."""
        return self.processor(images=[_pil(b) for b in images], return_tensors="pt")

    def metadata(self, tokenizer: Any) -> dict[str, Any]:
        """What a trajectory records (``metadata.vision``) for ``toolgym verify`` to re-process its
        images: the processor's settings and the id of the image pad token."""
        return {
            "processor": self.processor.to_dict(),
            "image_token_id": int(tokenizer.convert_tokens_to_ids(IMAGE_PAD)),
        }


def expanded_placeholder(grid: Sequence[int], merge: int) -> str:
    return VISION_START + IMAGE_PAD * image_token_count(grid, merge) + VISION_END


def image_token_count(grid: Sequence[int], merge: int) -> int:
    t, h, w = (int(x) for x in grid)
    return t * h * w // (merge * merge)


def grids(processor: Any, images: Sequence[bytes]) -> list[tuple[int, int, int]]:
    """Each image's patch grid as ``processor`` computes it."""
    out = processor(images=[_pil(b) for b in images], return_tensors="np")["image_grid_thw"]
    return [(int(t), int(h), int(w)) for t, h, w in out]


def image_pad_runs(ids: Sequence[int], pad_id: int) -> list[int]:
    """The lengths of the runs of ``pad_id`` in ``ids``, in order."""
    runs: list[int] = []
    prev = False
    for t in ids:
        if t == pad_id:
            if prev:
                runs[-1] += 1
            else:
                runs.append(1)
        prev = t == pad_id
    return runs


def _pil(data: bytes) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    return image.convert("RGB")
