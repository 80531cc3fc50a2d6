"""Capture what one thread prints without taking the prints of any other thread.

``contextlib.redirect_stdout`` swaps ``sys.stdout`` for the whole process: whatever another thread
prints while it is in force lands in the swapped-in buffer, and a thread that put its own stream
on ``sys.stdout`` meanwhile loses it when the swap is undone. In-process Python cells (the
in-memory sandbox) and library calls that chatter (ALFWorld's game walk) run in threads at the
same time, so toolgym captures per thread instead: while any capture is open, a router sits on
``sys.stdout`` / ``sys.stderr`` and sends each write to the buffer of the thread that made it, or
to the stream it replaced. Threads a captured thread starts print to the real streams.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from typing import Any

_targets = threading.local()
"""``stdout`` / ``stderr``: the buffers of the capture open in the current thread, if any."""


class _Router(io.TextIOBase):
    """A stream that writes to the current thread's capture buffer, or to the stream it replaced."""

    def __init__(self, name: str, fallback: Any) -> None:
        self.name = name
        self.fallback = fallback

    def _target(self) -> Any:
        return getattr(_targets, self.name, None) or self.fallback

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def writable(self) -> bool:
        return True


_route_lock = threading.Lock()
_users = 0


@contextlib.contextmanager
def capture_thread_output(out: io.StringIO | None = None, err: io.StringIO | None = None) -> Iterator[None]:
    """Send what this thread prints to ``out`` / ``err`` (a fresh, discarded buffer where ``None``).

    A router goes on each stream unless one is there already (something may have replaced ours
    since, as pytest's capture does); the last capture to close takes off the routers still on top.
    Captures nest: the inner one's buffers win until it closes."""
    global _users
    out = io.StringIO() if out is None else out
    err = io.StringIO() if err is None else err
    with _route_lock:
        for name in ("stdout", "stderr"):
            if not isinstance(getattr(sys, name), _Router):
                setattr(sys, name, _Router(name, getattr(sys, name)))
        _users += 1
    outer = getattr(_targets, "stdout", None), getattr(_targets, "stderr", None)
    _targets.stdout, _targets.stderr = out, err
    try:
        yield
    finally:
        _targets.stdout, _targets.stderr = outer
        with _route_lock:
            _users -= 1
            if _users == 0:
                for name in ("stdout", "stderr"):
                    while isinstance(getattr(sys, name), _Router):
                        setattr(sys, name, getattr(sys, name).fallback)


def thread_stream(name: str = "stdout") -> Any:
    """The stream that ``name`` ("stdout" or "stderr") prints of the current thread go to: its open
    capture's buffer, or ``sys.<name>``."""
    return getattr(_targets, name, None) or getattr(sys, name)


def thread_print(
    *args: object, sep: str | None = " ", end: str | None = "\n", file: Any = None, flush: bool = False
) -> None:
    """``print`` that looks up the current thread's capture itself, so its output stays with the
    thread even while another thread has swapped ``sys.stdout`` (``redirect_stdout``)."""
    builtins.print(*args, sep=sep, end=end, file=thread_stream() if file is None else file, flush=flush)
