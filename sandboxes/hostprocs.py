"""A sandbox's processes as the host sees them, for checking a reset from outside.

The agent's own report of its reset is not evidence: code that took the agent over could answer
"clean". The host therefore reads its own ``/proc``: every process of a sandbox descends from the
process that holds its PID namespace (the agent itself, PID 1 of a container; the outer ``bwrap``
of a local sandbox), because orphans are re-parented to the namespace's PID 1 and nothing inside
can leave the namespace. After a reset only the agent may be left, with the host PID it had when
the sandbox was made, and with the attributes it had then (``attributes_changed``, below).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from typing import Any


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's), [] when it is gone."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def _children_by_scan() -> dict[int, list[int]]:
    """Parent -> children over all of ``/proc`` (kernels without ``task/*/children``)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


HAVE_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (not ``root`` itself)."""
    tree = None if HAVE_CHILDREN_FILES else _children_by_scan()
    seen: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        for child in children(pid) if tree is None else tree.get(pid, []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def describe(pids: Iterable[int]) -> str:
    """``pid (command line)`` of each, for messages."""
    parts = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:80]
        except OSError:
            cmd = "?"
        parts.append(f"{pid} ({cmd})")
    return ", ".join(parts)


def only_expected(
    root: int, expected: set[int], *, within_s: float = 0.5, kept_under: int | None = None
) -> str | None:
    """None when the processes below ``root`` are exactly ``expected``; else why not. Waits up to
    ``within_s`` for killed processes to finish exiting. ``kept_under`` (the agent, after a reset
    that kept its kept session): the process tree of its one child that is not in ``expected``
    is allowed too; two such children are not."""
    deadline = time.monotonic() + within_s
    while True:
        found = descendants(root)
        if kept_under is not None:
            kids = [k for k in children(kept_under) if k not in expected]
            if len(kids) == 1:
                found -= {kids[0]} | descendants(kids[0])
        extra, missing = found - expected, expected - found
        if not extra and not missing:
            return None
        if time.monotonic() > deadline:
            parts = []
            if extra:
                parts.append(f"the host sees processes the reset left: {describe(extra)}")
            if missing:
                parts.append(
                    f"the host no longer sees {sorted(missing)} (init, agent or zygote) where it expected them"
                )
            return "; ".join(parts)
        time.sleep(0.02)


# -- what a sandbox's code can change in the agent from outside it ---------------------------------
#
# Every process of a sandbox runs as the agent's uid, and the kernel lets a process of the same
# uid change a few attributes of another one without any capability: its resource limits
# (``prlimit``: lower only, the hard limit included), nice value (``setpriority``: up only), CPU
# affinity, scheduling policy and I/O priority. Whatever an episode sets on the agent, every process
# the agent starts later inherits: the next episode's interpreter and commands would run with
# limits, CPUs and priorities an earlier episode chose for them (a covert channel of many bits,
# and sabotage). The agent cannot undo a lowered hard limit, so the host records these attributes
# when the sandbox is made and a reset is accepted only when they are still the same.

_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
"""``ioprio_get``'s number per machine (not in ``os``); elsewhere the I/O priority is not compared."""


@functools.cache
def _syscall() -> tuple[Any, int] | None:
    """libc's ``syscall`` and ``ioprio_get``'s number on this machine (None where not known)."""
    import ctypes
    import platform

    number = _IOPRIO_GET.get(platform.machine())
    return None if number is None else (ctypes.CDLL(None, use_errno=True).syscall, number)


def _ioprio(tid: int) -> int | None:
    call = _syscall()
    if call is None:
        return None
    value = int(call[0](call[1], 1, tid))  # IOPRIO_WHO_PROCESS
    return None if value < 0 else value


def attributes(pid: int) -> dict[str, object] | None:
    """The attributes of process ``pid`` that another process of its uid can change and that its
    children inherit: ``limits`` (``/proc/PID/limits``) and, per thread, nice, CPU affinity,
    scheduling policy and priority, I/O priority. None when the process is gone."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            limits = f.read()
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None
    threads = {}
    for tid in tids:
        try:
            threads[tid] = (
                os.getpriority(os.PRIO_PROCESS, tid),
                tuple(sorted(os.sched_getaffinity(tid))),
                os.sched_getscheduler(tid),
                os.sched_getparam(tid).sched_priority,
                _ioprio(tid),
            )
        except OSError:  # a request thread that ended meanwhile
            continue
    return {"limits": limits, "thread": threads.get(pid), "threads": threads}


def fresh_attributes(pid: int) -> dict[str, object] | None:
    """What ``attributes_changed`` compares with, taken when the sandbox is made: the limits and
    the main thread's attributes (every later thread of the agent starts from the main thread's)."""
    now = attributes(pid)
    return None if now is None else {"limits": now["limits"], "thread": now["thread"]}


def attributes_changed(pid: int, fresh: dict[str, object], *, who: str = "agent") -> str | None:
    """None when process ``pid`` (the ``who``) and each of its threads still have the ``fresh``
    attributes; else what changed (for the pool's log)."""
    now = attributes(pid)
    if now is None:
        return f"the {who} {pid} is gone"
    if now["limits"] != fresh["limits"]:
        was = dict(_limit_rows(str(fresh["limits"])))
        changed = [
            f"{name}: {value}" for name, value in _limit_rows(str(now["limits"])) if was.get(name) != value
        ]
        return f"the {who}'s resource limits were changed from inside the sandbox ({'; '.join(changed)})"
    names = ("nice", "CPU affinity", "scheduling policy", "scheduling priority", "I/O priority")
    for tid, values in now["threads"].items():  # type: ignore[attr-defined]
        for name, value, was in zip(names, values, fresh["thread"] or (), strict=False):  # type: ignore[call-overload]
            if value != was:
                return f"the {name} of the {who}'s thread {tid} was changed from inside the sandbox ({was} -> {value})"
    return None


def _limit_rows(text: str) -> list[tuple[str, str]]:
    rows = []
    for line in text.splitlines()[1:]:
        name = line[:26].strip()
        rows.append((name, " ".join(line[26:].split())))
    return rows


# -- the Python session's zygote ------------------------------------------------------------------
#
# A sandbox whose profile asks for it holds a second process that lives through the resets: the
# zygote that forks each episode's interpreter (``agent/zygote.py``). Episodes run as its uid, so
# the same attributes as the agent's can be changed on it, and it could be killed and its pid
# taken by another process. The host records it when the sandbox is made (the agent's only child
# then, named by the agent's hello) and accepts a reset only when that same process, by pid and
# start time, is still there with the attributes it had.


def start_time(pid: int, *, living: bool = False) -> int | None:
    """When ``pid`` started (clock ticks after boot, ``/proc/PID/stat``); None when it is gone (and,
    with ``living``, when it has exited but its parent has not reaped it yet: a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if living and fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _inner_pid(pid: int) -> int | None:
    """``pid``'s number in its own PID namespace (the last of ``NSpid``)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def note_zygote(agent: int, inner_pid: int) -> dict[str, object]:
    """The zygote of a sandbox just made, whose agent (host pid ``agent``) said it is
    ``inner_pid`` inside: ``{"pid", "start", "attributes"}``. Raises ``LookupError`` when it is not
    the agent's only child."""
    kids = children(agent)
    if len(kids) != 1 or _inner_pid(kids[0]) != inner_pid:
        raise LookupError(f"expected the agent's zygote ({inner_pid} inside) as its only child, found {kids}")
    pid = kids[0]
    return {"pid": pid, "start": start_time(pid), "attributes": fresh_attributes(pid)}


def zygote_changed(record: dict[str, object]) -> str | None:
    """None when the zygote ``note_zygote`` recorded is still there, unchanged; else why not."""
    pid = int(record["pid"])  # type: ignore[call-overload]
    if start_time(pid, living=True) != record["start"]:  # killed but not yet reaped is gone too
        return f"the zygote {pid} is gone (the sandbox's interpreters can no longer be forked from it)"
    attributes = record.get("attributes")
    return attributes_changed(pid, attributes, who="zygote") if attributes else None  # type: ignore[arg-type]
