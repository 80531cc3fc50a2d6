"""What a reset wipes, found by enumeration rather than from a list (issue 17).

Everything a sandbox process can leave behind for the next episode lives in one of:

- a **writable mount**: the root file system is read-only on both backends, so every place a
  file can be written is a mount that ``/proc/self/mountinfo`` lists as ``rw``, that the agent
  (the same uid as every command) may write, and whose file system keeps data (not ``proc``,
  ``sysfs``, ``devpts``...). Each is emptied and its root's mode put back as it was at start-up;
  ``/dev/mqueue`` is one (POSIX message queues are its files) and so is ``/dev/shm`` (POSIX shared
  memory). Each root's mode, extended attributes and timestamps are put back too. A writable
  mount that is not a directory cannot be wiped and is reported (character devices excepted:
  Docker masks ``/proc/keys`` and others with ``/dev/null``).
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

VOLATILE = {"proc", "sysfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs", "bpf", "pstore",
            "fusectl", "configfs", "binfmt_misc", "autofs", "nsfs", "devtmpfs"}
"""File systems whose contents are not files a process leaves behind (or that it cannot write)."""
IPC_RMID = 0


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def writable_mounts() -> list[tuple[str, str]]:
    """``(mount point, file system type)`` of every mount this process can write into."""
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
        if os.access(point, os.W_OK):
            out.append((point, fstype))
    return out


def snapshot() -> dict[str, tuple[int, int, int]]:
    """``(mode, atime_ns, mtime_ns)`` of every writable mount's root, taken when the sandbox is
    fresh: the roots survive a wipe, so their metadata must be put back too (a timestamp or an
    extended attribute is enough to pass an answer to the next episode)."""
    fresh = {}
    for point, _ in writable_mounts():
        try:
            st = os.lstat(point)
        except OSError:
            continue
        fresh[point] = (st.st_mode & 0o7777, st.st_atime_ns, st.st_mtime_ns)
    return fresh


def _restore_root(point: str, fresh: tuple[int, int, int]) -> None:
    """Mode, extended attributes and timestamps of a wiped mount's root as they were when fresh;
    a root this uid does not own gets timestamps of now (an entry made and removed, then read)."""
    mode, atime, mtime = fresh
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


def wipe_all(extra: list[str], fresh: dict[str, tuple[int, int, int]]) -> None:
    """Empty every writable mount (and the ``extra`` directories), restore the roots' metadata,
    remove the System V IPC objects. Processes must already be gone."""
    points = {p for p, _ in writable_mounts()} | set(extra)
    for point in sorted(points, key=len, reverse=True):  # inner mounts first
        if point != "/" and os.path.isdir(point) and not os.path.islink(point):  # a writable root: see leftovers
            files.wipe(point)
    for point in sorted(fresh, key=len, reverse=True):
        _restore_root(point, fresh[point])
    remove_sysv()


def leftovers(fresh: dict[str, tuple[int, int, int]]) -> dict[str, Any]:
    """What a wipe could not remove: ``{"files": {mount: count}, "sysv": count, "unwipeable": [...]}``
    (empty values when clean)."""
    found: dict[str, int] = {}
    unwipeable = []
    mounts = writable_mounts()
    nested = {p for p, _ in mounts}
    for point, _ in mounts:
        if point == "/" or not os.path.isdir(point) or os.path.islink(point):
            unwipeable.append(point)  # "/": a writable root file system is never wiped in place
            continue
        if point not in fresh:
            unwipeable.append(f"{point} (appeared after start)")
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
