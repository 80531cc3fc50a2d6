"""The in-sandbox agent: one process per sandbox that runs what the host asks, over one channel.

Started as ``python3 -E -s -S main.py CONFIG_JSON`` (inside a container or a bubblewrap
namespace). It connects to the host's UNIX socket ``config["socket"]`` (in a directory the host
mounts read-only), or, when that is ``"stdio"``, speaks over its own stdin and stdout (a Docker
attach stream, for engines on other hosts), says hello with the token the host handed over
(``harden.take_token``: an inherited pipe or a wiped environment variable, never argv), then serves
requests, each in its own thread, until the connection closes. When it closes (the host released the sandbox, or the host
process died) the agent kills every process of the sandbox and exits, which ends the container;
``config["ttl_s"]`` bounds its life even if the host never lets go.

Ops: ``ping``, ``run``, ``write_file``, ``read_file``, ``py_exec``, ``py_restart``, ``sh_run``,
``stats``, ``reset``, ``prestart``, ``shutdown`` (see the host client ``toolgym.sandboxes.channel``).
``py_exec`` and ``py_restart`` with ``session: "kept"`` go to the **kept session**: a second Python
interpreter that a reset asked to keep (``keep``) survives it, with everything it started (the
browser tools keep Playwright and Chromium there). It is kept only when its own renewal cell
(``keep_cell``, the host's) answers ``True`` (it drops what the episode left: for the browser, every
context); otherwise, and whenever the host does not ask, it is killed like every other process.
Frames carrying ``tun`` instead are egress tunnels (``netfwd.TunnelHub``, with ``proxy_socket``
``"channel"``), handled in order on the read loop.

With ``python_zygote`` (and the agent PID 1) the agent starts the Python session's **zygote** with
the sandbox and forks each interpreter from it (``zygote.py``): the hello names its pid, no
request but ``ping`` is served before it has done importing, a reset spares it (only it), and the
first interpreter waits for the first cell, so that the zygote is the agent's only child when the
host records the sandbox.

Before anything else the agent makes itself unreachable to the code it runs (``harden``: not
dumpable, a seccomp filter against ptrace, pidfd_getfd, process_vm_*, new user namespaces and the
key ring); its hello says what was applied.
Stdlib only; never imports anything outside this directory.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import signal
import socket
import sys
import threading
import time
from typing import Any

import files
import harden
import protocol
import wipe
import zygote
from procs import CgroupProbe, process_table, reap_orphans, run_command, subtree
from sessions import PythonSession, ShellSession

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = "kept"
"""The ``session`` field of ``py_exec`` and ``py_restart`` that names the kept session."""
KEEP_CELL_TIMEOUT_S = 10.0
"""Longest a kept session's renewal cell may take before the session is killed instead."""


