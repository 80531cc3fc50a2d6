"""The file editor of SWE tasks, with SWE-agent's ``str_replace_editor`` semantics.

Commands (paths absolute):

- ``view``: a file with ``cat -n`` line numbers (6-wide number, a tab, the line), optionally
  only ``view_range = [first, last]`` (1-based, inclusive, ``last = -1`` for the end); a directory
  as the non-hidden paths up to two levels below it.
- ``create``: a new file with ``file_text`` (parents created); an existing file is refused.
- ``str_replace``: replace ``old_str``, which must occur exactly once, with ``new_str`` (empty
  when omitted); shows the edited region.
- ``insert``: put ``new_str`` after line ``insert_line`` (0 = at the top).
- ``undo_edit``: revert the last edit of that file (undoing a ``create`` removes the file).

Files are edited through the sandbox's file API, so edits are confined to the work directory;
files elsewhere can be viewed. ``view`` reads a file whole only up to ``VIEW_READ_BYTES``; of a
larger one (or one outside the work directory) the sandbox sends an excerpt of at most
``EXCERPT_BYTES``, and the cut line names the file's size. ``str_replace`` and ``insert`` change
files up to ``EDIT_READ_BYTES``; ``undo_edit`` remembers at most ``HISTORY_BYTES`` of old texts. Unlike SWE-agent's tool, tabs are kept as they are (not expanded).
The undo history lives in a ``history`` mapping the caller keeps for the episode.
"""

from __future__ import annotations

import shlex
from collections.abc import MutableMapping
from typing import Literal

from toolgym import PathOutsideSandboxError, Sandbox, SandboxBrokenError, SandboxError

WORKDIR = "/workspace"
SNIPPET_LINES = 4
"""Lines of context shown around an edit."""
MAX_VIEW_CHARS = 20_000
"""A file view longer than this is cut; ``view_range`` shows the rest."""
VIEW_READ_BYTES = 1024 * 1024
"""Largest file ``view`` reads whole. Of a larger file, or one outside the work directory, it reads
only an excerpt made in the sandbox (viewing a 60 MB file held 230 MiB on the host)."""
EXCERPT_BYTES = 4 * MAX_VIEW_CHARS + 4
"""Most bytes of such an excerpt: enough to fill a view (a character is at most 4 bytes)."""
EDIT_READ_BYTES = 4 * 1024 * 1024
"""Largest file ``str_replace`` and ``insert`` change (bytes): an edit reads the file whole on the
host and keeps its old text for ``undo_edit``; a larger file is refused (``sed`` in bash edits it)."""
HISTORY_BYTES = 32 * 1024 * 1024
"""Most old texts kept for ``undo_edit`` in one episode (bytes): past it the oldest are forgotten."""

Command = Literal["view", "create", "str_replace", "insert", "undo_edit"]
History = MutableMapping[str, list[str | None]]


class EditorError(Exception):
    """A command the editor refuses; the message is what the model reads."""


def numbered(text: str, first_line: int = 1) -> str:
    """``cat -n`` style: each line as its number right-aligned in 6 columns, a tab, the line."""
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start=first_line))


