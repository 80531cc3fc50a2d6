"""The file API, confined to the work directory.

A path is taken relative to the work directory (absolute paths must lie inside it). It is
refused when, lexically, ``..`` climbs out, or when, after symlinks are followed, it lands
outside; the final open uses ``O_NOFOLLOW`` so a symlink swapped in between the check and the
open is refused too. Refusals raise ``Outside`` with a message naming the path.

Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import os
import shutil
import stat


class Outside(PermissionError):
    """The path leaves the work directory."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(workdir: str, path: str) -> str:
    """The real path ``path`` names inside ``workdir``; raises ``Outside`` when it leaves it."""
    if not path or "\0" in path:
        raise ValueError(f"invalid path {path!r}: give a non-empty path without NUL bytes")
    root = os.path.realpath(workdir)
    joined = os.path.normpath(path if os.path.isabs(path) else os.path.join(workdir, path))
    if not (_inside(joined, os.path.normpath(workdir)) or _inside(joined, root)):
        raise Outside(f"path {path!r} leaves the work directory {workdir}; use a path inside it")
    real = os.path.realpath(joined)
    if not _inside(real, root):
        raise Outside(
            f"path {path!r} resolves through a symlink to {real}, outside the work directory {workdir}; "
            "file access is confined to the work directory"
        )
    return real


def write_file(workdir: str, path: str, data: bytes, *, mode: int = 0o644, append: bool = False) -> int:
    """Write ``data`` to ``path`` (parents are created); returns the number of bytes written."""
    real = resolve(workdir, path)
    parent = os.path.dirname(real)
    if parent != real:
        os.makedirs(parent, exist_ok=True)
        resolve(workdir, parent)  # a parent swapped for a symlink after the first check
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(real, flags, mode)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component became a symlink
            raise Outside(
                f"path {path!r} is a symlink; write to its target inside the work directory"
            ) from None
        raise
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return len(data)


def read_file(workdir: str, path: str, *, max_bytes: int) -> bytes:
    """The bytes of ``path``; raises ``ValueError`` when the file is larger than ``max_bytes``."""
    real = resolve(workdir, path)
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "is a directory", path)
        if st.st_size > max_bytes:
            raise ValueError(
                f"file {path!r} has {st.st_size} bytes, more than the {max_bytes} allowed; "
                "read it in parts with a command"
            )
        chunks, total = [], 0
        while chunk := f.read(1 << 20):  # sizes of special files are not known in advance
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise ValueError(
                    f"file {path!r} is larger than {max_bytes} bytes; read it in parts with a command"
                )
    return b"".join(chunks)


def wipe(directory: str) -> None:
    """Delete everything inside ``directory`` (not the directory itself), fixing permissions a
    command may have taken away."""

    def fix_and_retry(func, p, _exc):  # type: ignore[no-untyped-def]
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if not os.path.islink(p) and os.path.isdir(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for name in entries:
        p = os.path.join(directory, name)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, onerror=fix_and_retry)
            else:
                os.unlink(p)
        except OSError:
            pass
