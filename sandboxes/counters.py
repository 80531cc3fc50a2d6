"""Kernel counters a sandbox reset does not empty, and the one the host can put back: the memory
cgroup's peak.

A reset kills every process and empties every writable place, but the kernel keeps counting
where the last episode stopped: the sandbox's memory cgroup remembers its highest use, and an
episode can choose that figure (allocate N MiB) for the next episode on the same sandbox to read.
On cgroup v1 the host resets it (and the fail counters beside it) by writing 0, which needs write
access to the container's cgroup directory (root, on a Docker engine of this machine). On cgroup
v2, ``memory.peak`` takes a write only since Linux 6.12, and then resets it for that open file
alone: what the sandbox reads stays the cgroup's lifetime peak, so nothing can be done from
outside short of a new cgroup (a new container). Then the pool's group rule is what keeps it
harmless (``pool.py``; the README's "What carries over between episodes").

Host side only (never runs inside a sandbox).
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_RESETTABLE = (
    "memory.max_usage_in_bytes",
    "memory.memsw.max_usage_in_bytes",
    "memory.kmem.max_usage_in_bytes",
    "memory.kmem.tcp.max_usage_in_bytes",
    "memory.failcnt",
    "memory.memsw.failcnt",
    "memory.kmem.failcnt",
    "memory.kmem.tcp.failcnt",
)
"""cgroup v1 memory files a write of 0 resets: the peaks and the counts of hits on the limit."""
RESET = "reset"
"""What ``reset_memory_peak`` returns when the peak was put back."""


def memory_cgroup(pid: int, root: Path = CGROUP_ROOT) -> tuple[int, Path] | None:
    """``(cgroup version, directory)`` of the memory cgroup of host process ``pid``, or None when
    this host's ``/proc`` and ``/sys/fs/cgroup`` do not show it."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            directory = root / "memory" / path.lstrip("/")
            return (1, directory) if directory.is_dir() else None
    for line in lines:
        if line.startswith("0::") and (root / "cgroup.controllers").exists():
            directory = root / line[3:].lstrip("/")
            return (2, directory) if directory.is_dir() else None
    return None


def reset_memory_peak(pid: int, root: Path = CGROUP_ROOT) -> str:
    """Reset the peak memory use (and the limit-hit counts) of host process ``pid``'s memory
    cgroup to what it uses now: ``RESET``, or why it could not be done."""
    found = memory_cgroup(pid, root)
    if found is None:
        return "the sandbox's memory cgroup is not visible from this host"
    version, directory = found
    if version == 2:
        return (
            "cgroup v2: memory.peak resets only for the open file written to (Linux 6.12+), "
            "never for what the sandbox reads"
        )
    done = 0
    for name in V1_RESETTABLE:
        path = directory / name
        if not path.exists():
            continue
        try:
            path.write_text("0")
        except PermissionError:
            return f"no permission to write {path} (the host process is not root)"
        except OSError as exc:
            return f"could not write {path}: {exc.strerror or exc}"
        done += 1
    return RESET if done else f"no resettable memory counters in {directory}"