class Editor:
    """One sandbox's editor. ``history`` maps a path to its earlier contents (None: did not exist)."""

    def __init__(self, sandbox: Sandbox, history: History | None = None) -> None:
        self.sandbox = sandbox
        self.history: History = history if history is not None else {}

    async def run(
        self,
        command: str,
        path: str,
        *,
        file_text: str | None = None,
        view_range: list[int] | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
    ) -> str:
        if not path.startswith("/"):
            raise EditorError(
                f"the path {path!r} is not absolute; give it from the root, e.g. {WORKDIR}/{path.lstrip('./')}"
            )
        path = _normalize(path)
        if command == "view":
            return await self.view(path, view_range)
        if command == "create":
            if file_text is None:
                raise EditorError("`create` needs `file_text`, the content of the new file")
            return await self.create(path, file_text)
        if command == "str_replace":
            if old_str is None:
                raise EditorError("`str_replace` needs `old_str`, the exact text to replace")
            return await self.str_replace(path, old_str, new_str or "")
        if command == "insert":
            if insert_line is None or new_str is None:
                raise EditorError(
                    "`insert` needs `insert_line` (insert after this line; 0 for the top) and `new_str`"
                )
            return await self.insert(path, insert_line, new_str)
        if command == "undo_edit":
            return await self.undo(path)
        raise EditorError(f"unknown command {command!r}; use view, create, str_replace, insert or undo_edit")

    # -- reading and writing -------------------------------------------------------------------

    async def _kind(self, path: str) -> str:
        q = shlex.quote(path)
        result = await self.sandbox.run(
            f"if [ -d {q} ]; then echo dir; elif [ -f {q} ]; then echo file; "
            f"elif [ -e {q} ]; then echo other; else echo missing; fi",
            timeout=30,
        )
        return result.stdout.strip() or "missing"

    async def _read(self, path: str) -> str:
        """The text of an existing file; EditorError when it is missing, a directory or not text."""
        try:
            data = await self.sandbox.read_file(path, max_bytes=EDIT_READ_BYTES)
        except FileNotFoundError:
            raise EditorError(
                f"the path {path} does not exist; check it with `view` on its directory"
            ) from None
        except IsADirectoryError:
            raise EditorError(f"{path} is a directory; only `view` works on directories") from None
        except PathOutsideSandboxError:
            raise EditorError(f"only files under {WORKDIR} can be changed, not {path}") from None
        except SandboxError:  # over EDIT_READ_BYTES (the sandbox refuses to send more)
            raise EditorError(
                f"{path} is larger than {EDIT_READ_BYTES // 2**20} MiB, the most the editor changes; "
                "view parts of it with view_range and edit it with sed or a script in bash"
            ) from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise EditorError(f"{path} is not a UTF-8 text file; the editor only handles text") from None

    async def _write(self, path: str, text: str) -> None:
        if not (path == WORKDIR or path.startswith(WORKDIR + "/")):
            raise EditorError(f"only files under {WORKDIR} can be changed, not {path}")
        try:
            await self.sandbox.write_file(path, text)
        except PathOutsideSandboxError as exc:
            raise EditorError(str(exc)) from None

    # -- commands ------------------------------------------------------------------------------

    async def view(self, path: str, view_range: list[int] | None) -> str:
        if view_range is not None and len(view_range) != 2:
            raise EditorError("`view_range` must be two line numbers: [first, last] (last = -1 for the end)")
        try:
            data = await self.sandbox.read_file(path, max_bytes=VIEW_READ_BYTES)
        except (FileNotFoundError, IsADirectoryError):
            if await self._kind(path) != "dir":
                raise EditorError(
                    f"the path {path} does not exist; check it with `view` on its directory"
                ) from None
            return await self._view_directory(path, view_range)
        except SandboxBrokenError:
            raise
        except SandboxError:  # larger than VIEW_READ_BYTES, or outside the work directory
            return await self._view_excerpt(path, view_range)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise EditorError(f"{path} is not a UTF-8 text file; the editor only handles text") from None
        lines = text.split("\n")
        first = 1
        if view_range is not None:
            first, last = self._check_range(path, view_range, len(lines))
            text = "\n".join(lines[first - 1 :] if last == -1 else lines[first - 1 : last])
        return self._numbered_view(path, text, first, len(lines))

    async def _view_directory(self, path: str, view_range: list[int] | None) -> str:
        if view_range:
            raise EditorError("`view_range` only applies to files, and this path is a directory")
        listing = await self.sandbox.run(
            f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort", timeout=30
        )
        return f"Files and directories up to 2 levels below {path} (hidden ones left out):\n{listing.stdout.rstrip()}"

    @staticmethod
    def _check_range(path: str, view_range: list[int], n_lines: int) -> tuple[int, int]:
        first, last = view_range
        if not 1 <= first <= n_lines:
            raise EditorError(f"`view_range` starts at {first} but {path} has lines 1 to {n_lines}")
        if last != -1 and not first <= last <= n_lines:
            raise EditorError(f"`view_range` ends at {last}; it must be -1 or between {first} and {n_lines}")
        return first, last

    @staticmethod
    def _numbered_view(path: str, text: str, first: int, n_lines: int, size_note: str = "") -> str:
        body = numbered(text, first)
        if len(body) > MAX_VIEW_CHARS:
            cut = body[:MAX_VIEW_CHARS].rsplit("\n", 1)[0]
            shown = cut.count("\n") + first
            body = (
                f"{cut}\n[... cut at line {shown} of {n_lines}{size_note}: "
                f"view the rest with view_range=[{shown + 1}, -1] ...]"
            )
        return f"Here is {path} with line numbers (cat -n):\n{body}"

    async def _view_excerpt(self, path: str, view_range: list[int] | None) -> str:
        """``view`` of a file too large to read whole (or outside the work directory): the sandbox
        counts its bytes and lines and sends at most ``EXCERPT_BYTES`` of the lines asked for."""
        first, last = view_range if view_range is not None else (1, -1)
        if not (isinstance(first, int) and isinstance(last, int)) or first < 1 or last < -1:
            raise EditorError(
                f"`view_range` must be line numbers from 1 (last = -1 for the end), got {view_range}"
            )
        span = f"{first},$p" if last == -1 else f"{first},{max(first, last)}p;{max(first, last)}q"
        q = shlex.quote(path)
        script = (
            f"if [ -d {q} ]; then echo dir; elif [ ! -e {q} ]; then echo missing; elif [ ! -f {q} ]; then echo other; "
            f"elif [ ! -r {q} ]; then echo unreadable; else echo file; wc -c < {q}; wc -l < {q}; "
            f"sed -n '{span}' {q} | head -c {EXCERPT_BYTES}; fi"
        )
        result = await self.sandbox.run(script, timeout=30, max_output=2 * (EXCERPT_BYTES + 4096))
        kind, _, rest = result.stdout.partition("\n")
        if kind == "dir":
            return await self._view_directory(path, view_range)
        if kind == "missing":
            raise EditorError(f"the path {path} does not exist; check it with `view` on its directory")
        if kind != "file":
            why = {"other": "it is not a regular file", "unreadable": "permission denied"}.get(
                kind, result.stderr.strip()
            )
            raise EditorError(f"cannot read {path}: {why}")
        size_text, _, rest = rest.partition("\n")
        count_text, _, excerpt = rest.partition("\n")
        n_lines = int(count_text) + 1  # as text.split("\n") counts them
        if view_range is not None:
            self._check_range(path, [first, last], n_lines)
        whole = len(excerpt.encode("utf-8", "surrogateescape")) < EXCERPT_BYTES - 3
        if "\ufffd" in (excerpt if whole else excerpt[:-1]):
            raise EditorError(f"{path} is not a UTF-8 text file; the editor only handles text")
        if whole and last != -1 and last < n_lines and excerpt.endswith("\n"):
            excerpt = excerpt[:-1]  # the range ends before the file's last line: no line break after it
        return self._numbered_view(path, excerpt, first, n_lines, f" (the file has {int(size_text):,} bytes)")

    def _remember(self, path: str, old: str | None) -> None:
        """Keep ``old`` for ``undo_edit``, forgetting the oldest texts past ``HISTORY_BYTES``."""
        self.history.setdefault(path, []).append(old)
        sizes = {p: sum(len(t) for t in stack if t is not None) for p, stack in self.history.items()}
        total = sum(sizes.values())
        while total > HISTORY_BYTES:
            largest = max(sizes, key=lambda p: sizes[p])
            dropped = self.history[largest].pop(0)
            size = len(dropped) if dropped is not None else 0
            sizes[largest] -= size
            total -= size

    async def create(self, path: str, file_text: str) -> str:
        if await self._kind(path) != "missing":
            raise EditorError(
                f"{path} already exists; `create` makes new files only: edit it with str_replace or insert"
            )
        await self._write(path, file_text)
        self._remember(path, None)
        return f"Created {path}."

    async def str_replace(self, path: str, old: str, new: str) -> str:
        if not old:
            raise EditorError(
                "`old_str` is empty; give the exact text to replace, with enough lines to be unique"
            )
        text = await self._read(path)
        count = text.count(old)
        if count == 0:
            raise EditorError(
                f"no replacement made: old_str does not occur verbatim in {path} "
                "(check whitespace and indentation; view the file to copy it exactly)"
            )
        if count > 1:
            starts, pos = [], text.find(old)
            while pos != -1:
                starts.append(text.count("\n", 0, pos) + 1)
                pos = text.find(old, pos + 1)
            raise EditorError(
                f"no replacement made: old_str occurs {count} times in {path} (at lines "
                f"{', '.join(map(str, starts))}); include more surrounding lines to make it unique"
            )
        at = text.find(old)
        updated = text[:at] + new + text[at + len(old) :]
        await self._write(path, updated)
        self._remember(path, text)
        first = text.count("\n", 0, at) + 1
        return self._edited(path, updated, first, first + new.count("\n"))

    async def insert(self, path: str, line: int, new: str) -> str:
        text = await self._read(path)
        lines = text.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise EditorError(
                f"`insert_line` {line} is outside the file: use 0 to {len(lines)} (insert after that line)"
            )
        block = new if new.endswith("\n") else new + "\n"
        if line == len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        updated = "".join(lines[:line]) + block + "".join(lines[line:])
        await self._write(path, updated)
        self._remember(path, text)
        return self._edited(path, updated, line + 1, line + block.count("\n"))

    async def undo(self, path: str) -> str:
        stack = self.history.get(path)
        if not stack:
            raise EditorError(f"no edit of {path} to undo")
        previous = stack.pop()
        if previous is None:
            await self.sandbox.run(["rm", "-f", "--", path], timeout=30)
            return f"Undid the creation of {path}: the file is removed."
        await self._write(path, previous)
        return self._edited(path, previous, 1, 0, undo=True)

    def _edited(self, path: str, text: str, first: int, last: int, *, undo: bool = False) -> str:
        lines = text.split("\n")
        lo = max(1, first - SNIPPET_LINES)
        hi = min(len(lines), max(first, last) + SNIPPET_LINES)
        if undo:
            lo, hi = 1, len(lines)
            head = f"Undid the last edit of {path}. It now reads (cat -n):"
        else:
            head = f"Edited {path}. Lines {lo}-{hi} now read (cat -n):"
        body = numbered("\n".join(lines[lo - 1 : hi]), lo)
        if len(body) > MAX_VIEW_CHARS:
            body = body[:MAX_VIEW_CHARS] + "\n[...]"
        tail = (
            "" if undo else "\nCheck the change (indentation, no duplicated lines) and edit again if needed."
        )
        return f"{head}\n{body}{tail}"


def _normalize(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)
