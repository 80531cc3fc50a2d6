"""How the local backend enforces memory and tmpfs limits, depending on what this host allows.

bubblewrap alone gives rlimits (``RLIMIT_AS`` is per process, so four processes may each use the
whole budget) and tmpfs capped in size but not in inodes (each file costs kernel memory). Where
the host allows more, the sandbox is started through a small launcher that does it first:

- **Memory** (``memory_mode``): ``cgroup2`` when a cgroup v2 subtree with the memory controller is
  writable (a systemd delegate, or root), ``cgroup1`` when the v1 memory hierarchy is writable
  (root, usually); the sandbox then joins its own cgroup (``memory.max`` = the profile's memory,
  no swap, ``pids.max``) before bwrap runs, so the sum over processes is capped and inode and
  shared-memory pages are charged to it. Else ``rlimit``: ``RLIMIT_AS`` per process only.
- **Inodes** (``inode_mode``): ``mount`` when this process may mount (root): the launcher runs in
  a private mount namespace, mounts the sandbox's tmpfs there with ``size`` and ``nr_inodes``
  and bwrap binds them in (they vanish with the sandbox). Else ``none``: bwrap's ``--tmpfs`` has
  a size but no inode cap (kernel memory is then bounded only by a memory cgroup, if any).

``toolgym sandbox doctor`` prints both modes (``describe()``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "toolgym-"


@dataclass(frozen=True)
class CgroupRoot:
    """Where sandbox cgroups are made: ``version`` 1 or 2, and the parent directories (v1: one per
    controller, memory first)."""

    version: int
    parents: tuple[Path, ...]
    why: str = ""


@dataclass
class Launch:
    """What the launcher does for one sandbox."""

    cgroups: list[Path] = field(default_factory=list)
    """Cgroup directories the sandbox joins (removed by ``cleanup``)."""
    mounts: list[tuple[Path, str]] = field(default_factory=list)
    """(host directory, tmpfs options) mounted in the launcher's private mount namespace."""


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


@functools.lru_cache(maxsize=1)
def cgroup_root() -> CgroupRoot | None:
    """The place to make memory cgroups, or None (then ``cgroup_problem()`` says why)."""
    return _find_cgroup_root()[0]


@functools.lru_cache(maxsize=1)
def cgroup_problem() -> str:
    return _find_cgroup_root()[1]


@functools.lru_cache(maxsize=1)
def _find_cgroup_root() -> tuple[CgroupRoot | None, str]:
    if os.geteuid() == 0 and shutil.which("setpriv") is None:  # the launcher drops to nobody with it
        return None, "setpriv (util-linux) is missing, and the launcher needs it to drop root"
    own = _own_cgroups()
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and "" in own:
        base = v2 / own[""].lstrip("/")
        enabled = (
            (base / "cgroup.subtree_control").read_text().split()
            if (base / "cgroup.subtree_control").exists()
            else []
        )
        if "memory" not in enabled:
            with contextlib.suppress(OSError):
                (base / "cgroup.subtree_control").write_text("+memory +pids")
                enabled = (base / "cgroup.subtree_control").read_text().split()
        if "memory" in enabled and os.access(base, os.W_OK):
            return CgroupRoot(2, (base,)), ""
        return None, (
            f"cgroup v2: no writable subtree with the memory controller at {base} (run under a "
            "delegate: systemd-run --user --scope -p Delegate=yes ...)"
        )
    if "memory" in own and Path("/sys/fs/cgroup/memory").is_dir():
        mem = Path("/sys/fs/cgroup/memory") / own["memory"].lstrip("/")
        parents = [mem]
        if "pids" in own and Path("/sys/fs/cgroup/pids").is_dir():
            parents.append(Path("/sys/fs/cgroup/pids") / own["pids"].lstrip("/"))
        if all(os.access(p, os.W_OK) for p in parents) and _can_mkdir(mem):
            return CgroupRoot(1, tuple(parents)), ""
        return None, f"cgroup v1: {mem} is not writable by this user"
    return None, "no cgroup memory controller is visible"


