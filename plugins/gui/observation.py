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
"""

from __future__ import annotations

import asyncio
import re
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


def system_prompt_for(mode: Observation, prompt: str) -> str:
    """An environment's system prompt for ``mode``: in ``screenshot`` mode the sentence about the
    accessibility tree (``AXTREE_NOTE``) says how the ids appear on the image instead."""
    if mode != "screenshot":
        return prompt
    return prompt.replace(AXTREE_NOTE, MARKS_NOTE) if AXTREE_NOTE in prompt else f"{prompt} {MARKS_NOTE}"


def parse_observation(value: str) -> Observation:
    if value not in OBSERVATIONS:
        raise ConfigError(f"observation must be one of {', '.join(OBSERVATIONS)}, got {value!r}")
    return cast(Observation, value)


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
    ctx: Any, sandbox: Sandbox, config: BrowserConfig, *, marks: bool, selector: str | None = None
) -> tuple[dict[str, str], dict[str, Any]]:
    """Screenshot the active page and store it; (its image part, the driver's reply with ``text``)."""
    root = dataset_dir(ctx)
    reply = await call_driver(sandbox, config, "snapshot", {"marks": marks, "selector": selector})
    if not reply.get("screenshot"):
        raise SandboxError(
            f"the browser could not take a screenshot: {reply.get('error') or reply.get('text', '')[:200]}"
        )
    data = await sandbox.read_file(reply["screenshot"])
    sha = await asyncio.to_thread(store_image, root, data)
    return image_part(sha), reply


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
) -> None:
    """Put the page's screenshot into the last tool message of ``observation`` (in place)."""
    if mode == "axtree" or not observation:
        return
    part, _ = await snapshot(ctx, sandbox, config, marks=mode == "screenshot", selector=selector)
    last = observation[-1]
    last["content"] = content(mode, str(last.get("content", "")), part)
