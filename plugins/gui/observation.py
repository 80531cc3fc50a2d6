"""Screenshot observations for GUI environments (``observation=axtree|screenshot|both``).

- ``axtree`` (default): the accessibility-tree text only, as the browser tools return it.
- ``both``: that text, then a screenshot of the page as an image part.
- ``screenshot``: the screenshot, with the [id] of every element of the tree drawn on it
  (set-of-marks, so element-level tools stay usable), and only the text lines that are not
  elements (notes, errors, tabs, URL, scroll position).

The screenshot is taken by the environment after the tools ran (one driver call: observation,
marks, PNG), copied out of the sandbox and stored by content hash in the dataset directory
(``toolgym.core.tokens.images``); the message holds ``{"type": "image", "image": "sha256:..."}``.
It is attached to the last tool message of a turn: the page as the turn left it.

Settings beside the mode (:class:`Screenshots`): ``screenshot_scale`` resizes the image (on the
host, bilinear; 1 keeps the browser's PNG byte for byte) and ``max_images`` bounds how many
screenshots a prompt keeps (``Env.max_images``: older ones become a short text, in a new token
sequence). In ``screenshot`` and ``both`` modes the environment also offers the coordinate tools
(``browser_click_at``, ``browser_type_at``): points in the latest screenshot's pixels, which the
driver maps to the page's CSS pixels and refuses outside that screenshot or the viewport.
"""

from __future__ import annotations

import asyncio
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from toolgym import ConfigError, Message, Sandbox, SandboxError, image_part, store_image

from .tools import BrowserConfig, call_driver

Observation = Literal["axtree", "screenshot", "both"]
OBSERVATIONS: tuple[Observation, ...] = ("axtree", "screenshot", "both")
_ELEMENT_LINE = re.compile(r"^\s*\[\d+\]")
MARKS_NOTE = (
    "The page is shown as a screenshot; each element's [id] is drawn on it in a small yellow label. "
    "Use those ids with the browser tools."
)


AXTREE_NOTE = "The page is shown as an accessibility tree: each line is [id] role 'name'."


COORDINATES_NOTE = (
    "You may also act at a point of the latest screenshot with browser_click_at and browser_type_at, "
    "giving x and y in the screenshot's pixels (0, 0 is its top-left corner)."
)
MIN_SCALE, MAX_SCALE = 0.1, 4.0
"""The range of ``screenshot_scale``."""


def system_prompt_for(mode: Observation, prompt: str) -> str:
    """An environment's system prompt for ``mode``: in ``screenshot`` mode the sentence about the
    accessibility tree (``AXTREE_NOTE``) says how the ids appear on the image instead; both image
    modes add how to act by coordinates (``COORDINATES_NOTE``)."""
    if mode == "axtree":
        return prompt
    if mode == "screenshot":
        prompt = (
            prompt.replace(AXTREE_NOTE, MARKS_NOTE) if AXTREE_NOTE in prompt else f"{prompt} {MARKS_NOTE}"
        )
    return f"{prompt} {COORDINATES_NOTE}"


def parse_observation(value: str) -> Observation:
    if value not in OBSERVATIONS:
        raise ConfigError(f"observation must be one of {', '.join(OBSERVATIONS)}, got {value!r}")
    return cast(Observation, value)


@dataclass(frozen=True, slots=True)
class Screenshots:
    """What a GUI environment shows the model (its ``observation=``, ``screenshot_scale=`` and
    ``max_images=`` options, checked by :meth:`parse`)."""

    mode: Observation = "axtree"
    scale: float = 1.0
    """Image pixels per CSS pixel of the page (1: the browser's own screenshot)."""
    max_images: int | None = None
    """The most screenshots a prompt keeps (None: all)."""

    @classmethod
    def parse(
        cls, observation: str, scale: str | float | None = None, max_images: str | int | None = None
    ) -> Screenshots:
        mode = parse_observation(observation)
        if mode == "axtree" and (scale is not None or max_images is not None):
            given = "screenshot_scale" if scale is not None else "max_images"
            raise ConfigError(f"{given} applies to screenshots; set observation=screenshot or both too")
        return cls(mode, _scale(scale), _max_images(max_images))


