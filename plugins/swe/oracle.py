"""The scripted policy of SWE tasks: apply the gold patch with the tools, run the tests, submit.

Each file the gold patch changes is edited with ``str_replace_editor``: one ``str_replace`` per
hunk (the hunk's old lines → its new lines) when each hunk's old text occurs exactly once at the
time of its edit, a ``create`` for a new file. A file that cannot be edited that way (a hunk whose
text is not unique, a rename, a deletion, a binary change) gets its part of the patch applied
with ``git apply`` in ``bash`` instead. Before the edits the oracle views the first file; after
them it runs the test suite (shipped tasks) or shows the diff (image tasks); then it submits.
"""

from __future__ import annotations

import json
from typing import Any

from toolgym.plugins.swe.patches import FilePatch, apply_file_patch, format_patch, parse_patch
from toolgym.plugins.swe.task import SWETask

WORKDIR = "/workspace"
HEREDOC = "TOOLGYM_GOLD_PATCH"


def call(name: str, arguments: dict[str, Any], thought: str) -> str:
    """Model text for one tool call in the hermes format."""
    return f"{thought}\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def editor_edits(fp: FilePatch, text: str | None) -> list[dict[str, Any]] | None:
    """Editor calls that turn ``text`` into what ``fp`` makes of it, or None when they cannot."""
    path = f"{WORKDIR}/{fp.path}"
    if fp.binary or fp.is_rename or fp.is_deleted:
        return None
    if fp.is_new:
        return (
            None
            if text is not None
            else [{"command": "create", "path": path, "file_text": apply_file_patch(None, fp)}]
        )
    if text is None:
        return None
    try:
        target = apply_file_patch(text, fp)
    except ValueError:
        return None
    edits, current = [], text
    for h in fp.hunks:
        old, new = h.old_text(), h.new_text()
        if not old or current.count(old) != 1:
            return None
        current = current.replace(old, new, 1)
        edits.append({"command": "str_replace", "path": path, "old_str": old, "new_str": new})
    return edits if current == target else None


def plan(task: SWETask, base: dict[str, str | None], *, bash_tool: str = "bash") -> list[str]:
    """The oracle's turns, as model text. ``base`` holds the base contents of the files the gold
    patch changes (None for a file that does not exist)."""
    files = parse_patch(task.patch)
    turns: list[str] = []
    existing = [fp for fp in files if not fp.is_new and fp.old_path]
    if existing:
        turns.append(
            call(
                "str_replace_editor",
                {"command": "view", "path": f"{WORKDIR}/{existing[0].old_path}"},
                "Let me look at the code the issue is about.",
            )
        )
    for fp in files:
        edits = editor_edits(fp, base.get(fp.old_path) if fp.old_path else None)
        if edits is None:
            patch = format_patch([fp])
            turns.append(
                call(
                    bash_tool,
                    {"command": f"cd {WORKDIR} && git apply -v <<'{HEREDOC}'\n{patch}{HEREDOC}"},
                    f"I will change {fp.path} by applying a patch.",
                )
            )
            continue
        for edit in edits:
            verb = "Creating" if edit["command"] == "create" else "Fixing"
            turns.append(call("str_replace_editor", edit, f"{verb} {fp.path}."))
    if task.shipped:
        check = f"cd {WORKDIR} && python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -n 3"
    else:
        check = f"cd {WORKDIR} && git status --short && git diff --stat"
    turns.append(call(bash_tool, {"command": check}, "Now I check the result."))
    turns.append(call("submit", {}, "The fix is in place; submitting."))
    return turns


def touched_files(task: SWETask) -> list[str]:
    """Base paths of the files the gold patch changes (what ``plan`` needs the contents of)."""
    return [fp.old_path for fp in parse_patch(task.patch) if fp.old_path]
