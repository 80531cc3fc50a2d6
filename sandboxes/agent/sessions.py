"""The agent's two persistent sessions: a Python interpreter and a bash shell.

Both are long-lived children in their own process group whose stdout and stderr are pipes the
agent reads (capped like any command). Each call is one request on a private channel, and its
end is known from that channel, never from scraping printed text:

- Python: requests and replies travel over a socketpair to ``pyworker.py``, an interpreter
  forked from the sandbox's zygote where the profile asks for one (``zygote.py``), else started
  anew (and when the zygote was given up). A timeout sends
  SIGINT (the cell sees ``KeyboardInterrupt``); an interpreter that does not stop within
  ``GRACE_S``, or that dies, is killed with its group and the result says ``restarted``. The
  interpreter cuts its reply's texts to ``max_output`` characters, and the agent cuts them again
  (the cell's own code can write on that socket; a frame past the bound restarts the interpreter).
- Shell: each command goes to bash on stdin as one ``eval $'...'`` line, so it may span lines
  and hold syntax errors without breaking the session; after it, bash writes the exit status,
  ``$PWD`` and ``export -p`` to a status pipe. On a timeout (or ``exit``) the whole shell group
  is killed and a new bash starts in the last directory with the last exported variables.

Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import protocol
from procs import TIMEOUT_EXIT, Capture, CgroupProbe, forget, kill_group, popen, prefer_as_oom_victim
from zygote import Forked, Zygote

GRACE_S = 2.0
"""How long an interrupted cell may take to stop before its interpreter is killed."""


class _Child:
    """A long-lived child with captured stdout/stderr; one call at a time."""

    def __init__(self, *, cwd: str, env: dict[str, str], probe: CgroupProbe) -> None:
        self.cwd = cwd
        self.env = env
        self.probe = probe
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def _spawn(self, argv: list[str], pass_fds: tuple[int, ...], stdin: Any) -> subprocess.Popen[bytes]:
        proc = popen(
            argv,
            cwd=self.cwd,
            env=self.env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
            start_new_session=True,
        )
        prefer_as_oom_victim(proc.pid)
        for f in (proc.stdout, proc.stderr):
            assert f is not None
            os.set_blocking(f.fileno(), False)
        return proc

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Send SIGKILL to the child's group without waiting (``close`` waits)."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> int | None:
        """Kill the child and its group; its exit status (``128 + signal`` for signals)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        kill_group(proc.pid)
        code = proc.wait()
        forget(proc.pid)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                f.close()
        return 128 - code if code < 0 else code

    @staticmethod
    def drain(fd: int, capture: Capture) -> bool:
        """Read what is there without blocking; False at end of stream."""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            if not data:
                return False
            capture.feed(data)

    def _pump(self, channel: int, out: Capture, err: Capture, deadline: float, on_channel: Any) -> bool:
        """Read output until ``on_channel`` (called when ``channel`` is readable) returns True;
        False when ``deadline`` passes first."""
        assert self.proc is not None and self.proc.stdout is not None and self.proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(channel, selectors.EVENT_READ, None)
        sel.register(self.proc.stdout.fileno(), selectors.EVENT_READ, out)
        sel.register(self.proc.stderr.fileno(), selectors.EVENT_READ, err)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for key, _ in sel.select(remaining):
                    if key.data is None:
                        if on_channel():
                            return True
                    elif not self.drain(key.fd, key.data):
                        sel.unregister(key.fd)
        finally:
            sel.close()
            for f, capture in ((self.proc.stdout, out), (self.proc.stderr, err)):
                if not f.closed:
                    self.drain(f.fileno(), capture)


