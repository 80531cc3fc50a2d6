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
Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import ast
import builtins
import linecache
import signal
import socket
import sys
import types

import protocol

del sys.modules["protocol"]  # keep the user's namespace free for their own module of that name
sys.path[0] = ""  # like the REPL: modules in the working directory import

_SIGINT = {signal.SIGINT}


def _user_traceback(exc: BaseException) -> types.TracebackType | None:
    """The exception's traceback without this file's frames: it starts at the user's cell."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def run_cell(code: str, filename: str, namespace: dict) -> object:
    """Execute ``code``; return the value of a trailing expression (or None)."""
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(last, filename, "eval"), namespace)


def _unblock_sigint() -> None:
    if signal.SIGINT in signal.sigpending():
        signal.sigtimedwait(_SIGINT, 0)  # an interrupt meant for the previous cell
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)


def main() -> None:
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    namespace = module.__dict__
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
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
                signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
            if shown is not None:
                builtins._ = value  # type: ignore[attr-defined]
                reply["value"], reply["value_truncated"] = protocol.cap_text(shown, limit)
        except BaseException as exc:  # the cell's error, KeyboardInterrupt and SystemExit included
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
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
