"""Processes inside the sandbox: capped output capture, process-group kills, cgroup probes, and
running one command to completion.

A command runs in a new session (so a new process group). When its leader exits, or its timeout
passes, every process still in the group is killed with SIGKILL: background children do not
outlive the command (the shell session exists for long-lived jobs). Output is capped at the
source: the first and last ``limit / 2`` bytes of each stream are kept, the middle is counted
and dropped, and the pipes are always drained so a flood never blocks or piles up in memory.

Exit codes follow the shell: ``128 + N`` when a signal N ended the leader, and 124 on a timeout.

Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

TIMEOUT_EXIT = 124
DRAIN_S = 0.5
"""How long to keep reading a finished command's pipes (held open by an escaped process)."""


class Capture:
    """Keeps the first and last bytes of a stream, ``limit`` bytes in all, and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.head_limit = max(0, limit) // 2
        self.tail_limit = max(0, limit) - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:  # trim in batches: amortised O(1) per byte
                del self.tail[: -self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + min(len(self.tail), self.tail_limit)

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_limit :]) if self.tail_limit else b""
        omitted = self.total - len(self.head) - len(tail)
        if omitted <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace")
        head = bytes(self.head).decode("utf-8", "replace")
        return (
            f"{head}\n[... {omitted} bytes of output omitted: output truncated, {self.total} bytes in all, "
            f"the first {len(self.head)} and the last {len(tail)} shown ...]\n{tail.decode('utf-8', 'replace')}"
        )


def _stat_fields() -> Iterator[tuple[int, list[str]]]:
    """``(pid, fields of /proc/PID/stat after the command name)`` of every process this sandbox can see."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        yield int(name), stat[stat.rfind(")") + 2 :].split()


def process_table() -> list[tuple[int, int, str]]:
    """``(pid, process group, state letter)`` of every process this sandbox can see."""
    return [(pid, int(fields[2]), fields[0]) for pid, fields in _stat_fields() if len(fields) >= 3]


def subtree(root: int) -> set[int]:
    """``root`` and every live process below it (by parent links in ``/proc``); empty when it is gone."""
    below: dict[int, list[int]] = {}
    for pid, fields in _stat_fields():
        if len(fields) >= 2 and fields[0] not in "ZX":
            below.setdefault(int(fields[1]), []).append(pid)
    if not os.path.exists(f"/proc/{root}"):
        return set()
    seen, todo = {root}, [root]
    while todo:
        for child in below.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


# -- the agent as its namespace's PID 1 ------------------------------------------------------------
# Both backends start the agent as PID 1 of the sandbox's PID namespace (no separate init whose
# memory a tool could write through /proc/1/mem: the agent is not dumpable). Orphans are therefore
# re-parented to the agent, which must reap them, but never a child some thread is waiting for.

_managed: set[int] = set()
_managed_lock = threading.Lock()