class PythonSession(_Child):
    def __init__(self, *, python: str, worker: str, zygote: Zygote | None = None, **kwargs: Any) -> None:
        """``zygote``: fork the interpreter from it (``zygote.py``) while it serves; else (and
        once it is given up) start one."""
        super().__init__(**kwargs)
        self.python = python
        self.worker = worker
        self.zygote = zygote
        self.ctrl: socket.socket | None = None
        self.cell = 0

    def _start(self) -> None:
        mine, theirs = socket.socketpair()
        try:
            forked = self.zygote.fork(theirs.fileno()) if self.zygote is not None else None
            if forked is not None:
                self.proc = forked  # type: ignore[assignment]  # what the session uses of a Popen
                for f in (forked.stdout, forked.stderr):
                    os.set_blocking(f.fileno(), False)
            else:
                self.proc = self._spawn(
                    [self.python, "-u", self.worker, str(theirs.fileno())],
                    (theirs.fileno(),),
                    subprocess.DEVNULL,
                )
        finally:
            theirs.close()
        mine.settimeout(30.0)  # a reply frame, once it starts, arrives at once
        self.ctrl = mine

    def close(self) -> int | None:
        if self.ctrl is not None:
            self.ctrl.close()
            self.ctrl = None
        return super().close()

    def prestart(self) -> None:
        """Start the interpreter now and wait until it has run an empty cell, so that the first
        real cell does not wait for (or compete with) its start-up. A forked interpreter has no
        start-up left: it is ready once the zygote has forked it."""
        with self.lock:
            if self.proc is not None:
                return
            self._start()
            if isinstance(self.proc, Forked):
                return
            assert self.ctrl is not None
            try:
                self.ctrl.sendall(protocol.encode({"code": "", "cell": 0, "max_value": 0}))
                protocol.recv_frame(self.ctrl)
            except (OSError, ValueError):
                self.close()  # the next cell starts a new one and says nothing of it

    def execute(self, code: str, *, timeout: float, max_output: int) -> dict[str, Any]:
        with self.lock:
            start = time.monotonic()
            restarted = False
            if not self.alive():  # never started, or died between calls (the result says so)
                restarted = self.proc is not None
                self.close()
                self._start()
            assert self.proc is not None and self.ctrl is not None
            self.cell += 1
            out, err = Capture(max_output), Capture(max_output)
            oom_before = self.probe.oom_kills()
            reply: dict[str, Any] = {}
            ctrl = self.ctrl
            limit = protocol.reply_limit("py_exec", max_output=max_output)

            def on_reply() -> bool:
                try:  # the cell can write on this socket itself: a frame past the bound kills the interpreter
                    frame = protocol.recv_frame(ctrl, max_frame=limit)
                except ConnectionError as exc:
                    reply.update(dead=True, oversized="exceeds" in str(exc))
                    return True
                except (OSError, ValueError):
                    frame = None
                reply.update(_capped_reply(frame, max_output) if frame is not None else {"dead": True})
                return True

            timed_out = False
            try:
                ctrl.sendall(protocol.encode({"code": code, "cell": self.cell, "max_value": max_output}))
                done = self._pump(ctrl.fileno(), out, err, start + timeout, on_reply)
                if not done:
                    timed_out = True
                    os.kill(self.proc.pid, signal.SIGINT)
                    done = self._pump(ctrl.fileno(), out, err, time.monotonic() + GRACE_S, on_reply)
            except OSError:
                reply["dead"] = True
            result = {
                "stdout": out.text(),
                "stderr": err.text(),
                "value": reply.get("value"),
                "error": reply.get("error"),
                "traceback": reply.get("traceback"),
                "timed_out": timed_out,
                "restarted": restarted,
                "truncated": out.truncated or err.truncated or bool(reply.get("value_truncated")),
                "oom_killed": False,
            }
            if reply.get("dead") or not reply:
                status = self.close()
                oom_after = self.probe.oom_kills()
                oom = oom_before is not None and oom_after is not None and oom_after > oom_before
                if timed_out and not reply:
                    why = f"it ran past its {timeout:g} s limit and did not stop when interrupted"
                elif oom:
                    why = "it was killed for using more memory than the sandbox allows"
                elif reply.get("oversized"):
                    why = f"the cell wrote a reply frame of more than {limit} bytes on the interpreter's own channel"
                else:
                    why = f"its interpreter exited (status {status})"
                result.update(
                    error=f"SessionRestarted: the Python session was restarted because {why}; every variable is lost",
                    traceback=None,
                    restarted=True,
                    oom_killed=oom,
                )
            elif timed_out:
                result["error"] = (
                    f"TimeoutError: the cell ran past its {timeout:g} s limit and was interrupted"
                )
            result["duration"] = time.monotonic() - start
            return result


def _capped_reply(frame: dict[str, Any], max_output: int) -> dict[str, Any]:
    """The interpreter's reply with each text field cut to ``max_output`` characters: the
    interpreter caps its own, but the cell's code runs in it and may write a frame of its own."""
    reply: dict[str, Any] = {"value_truncated": bool(frame.get("value_truncated"))}
    for key in ("value", "error", "traceback"):
        value = frame.get(key)
        if value is None:
            reply[key] = None
            continue
        text, cut = protocol.cap_text(value if isinstance(value, str) else repr(value), max_output)
        reply[key] = text
        reply["value_truncated"] = reply["value_truncated"] or cut
    return reply


