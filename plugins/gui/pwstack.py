"""Cheaper call-site capture for Playwright's sync API, installed by the driver in the sandbox.

Playwright for Python (1.48, the browser image's) records its caller's stack on every API call,
for the call's ``location`` in traces and for error messages: ``inspect.stack()`` in
``SyncBase._sync`` and again in ``Connection.wrap_api_call`` (an eagerly evaluated ``getattr``
default), and ``traceback.extract_stack()`` twice. ``inspect.stack()`` reads each frame's source
line and, for a file that does not exist on disk (the driver's modules are compiled from strings,
the sandbox agent runs cells the same way), scans every loaded module to find one: 1-3 ms of CPU
per Playwright call, more than the round trip to Chromium itself for a cheap call.

``install`` points those modules' ``inspect.stack`` at a plain frame walk that builds the same
``FrameInfo`` records without source lines (Playwright reads only the frame, file name, line
number and function name), and their ``traceback.extract_stack`` at the same summary with its
lines looked up lazily (``lookup_lines=False``: a line is read only if an error message prints
it). What Playwright sends to its driver is unchanged. Stdlib only; a Playwright whose modules do
not have these names is left as it is.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
import types
from typing import Any

PATCHED = ("_sync_base", "_connection", "_network")
"""Playwright's modules (``playwright._impl.<name>``) that capture stacks per call."""


def stack(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack()`` without source lines: the caller's frames, innermost first."""
    frame: Any = sys._getframe(1)
    out = []
    while frame is not None:
        code = frame.f_code
        out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None))
        frame = frame.f_back
    return out


def extract_stack(f: Any = None, limit: int | None = None) -> traceback.StackSummary:
    """``traceback.extract_stack()`` with each line read only when it is asked for."""
    frame = f if f is not None else sys._getframe(1)
    return traceback.StackSummary.extract(traceback.walk_stack(frame), limit=limit, lookup_lines=False)


def _with(module: types.ModuleType, name: str, replacement: Any) -> types.ModuleType:
    """A copy of ``module`` (``inspect``, ``traceback``) whose ``name`` is ``replacement``."""
    copy = types.ModuleType(module.__name__)
    copy.__dict__.update(module.__dict__)
    setattr(copy, name, replacement)
    return copy


def install() -> list[str]:
    """Patch Playwright's stack capture (idempotent); the modules patched."""
    fast_inspect = _with(inspect, "stack", stack)
    fast_traceback = _with(traceback, "extract_stack", extract_stack)
    done = []
    for name in PATCHED:
        try:
            module = importlib.import_module(f"playwright._impl.{name}")
        except ImportError:
            continue
        if getattr(getattr(module, "inspect", None), "stack", None) not in (inspect.stack, stack):
            continue  # not the Playwright this was written for: leave it alone
        module.inspect = fast_inspect  # type: ignore[attr-defined]
        if hasattr(module, "traceback"):
            module.traceback = fast_traceback  # type: ignore[attr-defined]
        done.append(name)
    return done
