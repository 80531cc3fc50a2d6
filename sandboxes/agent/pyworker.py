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

**Zygote** (``python3 -u pyworker.py --zygote FD``): the same interpreter, started once with the
sandbox and done importing before the agent serves any request, forks each episode's interpreter
instead of the agent starting a new one (``zygote``, the agent's side in ``zygote.py``). It never
runs a cell, so no episode's code ever ran in it, and a fork of it is what a fresh start of this
file is at ``main()``: the same modules (its own extras, ``_socket`` and ``_ctypes``, dropped),
the same signal handlers, environment, working directory, limits, seccomp filter and uid. It is
not dumpable (``/proc/PID/mem`` and ``fd`` closed to the episodes' processes, which share its
uid), blocks every signal it can (an episode can still kill or stop it: the host's check of the
reset sees that), and holds no descriptor but its channel to the agent (a ``SOCK_SEQPACKET``
socketpair). Per request (one byte and three descriptors by ``SCM_RIGHTS``: the interpreter's
stdout, stderr and channel) it forks twice, so that the interpreter's parent is the agent (PID 1,
which reaps it and reads its exit status as for a started one) and it leads a session of its own;
the interpreter makes itself dumpable again, closes every other descriptor, clears its signal mask
and runs ``main()``. Not carried from the zygote: pending signals (a fork starts with none).
Carried, and the same for every episode of a sandbox (nothing an episode can set): the hash seed of
``str`` (set at start-up), the address-space layout, and the command line ``/proc/PID/cmdline``
shows (the zygote's).
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
_FRESH_MODULES = frozenset(sys.modules)
"""What a fresh start of this file has imported by ``main()`` (a forked interpreter drops the rest)."""
ZYGOTE = len(sys.argv) > 2 and sys.argv[1] == "--zygote"
if ZYGOTE:  # before the working directory joins the path: nothing of it is ever imported here
    import _ctypes  # type: ignore[import-not-found]  # prctl, without ctypes' own imports
    import _socket
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
    # Python's own handler, whatever this process inherited: an ignored SIGINT survives exec and fork (a
    # sandbox started from a background shell or a pytest-xdist worker), and Python installs its handler
    # at start only over the default, so the timeouts' interrupts would be ignored
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
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


# -- the zygote ------------------------------------------------------------------------------------

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
FORK = b"F"
"""The one request: fork an interpreter on the three descriptors that come with it."""
READY = b"R"
"""Sent once, when the zygote has done importing and made itself non-dumpable."""


_PRCTL: list[int] = []
"""The address of libc's ``prctl``, looked up once in the zygote."""


def _prctl(option: int, value: int) -> int:
    if not _PRCTL:
        libc = _ctypes.dlopen(None, 2)  # type: ignore[arg-type]  # RTLD_NOW; None: the program itself, libc linked in
        _PRCTL.append(_ctypes.dlsym(libc, "prctl"))
    return int(_ctypes.call_function(_PRCTL[0], (option, value, 0, 0, 0)))


def _received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(memoryview(data)[:usable].cast("i"))
    return fds


def zygote(channel_fd: int) -> int:
    """Serve fork requests on ``channel_fd`` until the agent closes it (then exit). Returns only in
    a forked interpreter, with the number of its channel descriptor (see the module docstring)."""
    if _prctl(PR_SET_DUMPABLE, 0) != 0 or _prctl(PR_GET_DUMPABLE, 0) != 0:
        os._exit(3)  # a zygote the episodes could write into must not serve
    _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, channel_fd)
    channel.sendall(READY)
    space = _socket.CMSG_SPACE(4 * 4)
    while True:
        try:
            message, ancdata, _, _ = channel.recvmsg(16, space)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        fds = _received_fds(ancdata)
        if not message:
            os._exit(0)  # the agent is gone
        if message != FORK or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            channel.sendall(b"-")
            continue
        r, w = os.pipe()
        try:
            middle = os.fork()
        except OSError:  # the process limit, reached by an episode's processes: answer, go on
            middle = -1
        if middle == 0:  # the middle process: fork the interpreter, say its pid, exit
            try:
                worker = os.fork()
            except BaseException:
                os._exit(1)
            if worker == 0:
                os.close(r)
                return _become_interpreter(channel, fds)
            try:
                os.write(w, b"%d" % worker)
            finally:
                os._exit(0)
        os.close(w)
        for fd in fds:
            os.close(fd)
        pid = os.read(r, 32) if middle > 0 else b""
        os.close(r)
        if middle > 0:
            os.waitpid(middle, 0)  # once it is gone, the interpreter is the agent's (PID 1's) child
        channel.sendall(pid or b"-")


def _become_interpreter(channel: _socket.socket, fds: list[int]) -> int:
    """In the forked interpreter: its own session, dumpable, the descriptors it was sent as
    stdout, stderr and channel and no other, no blocked signal, the modules of a fresh start."""
    os.setsid()
    _prctl(PR_SET_DUMPABLE, 1)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:  # the OOM killer's first choice, as started ones
            f.write("1000")
    except OSError:
        pass
    os.close(channel.detach())
    out, err, ctrl = fds
    os.dup2(out, 1)
    os.dup2(err, 2)
    keep = 3
    if ctrl != keep:
        os.dup2(ctrl, keep)
    for name in os.listdir("/proc/self/fd"):  # the zygote's, the middle's, the sent copies
        if int(name) > keep:
            try:
                os.close(int(name))
            except OSError:  # the listing's own
                pass
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
    for name in set(sys.modules) - _FRESH_MODULES:
        del sys.modules[name]
    return keep


if __name__ == "__main__":
    if ZYGOTE:
        sys.argv[1:] = [str(zygote(int(sys.argv[2])))]
    main()
