"""A ``PythonSession`` that runs cells in this process: the Python half of the in-memory sandbox
test double (``toolgym.sandboxes.memory``). It isolates nothing; never give it a model's code
outside tests.

Each cell runs in a fresh daemon thread, in one namespace that lasts across cells; a trailing
expression's ``repr`` is echoed, as in a REPL, and tracebacks start at the cell. What the cell's
thread prints is captured per thread (``toolgym.core.util.threadio``; threads the cell starts itself
print to the real streams); the cell's ``print`` finds its buffer itself, so a library in another
thread swapping ``sys.stdout`` meanwhile takes nothing from the cell. A timeout raises
``KeyboardInterrupt`` in the cell's thread; a cell that does not stop within ``GRACE_S`` (a
blocking C call) is abandoned and the namespace replaced, and the result says ``restarted``.

What a cell's result holds is bounded as on the real backends: the capture buffers
keep only the head and tail of each stream, and an exception's message is cut before its
traceback is formatted. What the cell itself builds lives in this process, of course: a cell
that raises a 100 MB message has made those 100 MB here, and a trailing expression's ``repr``
is computed whole before it is cut (a REPL must call ``__repr__``).
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
import types
from typing import Any

from toolgym.core.sandbox import PythonResult
from toolgym.core.util.threadio import capture_thread_output, thread_print
from toolgym.sandboxes.agent.protocol import cap_text, capped_exception

GRACE_S = 2.0
"""Seconds an interrupted cell may take to stop before the session gives up on it."""


class CappedText(io.StringIO):
    """A capture buffer that keeps the first and last ``limit / 2`` characters written to it and
    counts the rest, so that a cell printing 100 MB holds 2 x ``limit`` at most."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = max(2, limit)
        self.head_limit = self.limit // 2
        self.tail_limit = self.limit - self.head_limit
        self.head: list[str] = []
        self.head_len = 0
        self.tail: list[str] = []
        self.tail_len = 0
        self.total = 0
        self._lock = threading.Lock()  # threads the cell starts may print too

    def write(self, text: str) -> int:
        n = len(text)
        with self._lock:
            self.total += n
            room = self.head_limit - self.head_len
            if room > 0:
                self.head.append(text[:room])
                self.head_len += min(room, n)
                text = text[room:]
            if text:
                self.tail.append(text[-self.tail_limit :])
                self.tail_len += len(self.tail[-1])
                if self.tail_len > 2 * self.tail_limit:  # trim in batches: amortised O(1) a character
                    joined = "".join(self.tail)[-self.tail_limit :]
                    self.tail, self.tail_len = [joined], len(joined)
        return n

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def getvalue(self) -> str:
        with self._lock:
            head, tail = "".join(self.head), "".join(self.tail)[-self.tail_limit :]
            omitted = self.total - len(head) - len(tail)
        if omitted <= 0:
            return head + tail
        return (
            f"{head}\n[... {omitted} characters omitted: output truncated to {len(head) + len(tail)} of "
            f"{self.total} characters (the first {len(head)} and the last {len(tail)} shown) ...]\n{tail}"
        )


class InProcessPythonSession:
    """See the module docstring. ``max_output`` caps each stream, the value, the error and the
    traceback (characters)."""

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

    def _run(
        self, code: str, namespace: dict[str, Any], out: io.StringIO, err: io.StringIO
    ) -> dict[str, Any]:
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
                tb = exc.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                    tb = tb.tb_next
                reply["error"], reply["traceback"], reply["cut"] = capped_exception(exc, tb, self.max_output)
        return reply

    async def execute(self, code: str, *, timeout: float | None = None) -> PythonResult:
        """Run one cell, at most ``timeout`` seconds (default 60)."""
        limit = 60.0 if timeout is None else float(timeout)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[dict[str, Any]] = loop.create_future()
        out, err = CappedText(self.max_output), CappedText(self.max_output)
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
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident or 0), ctypes.py_object(KeyboardInterrupt)
            )
            try:
                reply = await asyncio.wait_for(asyncio.shield(done), GRACE_S)
                reply["error"] = f"TimeoutError: the cell ran past its {limit:g} s limit and was interrupted"
            except TimeoutError:
                restarted = True
                self.namespace = self._fresh()
                reply = {
                    "value": None,
                    "traceback": None,
                    "error": "SessionRestarted: the Python session was restarted "
                    f"because it ran past its {limit:g} s limit and did not stop when interrupted; every variable is lost",
                }
        value, cut_value = (
            cap_text(reply["value"], self.max_output) if reply["value"] is not None else (None, False)
        )
        return PythonResult(
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            value=value,
            error=reply["error"],
            traceback=None if timed_out else reply["traceback"],
            timed_out=timed_out,
            restarted=restarted,
            truncated=out.truncated or err.truncated or cut_value or bool(reply.get("cut")),
            duration_s=time.perf_counter() - start,
        )