class Agent:
    def __init__(self, config: dict[str, Any], sock: socket.socket) -> None:
        self.config = config
        self.sock = sock
        self.workdir: str = config["workdir"]
        # defaults, then what the image set (the agent inherits its ENV lines), then the forced
        self.env: dict[str, str] = {
            **(config.get("env_defaults") or {}),
            **os.environ,
            **(config.get("env") or {}),
        }
        self.max_output = int(config.get("max_output", 256 * 1024))
        self.max_file = int(config.get("max_file_bytes", 64 * 1024 * 1024))
        self.probe = CgroupProbe()
        self.send_lock = threading.Lock()
        self.started = time.monotonic()
        self.fresh = wipe.snapshot()  # the writable mounts' roots as they are in a fresh sandbox
        self.tunnels: Any = None  # netfwd.TunnelHub when egress crosses this channel
        self.zygote = (  # its interpreters are re-parented to PID 1: only then are they the agent's
            zygote.Zygote(python=self._python(), worker=self._worker(), cwd=self.workdir, env=self.env)
            if config.get("python_zygote") and os.getpid() == 1
            else None
        )
        self.kept = self._python_session(None)  # starts on its first cell; see the module docstring
        # with a zygote, the first interpreter waits for the first cell (a fork): until then the
        # zygote is the agent's only child, as the host records it when the sandbox is made
        self._new_sessions(prestart=self.zygote is None)

    def _python(self) -> str:
        return str(self.config.get("python", sys.executable))

    def _worker(self) -> str:
        return os.path.join(HERE, "pyworker.py")

    def _python_session(self, forker: zygote.Zygote | None) -> PythonSession:
        return PythonSession(
            python=self._python(),
            worker=self._worker(),
            zygote=forker,
            cwd=self.workdir,
            env=self.env,
            probe=self.probe,
        )

    def _new_sessions(self, *, prestart: bool = True, wait: bool = False) -> None:
        """Fresh sessions; with ``prestart_python`` (and ``prestart``) the interpreter starts now,
        off the path of the first cell (in the background at start-up, before returning with
        ``wait``)."""
        self.python = self._python_session(self.zygote)
        self.shell = ShellSession(
            bash=self.config.get("bash", "/bin/bash"), cwd=self.workdir, env=self.env, probe=self.probe
        )
        if prestart:
            self._prestart(wait=wait)

    def _prestart(self, *, wait: bool) -> None:
        if self.config.get("prestart_python"):
            if wait:
                self.python.prestart()
            else:
                threading.Thread(target=self.python.prestart, daemon=True).start()

    # -- serving ---------------------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            try:
                request = protocol.recv_frame(self.sock)
            except (OSError, ValueError):
                request = None
            if request is None:
                return
            if "tun" in request:  # egress tunnel frames keep their order: handled here, never blocking
                if self.tunnels is not None:
                    self.tunnels.dispatch(request)
                continue
            if request.get("op") == "ping":  # answered at once: a thread's start would be most of it
                self._handle(request)
                continue
            threading.Thread(target=self._handle, args=(request,), daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        """Put one message on the channel (any thread)."""
        self.send_frame(protocol.encode(message))

    def send_frame(self, frame: bytes) -> None:
        with self.send_lock:
            try:
                self.sock.sendall(frame)
            except OSError:
                pass

    def _handle(self, request: dict[str, Any]) -> None:
        op = request.get("op", "")
        reply: dict[str, Any]
        if self.zygote is not None and op != "ping":
            # no code of an episode runs while the zygote imports (it starts beside the hello, off
            # the path of a cold start); a zygote that could not start is given up here
            self.zygote.wait_ready()
        try:
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                raise ValueError(f"unknown op {op!r}")
            reply = {"ok": True, **handler(request)}
        except files.Outside as exc:
            reply = _error(protocol.E_OUTSIDE, str(exc))
        except FileNotFoundError as exc:
            reply = _error(protocol.E_NOT_FOUND, f"no such file: {exc.filename or request.get('path')!r}")
        except IsADirectoryError:
            reply = _error(protocol.E_IS_DIR, f"{request.get('path')!r} is a directory, not a file")
        except (ValueError, KeyError, TypeError) as exc:
            reply = _error(protocol.E_INVALID, str(exc))
        except OSError as exc:
            reply = _error(protocol.E_OS, f"{exc.strerror or exc} ({request.get('path', '')})".strip())
        except MemoryError:
            reply = _error(
                protocol.E_OS,
                f"the agent ran out of memory handling {op!r}: the request is too large "
                "for the sandbox's memory limit",
            )
        except Exception as exc:  # a bug here must answer, not hang the host
            reply = _error(protocol.E_INTERNAL, f"{type(exc).__name__}: {exc}")
        reply["id"] = request.get("id")
        self.send(reply)

    # -- ops -------------------------------------------------------------------------------------

    def op_ping(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid(), "uptime": time.monotonic() - self.started}

    def op_run(self, req: dict[str, Any]) -> dict[str, Any]:
        argv = req.get("argv") or ["/bin/sh", "-c", req["shell"]]
        cwd = req.get("cwd") or self.workdir
        cwd = cwd if os.path.isabs(cwd) else os.path.join(self.workdir, cwd)
        stdin = base64.b64decode(req["stdin_b64"]) if req.get("stdin_b64") is not None else None
        return run_command(
            [str(a) for a in argv],
            cwd=cwd,
            env={**self.env, **(req.get("env") or {})},
            stdin=stdin,
            timeout=float(req["timeout"]),
            max_output=int(req.get("max_output") or self.max_output),
            probe=self.probe,
        )

    def op_write_file(self, req: dict[str, Any]) -> dict[str, Any]:
        data = base64.b64decode(req["data_b64"])
        size = files.write_file(
            self.workdir, req["path"], data, mode=int(req.get("mode", 0o644)), append=bool(req.get("append"))
        )
        return {"bytes": size}

    def op_read_file(self, req: dict[str, Any]) -> dict[str, Any]:
        data = files.read_file(
            self.workdir, req["path"], max_bytes=int(req.get("max_bytes") or self.max_file)
        )
        return {"data_b64": base64.b64encode(data).decode("ascii")}

    def _python_for(self, req: dict[str, Any]) -> PythonSession:
        return self.kept if req.get("session") == KEPT else self.python

    def op_py_exec(self, req: dict[str, Any]) -> dict[str, Any]:
        return self._python_for(req).execute(
            req["code"],
            timeout=float(req["timeout"]),
            max_output=int(req.get("max_output") or self.max_output),
        )

    def op_py_restart(self, req: dict[str, Any]) -> dict[str, Any]:
        session = self._python_for(req)
        with session.lock:
            session.close()
        return {}

    def op_sh_run(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.shell.run(
            req["command"],
            timeout=float(req["timeout"]),
            max_output=int(req.get("max_output") or self.max_output),
        )

    def op_stats(self, req: dict[str, Any]) -> dict[str, Any]:
        """``processes``: how many processes run besides the agent, init, the sessions, the
        zygote and the kept session's process tree."""
        mine = {os.getpid(), 1} | {s.proc.pid for s in (self.python, self.shell) if s.proc is not None}
        if self.zygote is not None and self.zygote.pid is not None:
            mine.add(self.zygote.pid)
        kept = self.kept.proc
        if kept is not None:
            mine |= subtree(kept.pid)
        others = [pid for pid, _, state in process_table() if pid not in mine and state not in "ZX"]
        disk = {}
        for path in {self.workdir, "/tmp", self.env.get("HOME", "")} - {""}:
            try:
                st = os.statvfs(path)
                disk[path] = {
                    "used": (st.f_blocks - st.f_bfree) * st.f_frsize,
                    "size": st.f_blocks * st.f_frsize,
                }
            except OSError:
                pass
        return {"processes": len(others), "disk": disk, **self.probe.stats(), **zygote.describe(self.zygote)}

    def op_reset(self, req: dict[str, Any]) -> dict[str, Any]:
        """Kill every other process, wipe every writable mount and the System V IPC objects
        (``wipe``), make fresh sessions; the stats say what is left (``leftovers``). With
        ``prestart: false`` the Python interpreter is not started yet: the host first checks from
        outside that only the agent is left, then sends ``prestart``.

        With ``keep`` and a live kept session, that session first runs ``keep_cell``; when it
        answers ``True`` the session and its processes are spared (``kept``: its pid), else killed
        with the rest (``kept``: None, ``kept_note``: why)."""
        sessions = (self.python, self.shell)
        for session in sessions:  # all at once: they die together, and are waited for below
            session.kill()
        for session in sessions:
            with session.lock:
                session.close()
        kept, note = self._renew_kept(req)
        if self.tunnels is not None:
            self.tunnels.close_all()
        spared = self.zygote.pid if self.zygote is not None and self.zygote.alive() else None
        kill_everything_else(within_s=float(req.get("kill_within_s", 2.0)), spare=kept, zygote_pid=spared)
        if self.zygote is not None:
            self.zygote.resume()
        wipe.wipe_all([p for p in (self.workdir, "/tmp", self.env.get("HOME", "")) if p], self.fresh)
        stats = self.op_stats(req)  # before new sessions start: a prestarting one is not a leftover
        stats["leftovers"] = wipe.leftovers(self.fresh)
        stats.update(kept=kept if self.kept.alive() else None, kept_note=note)
        # the reset runs in the background of the pool: take the time here
        self._new_sessions(prestart=bool(req.get("prestart", True)), wait=True)
        return stats

    def _renew_kept(self, req: dict[str, Any]) -> tuple[int | None, str | None]:
        """The pid of the kept session when the host asked to keep it and its renewal cell said
        ``True``; else the session is killed here. Also why it was not kept, when it was running."""
        session = self.kept
        note = None
        if req.get("keep") and session.alive() and req.get("keep_cell"):
            result = session.execute(str(req["keep_cell"]), timeout=KEEP_CELL_TIMEOUT_S, max_output=4096)
            if result["value"] == "True" and result["error"] is None and not result["restarted"]:
                with session.lock:
                    if session.alive():
                        assert session.proc is not None
                        return session.proc.pid, None
            note = f"its renewal answered {result['value']!r}: {result['error'] or 'not True'}"
        elif session.alive():
            note = "the host did not ask to keep it (code ran in the sandbox, or nothing to renew)"
        with session.lock:
            session.close()
        return None, note

    def op_prestart(self, req: dict[str, Any]) -> dict[str, Any]:
        """Start the Python interpreter now if the profile asks for it (after a checked reset)."""
        self._prestart(wait=True)
        return {}

    def op_shutdown(self, req: dict[str, Any]) -> dict[str, Any]:
        threading.Timer(0.05, self.exit).start()
        return {}

    def exit(self, code: int = 0) -> None:
        kill_everything_else(within_s=1.0)
        os._exit(code)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"type": kind, "message": message}}


