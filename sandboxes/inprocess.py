"""A ``PythonSession`` that runs cells in this process: the Python half of the in-memory sandbox
test double (``toolgym.sandboxes.memory``). It isolates nothing; never give it a model's code
outside tests.

Each cell runs in a fresh daemon thread, in one namespace that lasts across cells; a trailing
expression's ``repr`` is echoed, as in a REPL, and tracebacks start at the cell. What the cell's
thread prints is captured per thread (``toolgym.core.threadio``; threads the cell starts itself
print to the real streams); the cell's ``print`` finds its buffer itself, so a library in another
thread swapping ``sys.stdout`` meanwhile takes nothing from the cell. A timeout raises
``KeyboardInterrupt`` in the cell's thread; a cell that does not stop within ``GRACE_S`` (a
blocking C call) is abandoned and the namespace replaced, and the result says ``restarted``.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import ctypes
import io
import threading
import time
import traceback
import types
from typing import Any

from toolgym.core.sandbox import PythonResult
from toolgym.core.threadio import capture_thread_output, thread_print

GRACE_S = 2.0
"""Seconds an interrupted cell may take to stop before the session gives up on it."""


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` with its middle dropped past ``limit`` characters (head and tail kept); and whether it was cut."""
    if len(text) <= limit:
        return text, False
    half = max(limit // 2, 1)
    return f"{text[:half]}\n...[{len(text) - 2 * half} characters omitted]...\n{text[-half:]}", True


class InProcessPythonSession:
    """See the module docstring. ``max_output`` caps each stream and the value (characters)."""

    def __init__(self, *, max_output: int = 256 * 1024) -> None:
        self.max_output = max_output
        self.cells = 0
        self.namespace = self._fresh()

    @staticmethod
    def _fresh() -> dict[str, Any]:
        module = types.ModuleType("__main__")
        # A cell's own ``print`` finds its cell's buffer directly, unaffected by other threads'
        # swaps of ``sys.stdout``; writes to ``sys.stdout`` still go through the router.
        module.__dict__["__builtins__"] = {**builtins.__dict__, "print": thread_print}
        return module.__dict__

    async def restart(self) -> None:
        """Forget every variable; the next cell starts from an empty namespace."""
        self.namespace = self._fresh()

    def _run(self, code: str, namespace: dict[str, Any], out: io.StringIO, err: io.StringIO) -> dict[str, Any]:
        self.cells += 1
        name = f"<cell-{self.cells}>"
        reply: dict[str, Any] = {"value": None, "error": None, "traceback": None}
        with capture_thread_output(out, err):
            try:
                tree = ast.parse(code, name, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)  # type: ignore[attr-defined]
                exec(compile(tree, name, "exec"), namespace)
                if last is not None:
                    value = eval(compile(last, name, "eval"), namespace)
                    reply["value"] = None if value is None else repr(value)
            except BaseException as exc:  # the cell's error, KeyboardInterrupt and SystemExit included
                reply["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                tb = exc.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                    tb = tb.tb_next
                reply["traceback"] = "".join(traceback.format_exception(type(exc), exc, tb))
        return reply

    async def execute(self, code: str, *, timeout: float | None = None) -> PythonResult:
        """Run one cell, at most ``timeout`` seconds (default 60)."""
        limit = 60.0 if timeout is None else float(timeout)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[dict[str, Any]] = loop.create_future()
        out, err = io.StringIO(), io.StringIO()
        namespace = self.namespace

        def settle(reply: dict[str, Any]) -> None:
            if not done.done():
                done.set_result(reply)

        def target() -> None:
            reply = self._run(code, namespace, out, err)
            with contextlib.suppress(RuntimeError):  # the loop closed while an abandoned cell ran on
                loop.call_soon_threadsafe(settle, reply)

        start = time.perf_counter()
        thread = threading.Thread(target=target, name="inprocess-python-cell", daemon=True)
        thread.start()
        timed_out = restarted = False
        try:
            reply = await asyncio.wait_for(asyncio.shield(done), limit)
        except TimeoutError:
            timed_out = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0), ctypes.py_object(KeyboardInterrupt))
            try:
                reply = await asyncio.wait_for(asyncio.shield(done), GRACE_S)
                reply["error"] = f"TimeoutError: the cell ran past its {limit:g} s limit and was interrupted"
            except TimeoutError:
                restarted = True
                self.namespace = self._fresh()
                reply = {"value": None, "traceback": None, "error": "SessionRestarted: the Python session was restarted "
                         f"because it ran past its {limit:g} s limit and did not stop when interrupted; every variable is lost"}
        stdout, cut_out = cap_text(out.getvalue(), self.max_output)
        stderr, cut_err = cap_text(err.getvalue(), self.max_output)
        value, cut_value = cap_text(reply["value"], self.max_output) if reply["value"] is not None else (None, False)
        return PythonResult(stdout=stdout, stderr=stderr, value=value, error=reply["error"],
                            traceback=None if timed_out else reply["traceback"], timed_out=timed_out, restarted=restarted,
                            truncated=cut_out or cut_err or cut_value, duration_s=time.perf_counter() - start)
