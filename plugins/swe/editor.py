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
files elsewhere can be viewed. Unlike SWE-agent's tool, tabs are kept as they are (not expanded).
The undo history lives in a ``history`` mapping the caller keeps for the episode.
"""

from __future__ import annotations

import shlex
from collections.abc import MutableMapping
from typing import Literal

from toolgym import PathOutsideSandboxError, Sandbox

WORKDIR = "/workspace"
SNIPPET_LINES = 4
"""Lines of context shown around an edit."""
MAX_VIEW_CHARS = 20_000
"""A file view longer than this is cut; ``view_range`` shows the rest."""

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

    async def run(self, command: str, path: str, *, file_text: str | None = None, view_range: list[int] | None = None,
                  old_str: str | None = None, new_str: str | None = None, insert_line: int | None = None) -> str:
        if not path.startswith("/"):
            raise EditorError(f"the path {path!r} is not absolute; give it from the root, e.g. {WORKDIR}/{path.lstrip('./')}")
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
                raise EditorError("`insert` needs `insert_line` (insert after this line; 0 for the top) and `new_str`")
            return await self.insert(path, insert_line, new_str)
        if command == "undo_edit":
            return await self.undo(path)
        raise EditorError(f"unknown command {command!r}; use view, create, str_replace, insert or undo_edit")

    # -- reading and writing -------------------------------------------------------------------

    async def _kind(self, path: str) -> str:
        q = shlex.quote(path)
        result = await self.sandbox.run(f"if [ -d {q} ]; then echo dir; elif [ -f {q} ]; then echo file; "
                                        f"elif [ -e {q} ]; then echo other; else echo missing; fi", timeout=30)
        return result.stdout.strip() or "missing"

    async def _read(self, path: str) -> str:
        """The text of an existing file; EditorError when it is missing, a directory or not text."""
        try:
            data = await self.sandbox.read_file(path)
        except FileNotFoundError:
            raise EditorError(f"the path {path} does not exist; check it with `view` on its directory") from None
        except IsADirectoryError:
            raise EditorError(f"{path} is a directory; only `view` works on directories") from None
        except PathOutsideSandboxError:
            result = await self.sandbox.run(["cat", "--", path], timeout=30)
            if result.exit_code != 0:
                raise EditorError(f"cannot read {path}: {result.stderr.strip()}") from None
            data = result.stdout.encode()
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
        try:
            text = await self._read(path)
        except EditorError:
            kind = await self._kind(path)
            if kind != "dir":
                raise
            if view_range:
                raise EditorError("`view_range` only applies to files, and this path is a directory") from None
            listing = await self.sandbox.run(
                f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort", timeout=30)
            return f"Files and directories up to 2 levels below {path} (hidden ones left out):\n{listing.stdout.rstrip()}"
        lines = text.split("\n")
        first = 1
        if view_range is not None:
            if len(view_range) != 2:
                raise EditorError("`view_range` must be two line numbers: [first, last] (last = -1 for the end)")
            first, last = view_range
            if not 1 <= first <= len(lines):
                raise EditorError(f"`view_range` starts at {first} but {path} has lines 1 to {len(lines)}")
            if last != -1 and not first <= last <= len(lines):
                raise EditorError(f"`view_range` ends at {last}; it must be -1 or between {first} and {len(lines)}")
            text = "\n".join(lines[first - 1 :] if last == -1 else lines[first - 1 : last])
        body = numbered(text, first)
        if len(body) > MAX_VIEW_CHARS:
            cut = body[:MAX_VIEW_CHARS].rsplit("\n", 1)[0]
            shown = cut.count("\n") + first
            body = f"{cut}\n[... cut at line {shown} of {len(lines)}: view the rest with view_range=[{shown + 1}, -1] ...]"
        return f"Here is {path} with line numbers (cat -n):\n{body}"

    async def create(self, path: str, file_text: str) -> str:
        if await self._kind(path) != "missing":
            raise EditorError(f"{path} already exists; `create` makes new files only: edit it with str_replace or insert")
        await self._write(path, file_text)
        self.history.setdefault(path, []).append(None)
        return f"Created {path}."

    async def str_replace(self, path: str, old: str, new: str) -> str:
        if not old:
            raise EditorError("`old_str` is empty; give the exact text to replace, with enough lines to be unique")
        text = await self._read(path)
        count = text.count(old)
        if count == 0:
            raise EditorError(f"no replacement made: old_str does not occur verbatim in {path} "
                              "(check whitespace and indentation; view the file to copy it exactly)")
        if count > 1:
            starts, pos = [], text.find(old)
            while pos != -1:
                starts.append(text.count("\n", 0, pos) + 1)
                pos = text.find(old, pos + 1)
            raise EditorError(f"no replacement made: old_str occurs {count} times in {path} (at lines "
                              f"{', '.join(map(str, starts))}); include more surrounding lines to make it unique")
        at = text.find(old)
        updated = text[:at] + new + text[at + len(old) :]
        await self._write(path, updated)
        self.history.setdefault(path, []).append(text)
        first = text.count("\n", 0, at) + 1
        return self._edited(path, updated, first, first + new.count("\n"))

    async def insert(self, path: str, line: int, new: str) -> str:
        text = await self._read(path)
        lines = text.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise EditorError(f"`insert_line` {line} is outside the file: use 0 to {len(lines)} (insert after that line)")
        block = new if new.endswith("\n") else new + "\n"
        if line == len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        updated = "".join(lines[:line]) + block + "".join(lines[line:])
        await self._write(path, updated)
        self.history.setdefault(path, []).append(text)
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
        tail = "" if undo else "\nCheck the change (indentation, no duplicated lines) and edit again if needed."
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
