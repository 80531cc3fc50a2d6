"""The persistent Python session's interpreter: runs cells in one namespace, like a REPL.

Started by the agent as ``python3 -u pyworker.py FD`` where FD is a socket carrying
length-prefixed JSON (see ``protocol``): requests ``{"code", "cell", "max_value"}``, replies
``{"value", "error", "traceback", "value_truncated"}``, each text cut to ``max_value`` characters
(``protocol.cap_text``; an exception's message is cut before its traceback is formatted).
Printed output goes to the real stdout and stderr (pipes the agent reads), so output of child
processes is captured too.

A cell whose last statement is an expression echoes its ``repr`` as ``value`` (None is not
echoed), as the interactive interpreter does. The agent interrupts a cell with SIGINT; SIGINT is
blocked outside cells so that a late interrupt can never corrupt a reply or hit the next cell.
Stdlib only (runs inside sandboxes). It starts before each episode, after the reset (on the
pool's path from release to ready), so it imports only what every cell needs, through the C
modules where the pure-Python ones would bring their own imports: ``_ast`` (what ``ast.parse``
calls), ``_signal`` (``signal`` adds its enums) and plain ``os`` calls on its channel (``socket``
pulls in ``enum``, ``selectors``, ...). ``linecache`` stays: ``traceback``, ``inspect`` and
``warnings`` read a cell's source from it, whoever imports them later.
"""

from __future__ import annotations

import _ast
import _signal  # type: ignore[import-not-found]  # signal's C half (no stub), without its enums
import builtins
import linecache
import os
import sys

import protocol

del sys.modules["protocol"]  # keep the user's namespace free for their own module of that name
sys.path[0] = ""  # like the REPL: modules in the working directory import

_SIGINT = {_signal.SIGINT}

TYPE_CHECKING = False
if TYPE_CHECKING:
    import types


class Channel:
    """The interpreter's end of its socketpair to the agent, through ``os`` calls: ``recv`` and
    ``sendall``, what ``protocol`` calls on a socket."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def recv(self, n: int) -> bytes:
        return os.read(self.fd, n)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]


def _user_traceback(exc: BaseException) -> types.TracebackType | None:
    """The exception's traceback without this file's frames: it starts at the user's cell."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def run_cell(code: str, filename: str, namespace: dict) -> object:
    """Execute ``code``; return the value of a trailing expression (or None)."""
    tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)  # ast.parse
    assert isinstance(tree, _ast.Module)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body[-1].value)
        tree.body.pop()
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(last, filename, "eval"), namespace)


def _unblock_sigint() -> None:
    if _signal.SIGINT in _signal.sigpending():
        _signal.sigtimedwait(_SIGINT, 0)  # an interrupt meant for the previous cell
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _SIGINT)


def main() -> None:
    ctrl = Channel(int(sys.argv[1]))
    module = type(sys)("__main__")  # types.ModuleType
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    namespace = module.__dict__
    _signal.pthread_sigmask(_signal.SIG_BLOCK, _SIGINT)
    while True:
        request = protocol.recv_frame(ctrl)
        if request is None:
            return
        reply: dict[str, object] = {"value": None, "error": None, "traceback": None, "value_truncated": False}
        limit = int(request.get("max_value", 65536))
        try:
            _unblock_sigint()
            try:
                value = run_cell(request["code"], f"<cell-{request.get('cell', 0)}>", namespace)
                shown = None if value is None else repr(value)  # a user's __repr__ may hang: interruptible
            finally:
                _signal.pthread_sigmask(_signal.SIG_BLOCK, _SIGINT)
            if shown is not None:
                builtins._ = value  # type: ignore[attr-defined]
                reply["value"], reply["value_truncated"] = protocol.cap_text(shown, limit)
        except BaseException as exc:  # the cell's error, KeyboardInterrupt and SystemExit included
            _signal.pthread_sigmask(_signal.SIG_BLOCK, _SIGINT)
            reply["error"], reply["traceback"], cut = protocol.capped_exception(
                exc, _user_traceback(exc), limit
            )
            reply["value_truncated"] = reply["value_truncated"] or cut
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        ctrl.sendall(protocol.encode(reply))


if __name__ == "__main__":
    main()