OWN_PID_NAMESPACE = False
"""Set from the config by backends that start the agent in a PID namespace of its own (both do).
Only then may ``kill(-1)`` be used: outside one it would reach every process of the user."""


def kill_everything_else(*, within_s: float, spare: int | None = None, zygote_pid: int | None = None) -> int:
    """SIGKILL every process but this one, the namespace's init, the tree under ``spare`` (the
    kept session) and the process ``zygote_pid`` (not what is below it); how many are left. Nothing
    else can join that tree: a process can only be re-parented to the agent (PID 1), never
    adopted by another."""
    me = {os.getpid(), 1} | ({zygote_pid} if zygote_pid else set())
    deadline = time.monotonic() + within_s
    pause = 0.0002  # killed processes are gone within microseconds when a CPU is free
    while True:
        mine = me | (subtree(spare) if spare else set())
        if OWN_PID_NAMESPACE and os.geteuid() != 0 and not spare and not zygote_pid:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            for pid, _, state in process_table():
                if pid not in mine and state not in "ZX" and _descends_from_me(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        reap_orphans()
        left = [pid for pid, _, state in process_table() if pid not in mine and state not in "ZX"]
        if not OWN_PID_NAMESPACE:
            left = [pid for pid in left if _descends_from_me(pid)]
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _descends_from_me(pid: int) -> bool:
    me = os.getpid()
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            return False
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        if pid == me:
            return True
        if pid <= 1:
            return False
    return False


def _reaper() -> None:
    """As PID 1 the agent inherits every orphan: reap them (commands' own children excepted)."""
    while True:
        time.sleep(0.5)
        try:
            reap_orphans()
        except Exception:  # never let the reaper die of a transient /proc error
            pass


def apply_rlimits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name.upper()}")
        resource.setrlimit(which, (value, value))


