"""Warming the images a batch of episodes runs in, and the record of when each image was last used.

Before a batch starts, the engine names the per-task images its episodes need
(``Env.sandbox_images``); ``warm`` makes sure each is on the host: present ones are kept, missing
ones are pulled when a registry answers (one failed connection stops further tries, so an offline
host is not asked once per image), and what is still missing stops the batch with one sentence
naming the image and the command that builds it. ``$TOOLGYM_NO_PULL=1`` skips pulls.

Docker keeps no "last used" time for images, so toolgym keeps one: ``images-used.json`` under
``$TOOLGYM_CACHE`` (default ``~/.cache/toolgym``), image reference → Unix time, updated by every
warm-up and build. ``toolgym swe images --prune`` removes least-recently-used images by it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.core.sandbox import ImageNeed

Progress = Callable[[int, int, str, str], None]
"""``(done, total, image, what)``: ``what`` is ``present``, ``pulling``, ``pulled`` or ``missing``."""
_OFFLINE_SIGNS = (
    "dial tcp",
    "lookup ",
    "timeout",
    "connection refused",
    "no such host",
    "tls",
    "network is unreachable",
    "connect:",
    "temporary failure",
    "i/o timeout",
    "eof",
)


class MissingImageError(SandboxError):
    """An image a batch needs is neither on the host nor pullable."""


def cache_dir() -> Path:
    return Path(os.environ.get("TOOLGYM_CACHE") or Path.home() / ".cache" / "toolgym")


def usage_file() -> Path:
    return cache_dir() / "images-used.json"


@contextlib.contextmanager
def _locked_usage() -> Iterator[dict[str, float]]:
    """The usage record, read and written back under an exclusive lock (several processes warm at once)."""
    path = usage_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read(path)
        yield record
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, sort_keys=True, indent=0))
        tmp.replace(path)


def _read(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return (
        {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}
        if isinstance(data, dict)
        else {}
    )


def record_use(images: Iterable[str], when: float | None = None) -> None:
    """Note that ``images`` were used now (or at ``when``)."""
    stamp = time.time() if when is None else when
    names = list(images)
    if names:
        with _locked_usage() as record:
            record.update(dict.fromkeys(names, stamp))


def forget(images: Iterable[str]) -> None:
    """Drop removed images from the record."""
    with _locked_usage() as record:
        for name in images:
            record.pop(name, None)


def last_used() -> dict[str, float]:
    return _read(usage_file())


def canonical(image: str) -> str:
    """``name:tag`` with the implicit ``:latest`` written out (the record's key)."""
    return image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"


@dataclass
class WarmResult:
    present: list[str] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)
    missing: list[ImageNeed] = field(default_factory=list)
    seconds: float = 0.0


def warm(
    api: Any, needs: Sequence[ImageNeed], *, pull: bool | None = None, progress: Progress | None = None
) -> WarmResult:
    """Make every needed image present (pulling where a registry answers); raise
    ``MissingImageError`` naming the first missing image and how to build it otherwise."""
    import docker

    started = time.monotonic()
    pull = os.environ.get("TOOLGYM_NO_PULL") != "1" if pull is None else pull
    by_image: dict[str, ImageNeed] = {}
    for need in needs:
        by_image.setdefault(canonical(need.image), need)
    result = WarmResult()
    registry_down = False
    total = len(by_image)
    for done, (image, need) in enumerate(by_image.items()):
        try:
            api.inspect_image(image)
            result.present.append(image)
            _tell(progress, done + 1, total, image, "present")
            continue
        except docker.errors.ImageNotFound:
            pass
        if pull and not registry_down and "/" in image:
            _tell(progress, done, total, image, "pulling")
            error = pull_image(api, image)
            if error is None:
                result.pulled.append(image)
                _tell(progress, done + 1, total, image, "pulled")
                continue
            registry_down = any(sign in error.lower() for sign in _OFFLINE_SIGNS)
        result.missing.append(need)
        _tell(progress, done + 1, total, image, "missing")
    record_use([*result.present, *result.pulled])
    result.seconds = time.monotonic() - started
    if result.missing:
        first = result.missing[0]
        others = f" (and {len(result.missing) - 1} more)" if len(result.missing) > 1 else ""
        what = f" for {first.label}" if first.label else ""
        how = f"; build it with `{first.build_hint}`" if first.build_hint else "; pull or build it first"
        raise MissingImageError(
            f"the Docker image {first.image}{what} is not on this host{others} and could not be pulled{how}"
        )
    return result


def pull_image(api: Any, image: str) -> str | None:
    """Pull ``image``; None when it arrived, else the registry's error."""
    repo, _, tag = image.rpartition(":")
    try:
        for chunk in api.pull(repo, tag=tag, stream=True, decode=True):
            if isinstance(chunk, dict) and chunk.get("error"):
                return str(chunk["error"])
    except Exception as exc:
        return str(exc)
    return None


def _tell(progress: Progress | None, done: int, total: int, image: str, what: str) -> None:
    if progress is not None:
        progress(done, total, image, what)


class TerminalProgress:
    """The default display of a warm-up on stderr (when the caller has none): a transient bar on a
    terminal once an image must be pulled; elsewhere a line per pull and per missing image. Present
    images are silent, so a batch whose images are all there shows nothing."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.live = self.console.is_terminal and sys.stderr.isatty()
        self.bar = Progress(
            TextColumn("[bold blue]images"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task: Any = None

    def __call__(self, done: int, total: int, image: str, what: str) -> None:
        if self.live:
            if self.task is None and what != "present":  # nothing to show while every image is there
                self.bar.start()
                self.task = self.bar.add_task("", total=total)
            if self.task is not None:
                self.bar.update(self.task, completed=done, description=f"{what} {image}")
                if done >= total:
                    self.bar.stop()
        elif what in ("pulling", "pulled", "missing"):
            self.console.print(f"images {done}/{total}: {what} {image}", soft_wrap=True)
