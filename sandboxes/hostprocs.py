"""A sandbox's processes as the host sees them, for checking a reset from outside.

The agent's own report of its reset is not evidence: code that took the agent over could answer
"clean". The host therefore reads its own ``/proc``: every process of a sandbox descends from the
process that holds its PID namespace (the agent itself, PID 1 of a container; the outer ``bwrap``
of a local sandbox), because orphans are re-parented to the namespace's PID 1 and nothing inside
can leave the namespace. After a reset only the agent may be left, with the host PID it had when
the sandbox was made.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable


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
                    f"the host no longer sees {sorted(missing)} (init or agent) where it expected them"
                )
            return "; ".join(parts)
        time.sleep(0.02)