def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen``, with the child recorded as one a thread will wait for itself."""
    with _managed_lock:
        proc: subprocess.Popen[bytes] = subprocess.Popen(argv, **kwargs)
        _managed.add(proc.pid)
    return proc


@contextlib.contextmanager
def adopting() -> Iterator[Callable[[int], None]]:
    """Hold the orphan reaper off while a process another one forked is re-parented to the agent
    (the zygote's interpreters); call the function given with its pid before leaving."""
    with _managed_lock:
        yield _managed.add


def forget(pid: int) -> None:
    """The child ``pid`` has been waited for."""
    with _managed_lock:
        _managed.discard(pid)


def reap_orphans() -> int:
    """Reap the zombies among this process's children that nobody waits for; how many."""
    me, reaped = os.getpid(), 0
    with _managed_lock:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in _managed:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read().decode("ascii", "replace")
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 1 and fields[0] == "Z" and int(fields[1]) == me:
                try:
                    os.waitpid(int(name), os.WNOHANG)
                    reaped += 1
                except ChildProcessError:
                    pass
    return reaped


def kill_group(pgid: int, *, within_s: float = 2.0) -> bool:
    """SIGKILL every process of group ``pgid`` until none is left alive (zombies excepted).

    Repeats because a fork bomb forks while it is being killed. Returns True when the group is
    gone, False if processes remain after ``within_s`` seconds.
    """
    deadline = time.monotonic() + within_s
    pause = 0.0002  # a killed process is gone within microseconds when a CPU is free: look again soon
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        if not any(pg == pgid and state not in "ZX" for _, pg, state in process_table()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


def prefer_as_oom_victim(pid: int) -> None:
    """Make ``pid`` (and what it forks later) the OOM killer's first choice, so that a memory
    bomb kills itself rather than the agent. Raising the score needs no privilege."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


class CgroupProbe:
    """Reads the sandbox's own cgroup (v1 or v2) when one is visible; every reading may be None."""

    def __init__(self) -> None:
        root = "/sys/fs/cgroup"
        v1 = os.path.exists(f"{root}/memory/memory.limit_in_bytes")
        self._oom = f"{root}/memory/memory.oom_control" if v1 else f"{root}/memory.events"
        self._mem = f"{root}/memory/memory.usage_in_bytes" if v1 else f"{root}/memory.current"
        self._mem_max = f"{root}/memory/memory.limit_in_bytes" if v1 else f"{root}/memory.max"
        self._pids = f"{root}/pids/pids.current" if v1 else f"{root}/pids.current"
        self._pids_max = f"{root}/pids/pids.max" if v1 else f"{root}/pids.max"

    @staticmethod
    def _number(path: str) -> int | None:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def oom_kills(self) -> int | None:
        try:
            with open(self._oom) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            return None
        return None

    def stats(self) -> dict[str, int | None]:
        limit = self._number(self._mem_max)
        if limit is not None and limit >= 1 << 60:  # v1 reports "no limit" as a huge number
            limit = None
        return {
            "memory_bytes": self._number(self._mem),
            "memory_limit_bytes": limit,
            "pids": self._number(self._pids),
            "pids_limit": self._number(self._pids_max),
            "oom_kills": self.oom_kills(),
        }


_OOM_WORDS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")


def looks_out_of_memory(exit_code: int, stderr: Capture) -> bool:
    """Where no cgroup counts OOM kills (the local backend's rlimits), an allocation failure shows
    as a failed command whose error output names it."""
    if exit_code == 0:
        return False
    tail = bytes(stderr.head[-4096:]) + bytes(stderr.tail[-4096:])
    return any(word in tail for word in _OOM_WORDS)


def _feed_stdin(pipe: Any, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (so its pid, the group id, stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def run_command(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    stdin: bytes | None,
    timeout: float,
    max_output: int,
    probe: CgroupProbe,
) -> dict[str, Any]:
    """Run ``argv`` to completion or timeout; the reply fields of the ``run`` op."""
    start = time.monotonic()
    oom_before = probe.oom_kills()
    try:
        proc = popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        where = "working directory" if exc.filename == cwd else "command"
        code = 127 if isinstance(exc, FileNotFoundError) and where == "command" else 126
        message = f"cannot run {argv[0]!r}: {where} {exc.filename!r}: {exc.strerror}\n"
        return {
            "exit_code": code,
            "stdout": "",
            "stderr": message,
            "timed_out": False,
            "truncated": False,
            "duration": time.monotonic() - start,
            "oom_killed": False,
            "signal": None,
        }
    prefer_as_oom_victim(proc.pid)
    if stdin is not None:
        threading.Thread(target=_feed_stdin, args=(proc.stdin, stdin), daemon=True).start()
    out, err = Capture(max_output), Capture(max_output)
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    pidfd = None
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ, None)
    except (AttributeError, OSError):  # old kernel or seccomp: poll instead
        pass
    deadline = start + timeout
    exited = timed_out = False
    drain_until = 0.0
    pipes_open = 2
    try:
        while True:
            now = time.monotonic()
            if exited and (not pipes_open or now >= drain_until):
                break
            if not exited and now >= deadline:
                timed_out = exited = True
                kill_group(proc.pid)
                drain_until = time.monotonic() + DRAIN_S
                continue
            wait = (drain_until if exited else deadline) - now
            if pidfd is None and not exited:
                wait = min(wait, 0.01)
            for key, _ in sel.select(max(wait, 0.0)):
                if key.data is None:
                    continue
                data = os.read(key.fd, 1 << 16)
                if data:
                    key.data.feed(data)
                else:
                    sel.unregister(key.fileobj)
                    pipes_open -= 1
            if not exited and _exited(proc.pid):
                exited = True
                if pidfd is not None:
                    sel.unregister(pidfd)
                kill_group(proc.pid)  # background children die with the command
                drain_until = time.monotonic() + DRAIN_S
    finally:
        sel.close()
        for f in (proc.stdout, proc.stderr):
            f.close()
        if pidfd is not None:
            os.close(pidfd)
    _, status, _ = os.wait4(proc.pid, 0)
    forget(proc.pid)
    proc.returncode = os.waitstatus_to_exitcode(status)
    sig = -proc.returncode if proc.returncode < 0 else None
    exit_code = TIMEOUT_EXIT if timed_out else (128 + sig if sig else proc.returncode)
    oom_after = probe.oom_kills()
    if oom_before is not None and oom_after is not None:
        oom = oom_after > oom_before
    else:
        oom = looks_out_of_memory(exit_code, err)
    return {
        "exit_code": exit_code,
        "stdout": out.text(),
        "stderr": err.text(),
        "timed_out": timed_out,
        "truncated": out.truncated or err.truncated,
        "duration": time.monotonic() - start,
        "oom_killed": oom,
        "signal": sig,
    }
