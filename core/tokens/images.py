"""Images in messages: stored beside the trajectory by content hash, referenced by image parts.

A message whose observation includes a screenshot has a list ``content`` in the form Hugging Face
multimodal chat templates and processors take (Qwen2-VL, LLaVA, Idefics, verl's multimodal path)::

    {"role": "tool", "name": "browser_click", "content": [
        {"type": "text", "text": "URL: ...\\n[3] button 'Submit'"},
        {"type": "image", "image": "sha256:<64 hex digits>"}]}

The image itself is ``<dataset>/images/<sha256>.png``: written once (equal screenshots share one
file), never inline, so a JSONL line stays small and a dataset's images can be checked against
their names (``toolgym verify``). ``sha256:`` references, not paths, keep a trajectory valid when
the dataset directory moves.

Text tokens stay token-faithful: before a *text* chat template renders the messages, each image
part becomes the tokenizer's image placeholder string (:func:`placeholder_for`), so the recorded
ids hold one placeholder per image in message order. A vision-language model's ids hold each image
expanded into as many image tokens as its processor gives (:mod:`toolgym.core.tokens.vision`); a
server backend sends the pixels as :func:`data_url` parts and checks that the server expanded them
into the same ids (see ``docs/trajectory-format.md``, "Images").
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from toolgym.core.types import Message

IMAGES_DIR = "images"
"""Folder of a dataset directory that holds its images, one file per distinct image."""
REF_PREFIX = "sha256:"
GENERIC_PLACEHOLDER = "<image>"
"""The placeholder for tokenizers without image tokens (LLaVA's and verl's convention)."""
QWEN_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
"""What Qwen2-VL/Qwen2.5-VL templates write for one image; vLLM and SGLang expand ``<|image_pad|>``."""
_REF = re.compile(r"(?:sha256:)?([0-9a-f]{64})")


def image_part(sha256: str) -> dict[str, str]:
    """The content part that stands for the stored image ``sha256``."""
    return {"type": "image", "image": REF_PREFIX + sha256}


def store_image(dataset_dir: str | Path, data: bytes, *, suffix: str = ".png") -> str:
    """Write ``data`` to ``<dataset_dir>/images/<sha256><suffix>`` unless it is already there;
    return the sha256. Written to a temporary name and renamed, so a reader never sees half a file
    and concurrent writers of the same image both succeed."""
    sha = hashlib.sha256(data).hexdigest()
    folder = Path(dataset_dir) / IMAGES_DIR
    path = folder / f"{sha}{suffix}"
    if path.exists():
        return sha
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{sha}.{os.getpid()}.{id(data)}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return sha


def image_path(dataset_dir: str | Path, ref: str, *, suffix: str = ".png") -> Path:
    """The file of an image reference (``sha256:<hex>`` or the bare hex)."""
    return Path(dataset_dir) / IMAGES_DIR / f"{parse_ref(ref)}{suffix}"


def data_url(image: bytes) -> str:
    """Encoded image bytes as a ``data:`` URL (PNG unless the bytes say JPEG, GIF or WebP): how an
    image travels to a model server (OpenAI ``image_url`` parts, SGLang's ``image_data``)."""
    mime = "image/png"
    if image[:3] == b"\xff\xd8\xff":
        mime = "image/jpeg"
    elif image[:4] == b"GIF8":
        mime = "image/gif"
    elif image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        mime = "image/webp"
    return f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"


def parse_ref(ref: str) -> str:
    """The hex digest of ``sha256:<hex>``; raises ValueError for anything else."""
    match = _REF.fullmatch(ref)
    if not match:
        raise ValueError(f"not an image reference: {ref!r} (expected 'sha256:' and 64 hex digits)")
    return match.group(1)


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image"


def image_refs(messages: Sequence[Message]) -> list[str]:
    """The image references of ``messages``, in order (one per image part, repeats kept)."""
    return [str(part.get("image", "")) for m in messages for part in _parts(m) if is_image_part(part)]


def _parts(message: Message) -> Iterator[Any]:
    content = message.get("content")
    if isinstance(content, list):
        yield from content


def has_images(messages: Sequence[Message]) -> bool:
    return any(is_image_part(p) for m in messages for p in _parts(m))


Placeholder = str | Callable[[dict[str, Any]], str]
"""What an image part becomes in text: a fixed string, or one computed from the part (a VLM's
expanded image tokens, :class:`toolgym.core.tokens.vision.VisionInputs`)."""


def content_text(content: Any, placeholder: Placeholder = GENERIC_PLACEHOLDER) -> str:
    """A message's content as one string: text parts joined in order, each image part replaced
    by ``placeholder`` (or ``placeholder(part)``). Strings pass through unchanged."""
    if not isinstance(content, list):
        return "" if content is None else str(content)
    out = []
    for part in content:
        if is_image_part(part):
            out.append(placeholder if isinstance(placeholder, str) else placeholder(part))
        elif isinstance(part, dict):
            out.append(str(part.get("text", "")))
        else:
            out.append(str(part))
    return "".join(out)


OMITTED_IMAGE = "\n[an earlier screenshot, no longer shown]"
"""What an image part becomes when a history limit drops it (:func:`limit_images`)."""


def limit_images(messages: Sequence[Message], keep: int) -> list[Message]:
    """``messages`` with only their last ``keep`` image parts; each earlier one becomes the text
    part ``OMITTED_IMAGE`` (rendered as that text only) whose ``omitted_image`` keeps the reference,
    so the prompt stays bounded, says where a picture was, and the record still names every image
    a model call saw (``toolgym verify`` checks them all). Messages that lose nothing are passed as
    they are (not copied); ``keep`` must be at least 0."""
    if keep < 0:
        raise ValueError(f"keep must be 0 or more images, got {keep}")
    drop = sum(1 for m in messages for p in _parts(m) if is_image_part(p)) - keep
    if drop <= 0:
        return list(messages)
    out: list[Message] = []
    for m in messages:
        content = m.get("content")
        if drop <= 0 or not isinstance(content, list) or not any(is_image_part(p) for p in content):
            out.append(m)
            continue
        parts = []
        for part in content:
            if drop > 0 and is_image_part(part):
                parts.append(
                    {"type": "text", "text": OMITTED_IMAGE, "omitted_image": str(part.get("image", ""))}
                )
                drop -= 1
            else:
                parts.append(part)
        out.append({**m, "content": parts})
    return out


def omitted_image_refs(messages: Sequence[Message]) -> list[str]:
    """The references of the images :func:`limit_images` took out of ``messages``, in order."""
    return [
        str(part["omitted_image"])
        for m in messages
        for part in _parts(m)
        if isinstance(part, dict) and part.get("type") == "text" and part.get("omitted_image")
    ]


def flatten_images(messages: Sequence[Message], placeholder: Placeholder) -> list[Message]:
    """``messages`` with every list content turned into a string (see :func:`content_text`), for
    a text chat template. Messages with string content are passed as they are (not copied)."""
    return [
        m
        if not isinstance(m.get("content"), list)
        else {**m, "content": content_text(m["content"], placeholder)}
        for m in messages
    ]


def placeholder_for(tokenizer: Any) -> str:
    """The image placeholder for ``tokenizer``: Qwen's vision tokens when its vocabulary has them
    (Qwen2.5 text tokenizers do: the placeholder is then three special tokens, exactly what a
    Qwen-VL server expands), otherwise ``<image>``."""
    vocab: Any = None
    getter = getattr(tokenizer, "get_vocab", None)
    if callable(getter):
        try:
            vocab = getter()
        except Exception:  # a tokenizer double without a vocabulary
            vocab = None
    if vocab and all(t in vocab for t in ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")):
        return QWEN_PLACEHOLDER
    return GENERIC_PLACEHOLDER