_DECLARE = re.compile(r"^declare -[A-Za-z]*x[A-Za-z]* ", re.MULTILINE)


def ansi_c_quote(text: str) -> str:
    """``text`` as one bash ``$'...'`` word on one line (every byte outside printable ASCII escaped)."""
    out = ["$'"]
    for b in text.encode("utf-8", "surrogateescape"):
        out.append(chr(b) if 32 <= b < 127 and b not in (0x27, 0x5C) else f"\\x{b:02x}")
    out.append("'")
    return "".join(out)


class ShellSession(_Child):
    def __init__(self, *, bash: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bash = bash
        self.status_fd: int | None = None
        self.status_w = -1
        self.exports = ""
        self.pwd = self.cwd

    def _start(self) -> None:
        r, w = os.pipe()
        try:
            self.proc = self._spawn([self.bash, "--noprofile", "--norc"], (w,), subprocess.PIPE)
        finally:
            os.close(w)
        self.status_fd, self.status_w = r, w  # bash holds the write end under the same number
        if self.exports or self.pwd != self.cwd:  # carry over what the previous shell had
            restore = f"cd -- {ansi_c_quote(self.pwd)} 2>/dev/null; {_DECLARE.sub('export ', self.exports)}"
            self._call(restore, time.monotonic() + 10.0, Capture(0), Capture(0))

    def close(self) -> int | None:
        if self.status_fd is not None:
            os.close(self.status_fd)
            self.status_fd = None
        return super().close()

    def _call(self, command: str, deadline: float, out: Capture, err: Capture) -> list[bytes] | None:
        """Run one command line; its status fields, [] when bash exited, None on timeout."""
        assert self.proc is not None and self.proc.stdin is not None and self.status_fd is not None
        status = bytearray()
        status_fd = self.status_fd

        def on_status() -> bool:
            data = os.read(status_fd, 1 << 16)
            status.extend(data)
            return not data or status.count(b"\0") >= 3

        line = (
            f"eval {ansi_c_quote(command)} </dev/null; __tg_rc=$?; "
            f"{{ printf '%d\\0%s\\0' \"$__tg_rc\" \"$PWD\"; export -p; printf '\\0'; }} >&{self.status_w}\n"
        )
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
            if not self._pump(status_fd, out, err, deadline, on_status):
                return None
        except OSError:
            return []
        fields = bytes(status).split(b"\0")
        if len(fields) < 4:
            return []
        self.pwd = fields[1].decode("utf-8", "surrogateescape")
        self.exports = fields[2].decode("utf-8", "surrogateescape")
        return fields

    def run(self, command: str, *, timeout: float, max_output: int) -> dict[str, Any]:
        if "\0" in command:
            return {
                "exit_code": 2,
                "stdout": "",
                "stderr": "the command holds a NUL byte, which a shell cannot take\n",
                "timed_out": False,
                "truncated": False,
                "duration": 0.0,
                "restarted": False,
                "oom_killed": False,
            }
        with self.lock:
            start = time.monotonic()
            note = ""
            if not self.alive():
                if self.proc is not None:
                    note = "[the shell had died; a new one was started in the same directory with the same exported variables]\n"
                self.close()
                self._start()
            out, err = Capture(max_output), Capture(max_output)
            oom_before = self.probe.oom_kills()
            fields = self._call(command, start + timeout, out, err)
            restarted = not fields
            if fields:
                exit_code = int(fields[0] or b"1")
            else:
                code = self.close()
                if fields is None:
                    exit_code = TIMEOUT_EXIT
                    note += (
                        f"[timed out after {timeout:g} s: the shell and its jobs were killed; a new one was "
                        "started in the same directory with the same exported variables]\n"
                    )
                else:  # bash exited (``exit N``, ``set -e``): its status is the command's
                    exit_code = code if code is not None else 1
                    note += f"[the shell exited with status {exit_code}; a new one was started in the same directory]\n"
                self._start()
            oom_after = self.probe.oom_kills()
            return {
                "exit_code": exit_code,
                "stdout": out.text(),
                "stderr": err.text() + note,
                "timed_out": fields is None,
                "truncated": out.truncated or err.truncated,
                "duration": time.monotonic() - start,
                "restarted": restarted,
                "oom_killed": oom_before is not None and oom_after is not None and oom_after > oom_before,
            }
