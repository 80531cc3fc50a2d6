"""Unified diffs (``git diff`` style): parse, make, apply and reverse them in Python.

Used on the host to derive a shipped task's base files from its repository (the gold and test
patches applied in reverse), to build those patches from file contents, and to turn a gold patch
into editor edits for the oracle. Application is strict: every context and removed line must
match exactly at the hunk's position (no fuzz), which is what a patch made from the same files
needs; anything else raises ``PatchError`` naming the file and hunk.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"


class PatchError(ValueError):
    """A patch that cannot be parsed, or does not apply to the text it was given."""


@dataclass(slots=True)
class Hunk:
    """One ``@@`` block. ``lines`` keep their one-character prefix (`` ``, ``-``, ``+``) and no
    line ending; ``no_newline_old`` / ``no_newline_new`` mark a last line without ``\\n``."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[str] = field(default_factory=list)
    no_newline_old: bool = False
    no_newline_new: bool = False

    def old_text(self) -> str:
        """The text this hunk replaces (context and removed lines), with line endings."""
        return _join([ln[1:] for ln in self.lines if ln[:1] in (" ", "-")], self.no_newline_old)

    def new_text(self) -> str:
        """The text it puts in their place (context and added lines)."""
        return _join([ln[1:] for ln in self.lines if ln[:1] in (" ", "+")], self.no_newline_new)

    def reversed(self) -> Hunk:
        """The hunk that undoes this one (in each run of changed lines, removals come first)."""
        swap = {"-": "+", "+": "-"}
        lines: list[str] = []
        run: list[str] = []
        for ln in [*self.lines, " "]:
            if ln[:1] in swap:
                run.append(swap[ln[:1]] + ln[1:])
                continue
            lines += [r for r in run if r[:1] == "-"] + [r for r in run if r[:1] == "+"]
            run = []
            lines.append(ln)
        return Hunk(
            self.new_start,
            self.new_len,
            self.old_start,
            self.old_len,
            lines[:-1],
            self.no_newline_new,
            self.no_newline_old,
        )


@dataclass(slots=True)
class FilePatch:
    """The changes to one file. ``old_path`` is None for a new file, ``new_path`` None for a
    deleted one; paths have no ``a/`` / ``b/`` prefix."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)
    binary: bool = False

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_deleted(self) -> bool:
        return self.new_path is None

    @property
    def is_rename(self) -> bool:
        return self.old_path is not None and self.new_path is not None and self.old_path != self.new_path

    def reversed(self) -> FilePatch:
        return FilePatch(self.new_path, self.old_path, [h.reversed() for h in self.hunks], self.binary)


def _join(lines: list[str], no_newline: bool) -> str:
    text = "".join(f"{ln}\n" for ln in lines)
    return text[:-1] if no_newline and text.endswith("\n") else text


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified diff (with or without ``diff --git`` headers) into per-file patches."""
    files: list[FilePatch] = []
    current: FilePatch | None = None
    hunk: Hunk | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            m = re.match(r"diff --git (\S+) (\S+)$", line)
            old, new = (_strip_prefix(m.group(1)), _strip_prefix(m.group(2))) if m else (None, None)
            current, hunk = FilePatch(old, new), None
            files.append(current)
        elif (
            line.startswith("--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("+++ ")
            and (hunk is None or hunk_complete(hunk))
        ):
            old, new = _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])
            if current is None or current.hunks:
                current = FilePatch(old, new)
                files.append(current)
            else:
                current.old_path, current.new_path = old, new
            hunk = None
            i += 1
        elif current is not None and line.startswith(("new file mode", "deleted file mode")):
            if line.startswith("new"):
                current.old_path = None
            else:
                current.new_path = None
        elif current is not None and line.startswith(("rename from ", "rename to ")):
            if line.startswith("rename from "):
                current.old_path = line[len("rename from ") :]
            else:
                current.new_path = line[len("rename to ") :]
        elif current is not None and line.startswith(("Binary files ", "GIT binary patch")):
            current.binary = True
        elif (m := _HUNK.match(line)) is not None:
            if current is None:
                raise PatchError(f"hunk header before any file header: {line!r}")
            hunk = Hunk(int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1))
            current.hunks.append(hunk)
        elif hunk is not None and line == NO_NEWLINE:
            last = hunk.lines[-1][:1] if hunk.lines else " "
            if last in (" ", "-"):
                hunk.no_newline_old = True
            if last in (" ", "+"):
                hunk.no_newline_new = True
        elif hunk is not None and not hunk_complete(hunk) and line[:1] in (" ", "-", "+", ""):
            hunk.lines.append(line if line else " ")
        i += 1
    for fp in files:
        for h in fp.hunks:
            if not hunk_complete(h):
                raise PatchError(
                    f"{fp.path}: hunk at line {h.old_start} is truncated (fewer lines than its header says)"
                )
    return files


