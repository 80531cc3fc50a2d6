"""The SWE tools besides ``bash`` (which comes from the code plugin): the file editor, search, submit.

They run in the sandbox that holds the repository (``/workspace``). The SWE environment hands
every tool its own repository sandbox, whatever kind the tool names; used elsewhere, they take
a ``shell`` sandbox. ``submit`` does nothing by itself: the environment sees the call, grades the
repository's diff and ends the episode.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from toolgym import Sandbox, SandboxBrokenError, ToolOutput, tool
from toolgym.plugins.swe.editor import Editor, EditorError

MAX_MATCHES = 100
"""Matching lines shown by ``search``; the count of the rest is given."""
MAX_LINE_CHARS = 300


async def _history(ctx: Any) -> dict[str, list[str | None]]:
    """The episode's undo history (a fresh one when called outside an episode)."""
    if ctx is None or not hasattr(ctx, "resource"):
        return {}
    return await ctx.resource("swe.editor_history", lambda _ctx: {})


@tool(name="str_replace_editor", sandbox="shell", timeout_s=60)
async def str_replace_editor(
    command: Literal["view", "create", "str_replace", "insert", "undo_edit"],
    path: str,
    file_text: str | None = None,
    view_range: list[int] | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
    *,
    sandbox: Sandbox,
    ctx: Any = None,
) -> ToolOutput:
    """View, create and edit files. `view` shows a file with line numbers (or a directory's
    contents two levels deep); `create` writes a new file; `str_replace` replaces `old_str`,
    which must occur exactly once in the file, by `new_str`; `insert` adds `new_str` after line
    `insert_line`; `undo_edit` reverts the last edit of the file.

    Args:
        command: One of view, create, str_replace, insert, undo_edit.
        path: Absolute path of the file or directory, e.g. /workspace/pkg/module.py.
        file_text: For create: the content of the new file.
        view_range: For view: [first, last] line numbers to show (1-based; last = -1 for the end).
        old_str: For str_replace: the exact text to replace (whitespace included).
        new_str: For str_replace: the replacement (empty to delete). For insert: the text to insert.
        insert_line: For insert: the line after which new_str goes (0 for the top of the file).
    """
    editor = Editor(sandbox, await _history(ctx))
    try:
        text = await editor.run(
            command,
            path,
            file_text=file_text,
            view_range=view_range,
            old_str=old_str,
            new_str=new_str,
            insert_line=insert_line,
        )
    except EditorError as exc:
        return ToolOutput(f"Error: {exc}", error=True)
    except SandboxBrokenError as exc:
        return ToolOutput(
            f"Error: the sandbox stopped working ({exc}).", error=True, metadata={"sandbox_broken": True}
        )
    return ToolOutput(text, metadata={"command": command})


@tool(name="search", sandbox="shell", timeout_s=60)
async def search(
    pattern: str,
    path: str = "/workspace",
    regex: bool = False,
    include: str | None = None,
    *,
    sandbox: Sandbox,
) -> ToolOutput:
    """Search files for a text (like grep -rn): every matching line with its file and line number.

    Args:
        pattern: The text to find (a regular expression, extended syntax, when regex is true).
        path: Absolute path of the directory or file to search (default: the repository).
        regex: Treat pattern as a regular expression instead of plain text.
        include: Only search files whose name matches this glob, e.g. "*.py".
    """
    if not pattern:
        return ToolOutput("Error: give a non-empty pattern", error=True)
    flags = "-rnIE" if regex else "-rnIF"
    include_opt = f"--include={shlex.quote(include)} " if include else ""
    out = "/tmp/.toolgym-search"
    script = (
        f"grep {flags} --exclude-dir=.git {include_opt}-e {shlex.quote(pattern)} -- {shlex.quote(path)} > {out}; "
        f'rc=$?; echo "$(wc -l < {out})"; head -n {MAX_MATCHES} {out}; rm -f {out}; exit $rc'
    )
    try:
        result = await sandbox.run(["bash", "-c", script], timeout=50)
    except SandboxBrokenError as exc:
        return ToolOutput(
            f"Error: the sandbox stopped working ({exc}).", error=True, metadata={"sandbox_broken": True}
        )
    if result.exit_code == 2 or result.timed_out:
        reason = "it took too long; search a smaller directory" if result.timed_out else result.stderr.strip()
        return ToolOutput(f"Error: search failed: {reason}", error=True)
    total_line, _, body = result.stdout.partition("\n")
    total = int(total_line.strip() or 0)
    if total == 0:
        return ToolOutput(f"No matches for {pattern!r} in {path}.", metadata={"matches": 0})
    lines = [
        ln if len(ln) <= MAX_LINE_CHARS else ln[:MAX_LINE_CHARS] + " [...]"
        for ln in body.rstrip("\n").split("\n")
    ]
    more = (
        f"\n[{total - MAX_MATCHES} more matching lines not shown: narrow the search]"
        if total > MAX_MATCHES
        else ""
    )
    head = f"{total} matching line{'s' if total != 1 else ''} for {pattern!r} in {path}:"
    return ToolOutput("\n".join([head, *lines]) + more, metadata={"matches": total})


@tool(name="submit", timeout_s=5)
async def submit() -> str:
    """Submit your changes to the repository as the solution and end the task. Call it once, when
    the issue is fixed."""
    return "Submitted. (Outside a SWE task this does nothing.)"


SWE_TOOLS = (str_replace_editor, search, submit)
