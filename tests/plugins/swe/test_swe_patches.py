"""Unified diffs in Python (checked against git itself) and the oracle's patch-to-edits plan."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from toolgym.plugins.swe.datasets import base_files, shipped_tasks
from toolgym.plugins.swe.oracle import editor_edits, plan
from toolgym.plugins.swe.patches import (
    PatchError,
    apply_patch,
    format_patch,
    make_patch,
    parse_patch,
    reverse_patch,
)

BEFORE = {
    "a.py": "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n",
    "gone.txt": "bye\n",
    "tail.txt": "no newline",
}
AFTER = {
    "a.py": "one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\n",
    "new/b.py": "print('hi')\n",
    "tail.txt": "no newline, changed",
}


def test_make_apply_reverse_round_trip() -> None:
    patch = make_patch(BEFORE, AFTER)
    assert apply_patch(BEFORE, patch) == AFTER
    assert apply_patch(AFTER, patch, reverse=True) == BEFORE
    assert apply_patch(AFTER, reverse_patch(patch)) == BEFORE
    assert (
        parse_patch(format_patch(parse_patch(patch)))[0].hunks[0].lines
        == parse_patch(patch)[0].hunks[0].lines
    )
    files = {fp.path: fp for fp in parse_patch(patch)}
    assert files["new/b.py"].is_new and files["gone.txt"].is_deleted and len(files["a.py"].hunks) == 2


def _git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True, check=True
    ).stdout


def test_git_agrees(tmp_path: Path) -> None:
    """git applies the patches made here, and what we parse out of git's own diff applies here."""
    for path, text in BEFORE.items():
        (tmp_path / path).write_text(text)
    _git(tmp_path, "init", "-q")
    patch = make_patch(BEFORE, AFTER)
    _git(tmp_path, "apply", "--check", "-", stdin=patch)
    _git(tmp_path, "apply", "-", stdin=patch)
    assert {p: (tmp_path / p).read_text() for p in AFTER} == AFTER
    _git(tmp_path, "apply", "-R", "-", stdin=patch)
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    _git(tmp_path, "apply", "-", stdin=patch)
    _git(tmp_path, "add", "-A")
    git_diff = _git(tmp_path, "diff", "--cached", "HEAD")
    assert apply_patch(BEFORE, git_diff) == AFTER
    _git(tmp_path, "apply", "-", stdin=reverse_patch(git_diff))
    assert {p: (tmp_path / p).read_text() for p in BEFORE} == BEFORE and not (tmp_path / "new/b.py").exists()


def test_strict_application() -> None:
    patch = make_patch(BEFORE, AFTER)
    with pytest.raises(PatchError, match="does not match"):
        apply_patch({**BEFORE, "a.py": BEFORE["a.py"].replace("two", "2")}, patch)
    with pytest.raises(PatchError, match="does not exist"):
        apply_patch({}, patch)
    with pytest.raises(PatchError, match="truncated"):
        parse_patch("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n")


def test_oracle_edits_and_fallback() -> None:
    block = "a\nb\nc\nd\ne\nf\ng\n"
    before = block * 3
    (fp,) = parse_patch(make_patch({"m.py": before}, {"m.py": block + block.replace("d", "D") + block}))
    assert editor_edits(fp, before) is None  # the hunk's text occurs three times: no str_replace
    (fp,) = parse_patch(make_patch({"m.py": before + "z\n"}, {"m.py": before + "z\nh\n"}))
    assert editor_edits(fp, before + "z\n") == [
        {
            "command": "str_replace",
            "path": "/workspace/m.py",
            "old_str": "f\ng\nz\n",
            "new_str": "f\ng\nz\nh\n",
        }
    ]
    task = shipped_tasks()[0]
    turns = plan(task, {p: base_files(task)[p] for p in ("textkit/slug.py",)})
    calls = [json.loads(t.split("<tool_call>\n")[1].split("\n</tool_call>")[0]) for t in turns]
    assert [c["name"] for c in calls] == ["str_replace_editor", "str_replace_editor", "bash", "submit"]
    assert calls[0]["arguments"]["command"] == "view" and calls[1]["arguments"]["command"] == "str_replace"
    # a file the editor cannot handle goes through git apply in bash
    fallback = plan(task, {"textkit/slug.py": base_files(task)["textkit/slug.py"] * 2})
    assert "git apply" in fallback[1] and "TOOLGYM_GOLD_PATCH" in fallback[1]