def _scale(value: str | float | None) -> float:
    if value is None:
        return 1.0
    try:
        scale = float(value)
    except (TypeError, ValueError):
        scale = float("nan")
    if not MIN_SCALE <= scale <= MAX_SCALE:  # also refuses nan
        raise ConfigError(
            f"screenshot_scale must be a number from {MIN_SCALE:g} to {MAX_SCALE:g} (image pixels per "
            f"page pixel), got {value!r}"
        )
    return scale


def _max_images(value: str | int | None) -> int | None:
    if value is None or value == "all":
        return None
    try:
        keep = int(value)
        if isinstance(value, bool) or str(keep) != str(value).strip():
            raise ValueError
    except (TypeError, ValueError):
        keep = 0
    if keep < 1:
        raise ConfigError(f"max_images must be 'all' or a whole number of at least 1, got {value!r}")
    return keep


def dataset_dir(ctx: Any) -> Path:
    """Where an episode's images go: the dataset directory (the artifacts directory's parent)."""
    artifacts = getattr(ctx, "artifacts_dir", None)
    if not artifacts:
        raise ConfigError(
            "observation=screenshot|both stores images beside the trajectories, but this run has no "
            "output directory; collect with --out DIR (or give the engine an artifacts_dir)"
        )
    return Path(artifacts).parent


def without_elements(text: str) -> str:
    """The observation's lines that are not elements: notes, errors, tabs, URL, scroll position."""
    return "\n".join(line for line in text.splitlines() if not _ELEMENT_LINE.match(line))


async def snapshot(
    ctx: Any,
    sandbox: Sandbox,
    config: BrowserConfig,
    *,
    marks: bool,
    selector: str | None = None,
    scale: float = 1.0,
) -> tuple[dict[str, str], dict[str, Any]]:
    """Screenshot the active page and store it; (its image part, the driver's reply with ``text``
    and ``frame``: where the image lies on the page, which the coordinate tools map through)."""
    root = dataset_dir(ctx)
    reply = await call_driver(
        sandbox, config, "snapshot", {"marks": marks, "selector": selector, "scale": scale}
    )
    if not reply.get("screenshot"):
        raise SandboxError(
            f"the browser could not take a screenshot: {reply.get('error') or reply.get('text', '')[:200]}"
        )
    data = await sandbox.read_file(reply["screenshot"])
    frame = reply.get("frame") or {}
    size = (int(frame.get("width", 0)), int(frame.get("height", 0)))
    if size != (int(frame.get("png_width", 0)), int(frame.get("png_height", 0))):
        data = await asyncio.to_thread(resize_png, data, size)
    sha = await asyncio.to_thread(store_image, root, data)
    return image_part(sha), reply


def resize_png(data: bytes, size: tuple[int, int]) -> bytes:
    """The PNG ``data`` resized to ``size`` (width, height) pixels, bilinear (deterministic)."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB").resize(size, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def content(mode: Observation, text: str, part: dict[str, str] | None) -> str | list[dict[str, str]]:
    """A message content for ``mode``: the text alone, or text and image parts."""
    if mode == "axtree" or part is None:
        return text
    if mode == "screenshot":
        text = without_elements(text)
    return [{"type": "text", "text": text}, part]


async def attach(
    ctx: Any,
    sandbox: Sandbox,
    config: BrowserConfig,
    mode: Observation,
    observation: list[Message],
    *,
    selector: str | None = None,
    scale: float = 1.0,
    marks: bool = True,
) -> None:
    """Put the page's screenshot into the last tool message of ``observation`` (in place); in
    ``screenshot`` mode with the element ids drawn on it unless ``marks`` is false."""
    if mode == "axtree" or not observation:
        return
    part, _ = await snapshot(
        ctx, sandbox, config, marks=marks and mode == "screenshot", selector=selector, scale=scale
    )
    last = observation[-1]
    last["content"] = content(mode, str(last.get("content", "")), part)