STDIO = "stdio"
"""The ``socket`` value that selects the stdin/stdout channel."""


class StdioChannel:
    """The channel over the agent's stdin and stdout, with the two calls the agent uses on a socket.

    Both ends move to fresh descriptors that children do not inherit, and 0 and 1 become
    /dev/null, so nothing the agent starts can read requests or forge replies."""

    def __init__(self) -> None:
        self.rfd = os.dup(0)  # os.dup makes non-inheritable descriptors
        self.wfd = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)

    def recv(self, n: int) -> bytes:
        return os.read(self.rfd, n)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view) :]


def connect(path: str, *, within_s: float) -> socket.socket:
    deadline = time.monotonic() + within_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def main() -> None:
    global OWN_PID_NAMESPACE
    config = json.loads(sys.argv[1])
    OWN_PID_NAMESPACE = bool(config.get("own_pid_namespace"))
    token = harden.take_token(config, protocol.TOKEN_ENV)  # before the environment is read (Agent.env)
    hardening = harden.apply()  # before any thread: the filter covers the threads and every child
    threading.stack_size(512 * 1024)  # per-request threads: little address space under RLIMIT_AS
    apply_rlimits(config.get("rlimits") or {})
    sock: Any = (
        StdioChannel()
        if config["socket"] == STDIO
        else connect(config["socket"], within_s=float(config.get("connect_within_s", 30.0)))
    )
    agent = Agent(config, sock)  # before the hello, which names the zygote it starts
    sock.sendall(
        protocol.encode(
            {
                "op": "hello",
                "token": token,
                "pid": os.getpid(),
                "version": protocol.VERSION,
                "python": sys.version.split()[0],
                "hardening": hardening,
                **zygote.describe(agent.zygote),
            }
        )
    )
    if config.get("proxy_socket"):
        import netfwd

        if config["proxy_socket"] == protocol.TUNNEL:
            agent.tunnels = netfwd.TunnelHub(agent.send, agent.send_frame)
            agent.tunnels.start(int(config.get("proxy_port", 3128)))
        else:
            netfwd.start(int(config.get("proxy_port", 3128)), config["proxy_socket"])
    ttl = float(config.get("ttl_s", 0))
    if ttl > 0:
        timer = threading.Timer(ttl, agent.exit, args=(3,))
        timer.daemon = True
        timer.start()
    signal.signal(signal.SIGTERM, lambda *_: agent.exit(0))
    if os.getpid() == 1:  # PID 1 of the sandbox: signals it handles are the only ones that reach it
        # a no-op handler, not SIG_IGN: an ignored SIGINT would be inherited by every command
        signal.signal(signal.SIGINT, lambda *_: None)
        threading.Thread(target=_reaper, daemon=True).start()
    try:
        agent.serve()
    finally:
        agent.exit(0)


if __name__ == "__main__":
    main()
