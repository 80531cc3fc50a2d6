"""What a reset wipes, found by enumeration rather than from a list.

Everything a sandbox process can leave behind for the next episode lives in one of:

- a **writable mount**: the root file system is read-only on both backends, so every place a
  file can be written is a mount that ``/proc/self/mountinfo`` lists as ``rw``, that the agent
  (the same uid as every command) may write, and whose file system keeps data (not ``proc``,
  ``sysfs``, ``devpts``...). Each is emptied and its root's mode put back as it was at start-up;
  ``/dev/mqueue`` is one (POSIX message queues are its files) and so is ``/dev/shm`` (POSIX shared
  memory). Each root's mode, extended attributes and timestamps are put back too. A writable
  mount that is not a directory cannot be wiped and is reported (character devices excepted:
  Docker masks ``/proc/keys`` and others with ``/dev/null``).
- a **writable place below a read-write mount whose root is not writable** (an operator's bind
  mount with a writable ``scratch/`` inside, ``/`` of a backend whose root file system is a tmpfs):
  every read-write mount is walked (bounded, never following a symbolic link nor crossing into
  another mount) for directories this uid can write or owns (it could make them writable) and for
  regular files it can write or owns. A directory that was empty when the sandbox started is
  wiped and its metadata put back like a mount root's. What cannot be made clean is reported in
  ``leftovers()["unwipeable"]`` (so the host destroys the sandbox and makes a new one, as for a
  writable root file system), never wiped: a directory that held files before the sandbox
  started (wiping it would destroy the operator's data), a writable file outside a wiped
  directory (its contents cannot be put back), a walk that hit its bound.
- **System V IPC** objects of the sandbox's IPC namespace (``/proc/sysvipc/{shm,sem,msg}``): removed.
- **processes**, and with them listening sockets and anything scheduled: killed by the agent
  (and checked by the host from outside).

``leftovers()`` counts what is still there after the wipe, for the host's poison check.
Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import ctypes
import os
import stat
from typing import Any

import files

VOLATILE = {
    "proc",
    "sysfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "securityfs",
    "debugfs",
    "tracefs",
    "bpf",
    "pstore",
    "fusectl",
    "configfs",
    "binfmt_misc",
    "autofs",
    "nsfs",
    "devtmpfs",
}
"""File systems whose contents are not files a process leaves behind (or that it cannot write)."""
IPC_RMID = 0


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


WALK_LIMIT = 20000
"""Entries looked at below the non-writable roots of read-write mounts; past it, the reset cannot
vouch for the rest and reports the mount."""

Fresh = dict[str, tuple[int, int, int, bool]]
"""``place: (mode, atime_ns, mtime_ns, held)`` as the sandbox started; ``held``: the place had
files then (operator data: never wiped)."""


def rw_mounts() -> list[tuple[str, str]]:
    """``(mount point, file system type)`` of every read-write mount of a file system that keeps
    data, whether or not this process can write its root."""
    out: list[tuple[str, str]] = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 6 or not right:
            continue
        point, options, fstype = _unescape(fields[4]), fields[5].split(","), right.split()[0]
        if "rw" not in options or fstype in VOLATILE:
            continue
        try:
            if stat.S_ISCHR(os.stat(point).st_mode):  # a masked path (/dev/null bound over it)
                continue
        except OSError:
            continue
        out.append((point, fstype))
    return out


def writable_mounts() -> list[tuple[str, str]]:
    """``(mount point, file system type)`` of every mount this process can write into."""
    return [(p, t) for p, t in rw_mounts() if os.access(p, os.W_OK)]


def _mine(st: os.stat_result, path: str) -> bool:
    """This uid can change what ``path`` holds: it may write it, or owns it (and so may chmod it)."""
    return st.st_uid == os.geteuid() or os.access(path, os.W_OK, follow_symlinks=False)


def walk_places(limit: int = WALK_LIMIT) -> tuple[list[str], list[str]]:
    """Below the roots of read-write mounts this uid cannot write: ``(directories it can change,
    problems)``; problems are writable regular files and walks that hit ``limit``. A directory
    found is not walked further (the wipe empties it whole)."""
    mounts = rw_mounts()
    points = {p for p, _ in mounts}
    places: list[str] = []
    problems: list[str] = []
    for point, _ in mounts:
        try:
            root = os.lstat(point)
        except OSError:
            continue
        if not stat.S_ISDIR(root.st_mode) or os.access(point, os.W_OK):
            continue  # a writable root is wiped as a whole; a file mount point is reported elsewhere
        seen, stack = 0, [point]
        while stack:
            current = stack.pop()
            try:
                entries = list(os.scandir(current))
            except OSError:
                continue
            seen += len(entries)
            if seen > limit:
                problems.append(f"{point} (walk stopped after {limit} entries: the rest is unchecked)")
                break
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.path in points or st.st_dev != root.st_dev:
                    continue  # another mount: looked at on its own
                if stat.S_ISDIR(st.st_mode):
                    if _mine(st, entry.path):
                        places.append(entry.path)
                    else:
                        stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode) and _mine(st, entry.path):
                    problems.append(f"{entry.path} (a writable file: its contents cannot be put back)")
    return sorted(places), sorted(problems)


def snapshot() -> Fresh:
    """``(mode, atime_ns, mtime_ns, held)`` of every writable mount's root and every writable
    place below a read-only-rooted mount, taken when the sandbox is fresh: the roots survive a
    wipe, so their metadata must be put back too (a timestamp or an extended attribute is enough
    to pass an answer to the next episode)."""
    fresh: Fresh = {}
    walked, _ = walk_places()
    for point in [p for p, _ in writable_mounts()] + walked:
        try:
            st = os.lstat(point)
            held = point in walked and bool(os.listdir(point))
        except OSError:
            continue
        fresh[point] = (st.st_mode & 0o7777, st.st_atime_ns, st.st_mtime_ns, held)
    return fresh


def _restore_root(point: str, fresh: tuple[int, int, int, bool]) -> None:
    """Mode, extended attributes and timestamps of a wiped mount's root as they were when fresh;
    a root this uid does not own gets timestamps of now (an entry made and removed, then read)."""
    mode, atime, mtime, _ = fresh
    try:
        st = os.lstat(point)
        if st.st_mode & 0o7777 != mode:
            os.chmod(point, mode)
    except OSError:
        return
    try:
        for name in os.listxattr(point):
            try:
                os.removexattr(point, name)
            except OSError:
                pass
    except OSError:
        pass
    if st.st_uid == os.geteuid():
        try:
            os.utime(point, ns=(atime, mtime))
            return
        except OSError:
            pass
    try:
        probe = os.path.join(point, f".tg-reset-{os.getpid()}")
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY, 0o600))
        os.unlink(probe)
        os.listdir(point)
    except OSError:
        pass


def sysv_ids() -> dict[str, list[int]]:
    """Ids of the System V IPC objects of this IPC namespace, per kind."""
    out: dict[str, list[int]] = {}
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            rows = []
        out[kind] = [int(row.split()[1]) for row in rows if len(row.split()) > 1]
    return out


def remove_sysv() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    ids = sysv_ids()
    for ident in ids["shm"]:
        libc.shmctl(ident, IPC_RMID, None)
    for ident in ids["sem"]:
        libc.semctl(ident, 0, IPC_RMID)
    for ident in ids["msg"]:
        libc.msgctl(ident, IPC_RMID, None)


def wipe_all(extra: list[str], fresh: Fresh) -> None:
    """Empty every writable mount, every place below a read-only-rooted mount that was empty at
    start (and the ``extra`` directories), restore their metadata, remove the System V IPC
    objects. Processes must already be gone. A place that held files at start is left alone."""
    clean = {p for p, v in fresh.items() if not v[3]}
    walked, _ = walk_places()
    points = {p for p, _ in writable_mounts()} | set(extra) | (set(walked) & clean)
    for point in sorted(points, key=len, reverse=True):  # inner mounts first
        if (
            point != "/" and os.path.isdir(point) and not os.path.islink(point)
        ):  # a writable root: see leftovers
            files.wipe(point)
    for point in sorted(clean, key=len, reverse=True):
        _restore_root(point, fresh[point])
    remove_sysv()


def leftovers(fresh: Fresh) -> dict[str, Any]:
    """What a wipe could not remove: ``{"files": {place: count}, "sysv": count, "unwipeable": [...]}``
    (empty values when clean)."""
    found: dict[str, int] = {}
    unwipeable = []
    mounts = writable_mounts()
    walked, problems = walk_places()
    unwipeable += problems
    nested = {p for p, _ in rw_mounts()}
    for point in [p for p, _ in mounts] + walked:
        if point == "/" or not os.path.isdir(point) or os.path.islink(point):
            unwipeable.append(point)  # "/": a writable root file system is never wiped in place
            continue
        if point not in fresh:
            unwipeable.append(f"{point} (appeared after start)")
            continue
        if fresh[point][3]:
            unwipeable.append(
                f"{point} (held files before the sandbox started: not wiped, so as not to destroy them)"
            )
            continue
        try:
            names = [n for n in os.listdir(point) if os.path.join(point, n) not in nested]
            st = os.lstat(point)
            xattrs = os.listxattr(point)
        except OSError:
            continue
        if names:
            found[point] = len(names)
        if st.st_mode & 0o7777 != fresh[point][0]:
            unwipeable.append(f"{point} (mode)")
        if xattrs:
            unwipeable.append(f"{point} (extended attributes {xattrs})")
        if st.st_uid == os.geteuid() and st.st_mtime_ns != fresh[point][2]:
            unwipeable.append(f"{point} (modification time)")
    return {"files": found, "sysv": sum(len(v) for v in sysv_ids().values()), "unwipeable": unwipeable}