def hunk_complete(h: Hunk) -> bool:
    old = sum(1 for ln in h.lines if ln[:1] in (" ", "-"))
    new = sum(1 for ln in h.lines if ln[:1] in (" ", "+"))
    return old >= h.old_len and new >= h.new_len


def apply_file_patch(text: str | None, fp: FilePatch) -> str | None:
    """The file's text after ``fp`` (None when it deletes the file). Strict: see module doc."""
    if fp.binary:
        raise PatchError(f"{fp.path}: binary patches are not supported here")
    if fp.is_new:
        if text is not None:
            raise PatchError(f"{fp.path}: the patch creates this file but it already exists")
        return "".join(h.new_text() for h in fp.hunks)
    if text is None:
        raise PatchError(f"{fp.old_path}: the patch changes this file but it does not exist")
    if fp.is_deleted:
        return None
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for h in fp.hunks:
        start = h.old_start - 1 if h.old_len else h.old_start
        old = h.old_text().splitlines(keepends=True)
        if start < pos or lines[start : start + len(old)] != old:
            raise PatchError(f"{fp.path}: hunk @@ -{h.old_start},{h.old_len} does not match the file")
        out.extend(lines[pos:start])
        out.extend(h.new_text().splitlines(keepends=True))
        pos = start + len(old)
    out.extend(lines[pos:])
    return "".join(out)


def apply_patch(files: dict[str, str], patch: str, *, reverse: bool = False) -> dict[str, str]:
    """A copy of ``{path: text}`` with ``patch`` (or its reverse) applied."""
    result = dict(files)
    for fp in parse_patch(patch):
        if reverse:
            fp = fp.reversed()
        new = apply_file_patch(result.get(fp.old_path) if fp.old_path else None, fp)
        if fp.old_path is not None:
            result.pop(fp.old_path, None)
        if new is not None and fp.new_path is not None:
            result[fp.new_path] = new
    return result


def make_patch(before: dict[str, str], after: dict[str, str], *, context: int = 3) -> str:
    """A ``git diff``-style patch turning ``before`` into ``after`` (paths sorted)."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        header = f"diff --git a/{path} b/{path}\n"
        if old is None:
            header += "new file mode 100644\n"
        elif new is None:
            header += "deleted file mode 100644\n"
        diff = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
            n=context,
        )
        body = []
        for line in diff:
            body.append(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}\n")
        chunks.append(header + "".join(body))
    return "".join(chunks)


def format_patch(files: list[FilePatch]) -> str:
    """Text of parsed file patches, in ``git diff`` form (without ``index`` lines)."""
    out: list[str] = []
    for fp in files:
        a, b = fp.old_path or fp.new_path, fp.new_path or fp.old_path
        out.append(f"diff --git a/{a} b/{b}\n")
        if fp.is_new:
            out.append("new file mode 100644\n")
        elif fp.is_deleted:
            out.append("deleted file mode 100644\n")
        elif fp.is_rename:
            out.append(f"rename from {fp.old_path}\nrename to {fp.new_path}\n")
        if fp.binary:
            raise PatchError(f"{fp.path}: binary patches cannot be rewritten")
        if not fp.hunks:
            continue
        out.append(f"--- {'a/' + fp.old_path if fp.old_path else '/dev/null'}\n")
        out.append(f"+++ {'b/' + fp.new_path if fp.new_path else '/dev/null'}\n")
        for h in fp.hunks:
            out.append(f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@\n")
            last_old = max((i for i, ln in enumerate(h.lines) if ln[:1] in (" ", "-")), default=-1)
            last_new = max((i for i, ln in enumerate(h.lines) if ln[:1] in (" ", "+")), default=-1)
            for i, ln in enumerate(h.lines):
                out.append(f"{ln}\n")
                if (i == last_old and h.no_newline_old) or (
                    i == last_new and h.no_newline_new and i != last_old
                ):
                    out.append(f"{NO_NEWLINE}\n")
    return "".join(out)


def reverse_patch(patch: str) -> str:
    """The patch that undoes ``patch``."""
    return format_patch([fp.reversed() for fp in parse_patch(patch)])


def patched_paths(patch: str) -> list[str]:
    """Files a patch touches, by their path after it (their old path when deleted)."""
    return [fp.path for fp in parse_patch(patch)]
