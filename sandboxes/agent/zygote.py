"""The agent's side of the Python session's zygote: a pre-imported interpreter that forks each
episode's (the zygote's side, and what a forked interpreter holds, is in ``pyworker.py``).

Starting an interpreter costs tens of milliseconds (the binary, ``site``, the worker's imports);
a fork of one that has done it costs about one. The zygote starts with the sandbox, from the
same command line, environment and working directory as a started interpreter, and the agent
serves no request but ``ping`` before it says it is ready (``wait_ready``), so no code of any
episode runs while it imports. One that cannot start (an image's Python without ``_ctypes``) is
given up: the session starts interpreters anew and the host, missing the zygote it recorded, makes
a new sandbox after each episode (and says why in its log). It then lives through the resets: ``kill_everything_else`` spares it (only it,
not what is below it) and sends it ``SIGCONT`` (an episode may have stopped it). The host checks,
looking from outside, that it is still the process the sandbox was made with, with the attributes
it had then (``hostprocs``); a zygote that died, was stopped past ``FORK_TIMEOUT_S`` or answers wrongly is
killed, the session starts interpreters the old way, and the host's check of the next reset,
missing the zygote, makes a new sandbox.

Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from typing import IO, Any

from procs import adopting, forget, kill_group, popen

READY_TIMEOUT_S = 30.0
"""Longest the zygote may take to import at start-up (a loaded machine) before it is given up."""
FORK_TIMEOUT_S = 5.0
"""Longest one fork may take before the zygote is given up (it was stopped or hangs)."""


class Forked:
    """An interpreter forked by the zygote and adopted by the agent: what ``subprocess.Popen``
    offers the sessions (``pid``, ``poll``, ``wait``, ``stdin``/``stdout``/``stderr``)."""

    def __init__(self, pid: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid = pid
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def _wait(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._wait(os.WNOHANG)

    def wait(self) -> int:
        code = self._wait(0)
        assert code is not None
        return code


class Zygote:
    """The zygote process and its channel (see the module docstring)."""

    def __init__(self, *, python: str, worker: str, cwd: str, env: dict[str, str]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc: subprocess.Popen[bytes] | None = popen(
                [python, "-u", worker, "--zygote", str(theirs.fileno())],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except OSError:
            mine.close()
            self.proc = None
        finally:
            theirs.close()
        self.channel = mine
        self.lock = threading.Lock()
        self.ready = False
        self.note: str | None = None
        """Why the zygote was given up, once it was."""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self) -> bool:
        """Block until the zygote has done importing (at once after the first time); False when
        it is gone or did not get there within ``READY_TIMEOUT_S``."""
        if self.ready:
            return True
        with self.lock:
            if not self.ready and self.proc is not None:
                self.channel.settimeout(READY_TIMEOUT_S)
                try:
                    self.ready = self.channel.recv(16) == b"R"
                except OSError:
                    pass
                if not self.ready:
                    self._give_up("it did not start")
        return self.ready

    def resume(self) -> None:
        """Continue the zygote if an episode stopped it (a reset calls this)."""
        if self.alive():
            assert self.proc is not None
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass

    def fork(self, ctrl_fd: int) -> Forked | None:
        """A new interpreter with ``ctrl_fd`` (a copy) as its channel and fresh pipes as stdout and
        stderr, adopted by the agent; None when the zygote cannot give one (then it is given up)."""
        if not self.wait_ready():
            return None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = 0
        with self.lock, adopting() as adopt:  # the orphan reaper must not take the interpreter's status
            if self.proc is None:
                reply = b""
            else:
                self.channel.settimeout(FORK_TIMEOUT_S)
                try:
                    socket.send_fds(self.channel, [b"F"], [out_w, err_w, ctrl_fd])
                    reply = self.channel.recv(32)
                except OSError:
                    reply = b""
            os.close(out_w)
            os.close(err_w)
            if reply.isdigit():
                pid = int(reply)
                adopt(pid)
            elif reply != b"-":  # "-": the fork failed (the process limit), the zygote serves on
                self._give_up(f"a fork answered {reply!r}")
        if not pid:
            os.close(out_r)
            os.close(err_r)
            return None
        return Forked(pid, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))

    def _give_up(self, why: str) -> None:
        """Kill the zygote (with ``lock`` held); the sessions then start interpreters anew."""
        self.note = why
        proc, self.proc = self.proc, None
        if proc is not None:
            kill_group(proc.pid)
            proc.wait()
            forget(proc.pid)
        self.channel.close()

    def close(self) -> None:
        with self.lock:
            if self.proc is not None:
                self._give_up("the agent closed it")


def describe(zygote: Any) -> dict[str, Any]:
    """The zygote's part of the agent's hello and stats."""
    if zygote is None:
        return {"zygote": None}
    return {"zygote": zygote.pid if zygote.alive() else None, "zygote_note": zygote.note}