def _can_mkdir(parent: Path) -> bool:
    probe = parent / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def memory_mode() -> str:
    root = cgroup_root()
    return f"cgroup{root.version}" if root else "rlimit"


@functools.lru_cache(maxsize=1)
def can_mount() -> bool:
    """Whether the launcher can mount tmpfs with an inode cap in a private mount namespace."""
    tools = [shutil.which(t) for t in ("unshare", "mount", "setpriv")]
    if os.geteuid() != 0 or None in tools:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "mount",
                "-t",
                "tmpfs",
                "-o",
                "size=1m,nr_inodes=16",
                "tmpfs",
                tmp,
            ],
            capture_output=True,
            timeout=20,
        )
    return done.returncode == 0


def inode_mode() -> str:
    return "mount" if can_mount() else "none"


def describe() -> str:
    """One line for ``toolgym sandbox doctor``."""
    mem = memory_mode()
    mem_text = {
        "cgroup1": "cgroup v1 (sum over processes capped)",
        "cgroup2": "cgroup v2 (sum over processes capped)",
    }.get(mem, f"RLIMIT_AS per process only ({cgroup_problem()})")
    inode_text = (
        "tmpfs mounted with size and nr_inodes caps"
        if inode_mode() == "mount"
        else "tmpfs capped in size only (inode caps need root)"
    )
    return f"memory: {mem_text}; {inode_text}"


def prepare(sandbox_id: str, *, memory_bytes: int, pids: int) -> list[Path]:
    """Make the sandbox's cgroups (none in ``rlimit`` mode); the directories, for ``cleanup``."""
    root = cgroup_root()
    if root is None:
        return []
    made: list[Path] = []
    try:
        for parent in root.parents:
            path = parent / f"{PREFIX}{sandbox_id}"
            path.mkdir()
            made.append(path)
            if root.version == 2:
                (path / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
                with contextlib.suppress(OSError):
                    (path / "pids.max").write_text(str(pids))
            elif (path / "memory.limit_in_bytes").exists():
                (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):  # no swap accounting: RAM is still capped
                    (path / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            elif (path / "pids.max").exists():
                (path / "pids.max").write_text(str(pids))
    except OSError:
        cleanup(made)
        raise
    return made


def cleanup(cgroups: list[Path]) -> None:
    """Remove the sandbox's cgroups (their processes must be gone); never raises."""
    for path in cgroups:
        with contextlib.suppress(OSError):
            path.rmdir()


def sweep() -> int:
    """Remove empty sandbox cgroups left by dead processes; how many."""
    root = cgroup_root()
    removed = 0
    for parent in root.parents if root else ():
        with contextlib.suppress(OSError):
            for path in parent.glob(f"{PREFIX}*"):
                with contextlib.suppress(OSError):
                    if not (path / "cgroup.procs").read_text().strip():
                        path.rmdir()
                        removed += 1
    return removed


def launcher_argv(
    bwrap: list[str], *, cgroups: list[Path], mounts: list[tuple[Path, str]], drop_to: int | None
) -> list[str]:
    """``bwrap`` started through a shell that first joins ``cgroups``, mounts ``mounts`` in a
    private mount namespace and drops to uid ``drop_to`` (root only); the process id stays the
    same from the launcher to bwrap (each step ``exec``s the next)."""
    if not cgroups and not mounts:
        return bwrap
    lines = ["set -e"]
    lines += [f"echo $$ > {shlex.quote(str(p / 'cgroup.procs'))}" for p in cgroups]
    lines += [f"mount -t tmpfs -o {shlex.quote(opts)} tmpfs {shlex.quote(str(d))}" for d, opts in mounts]
    tail = '"$@"'
    if drop_to is not None:
        tail = f'{shutil.which("setpriv")} --reuid={drop_to} --regid={drop_to} --clear-groups -- "$@"'
    lines.append(f"exec {tail}")
    shell = ["/bin/sh", "-c", "\n".join(lines), "sh", *bwrap]
    if mounts:
        return [str(shutil.which("unshare")), "--mount", "--propagation", "private", "--", *shell]
    return shell
