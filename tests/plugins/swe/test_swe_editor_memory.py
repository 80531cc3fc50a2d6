"""``str_replace_editor view`` of a huge file holds little on the host, and a
large file still reads as ``cat -n`` would show it.

The attack (a fresh Python per backend, ``tests/reply_memory.py``): viewing a 60 MB file grew the
host by 424 MiB before (the file read whole over the channel, base64, decoded, split, numbered).
Now a file over ``VIEW_READ_BYTES`` (1 MiB) is never read whole: the sandbox sends at most
``EXCERPT_BYTES`` of the lines asked for, and the cut line names the file's size. Bound: twice a
1 MiB read's reply, plus 16 MiB of slack (18.7 MiB).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.reply_memory import explain, measure
from tests.sandboxes.helpers import ensure_images, require
from toolgym.plugins.swe.editor import MAX_VIEW_CHARS
from toolgym.plugins.swe.tools import str_replace_editor
from toolgym.sandboxes.pool import PooledBackend


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "local"])
def test_viewing_a_60_mb_file_holds_little_on_the_host(backend: str) -> None:
    require(backend)
    if backend == "docker":
        ensure_images("shell")
    m = measure("editor-view", backend=backend)
    assert m.hostile_bytes <= m.bound_bytes, explain(m)
    assert not m.error and m.observation_chars <= MAX_VIEW_CHARS + 400, explain(m)
    assert any("cut at line 186 of 600001 (the file has 60,000,000 bytes)" in n for n in m.notes), explain(m)


# -- what a large file reads as -----------------------------------------------------------------------

VIEW_READ_BYTES = 1024 * 1024
"""``editor.VIEW_READ_BYTES`` (written out: this file must import on the code before the cap)."""
BIG = "/workspace/big.txt"
LINES = 40_000
"""Lines of 30 characters (and their numbers): 1.4 MB, over VIEW_READ_BYTES."""


@pytest.fixture(scope="module")
def sandbox(local_backend: PooledBackend, runner: asyncio.Runner) -> Iterator[Any]:
    sb = runner.run(local_backend.acquire("shell"))
    text = "".join(f"line {i:06d} " + "y" * 17 + "\n" for i in range(1, LINES + 1))
    assert len(text.encode()) > VIEW_READ_BYTES
    runner.run(sb.write_file(BIG, text))
    runner.run(sb.write_file("/workspace/no-newline.txt", text + "last"))
    runner.run(sb.write_file("/workspace/binary.bin", b"\xff\xfe" * (VIEW_READ_BYTES)))
    yield sb
    runner.run(local_backend.release(sb))


def view(sandbox: Any, runner: asyncio.Runner, path: str, view_range: list[int] | None = None) -> Any:
    args: dict[str, Any] = {"command": "view", "path": path}
    if view_range is not None:
        args["view_range"] = view_range
    return runner.run(str_replace_editor.call(args, sandbox=sandbox))


def line(i: int) -> str:
    return f"{i:6}\tline {i:06d} " + "y" * 17


def test_a_large_file_reads_as_cat_n_shows_it(sandbox: Any, runner: asyncio.Runner) -> None:
    whole = view(sandbox, runner, BIG)
    assert not whole.error
    rows = whole.text.splitlines()
    assert rows[1:4] == [line(1), line(2), line(3)]
    shown = len(rows) - 2
    assert rows[-1] == (
        f"[... cut at line {shown} of {LINES + 1} (the file has {LINES * 30:,} bytes): "
        f"view the rest with view_range=[{shown + 1}, -1] ...]"
    )
    middle = view(sandbox, runner, BIG, [20_000, 20_002])
    assert middle.text.splitlines()[1:] == [line(20_000), line(20_001), line(20_002)]
    end = view(sandbox, runner, BIG, [LINES - 1, -1])  # to the end: the empty line after the last newline
    assert end.text.splitlines()[1:] == [line(LINES - 1), line(LINES), f"{LINES + 1:6}\t"]
    last = view(sandbox, runner, "/workspace/no-newline.txt", [LINES, -1])
    assert last.text.splitlines()[1:] == [line(LINES), f"{LINES + 1:6}\tlast"]


def test_a_large_file_gets_the_same_refusals(sandbox: Any, runner: asyncio.Runner) -> None:
    past = view(sandbox, runner, BIG, [LINES + 5, -1])
    assert past.error and f"has lines 1 to {LINES + 1}" in past.text
    backwards = view(sandbox, runner, BIG, [10, 5])
    assert backwards.error and "must be -1 or between 10 and" in backwards.text
    binary = view(sandbox, runner, "/workspace/binary.bin")
    assert binary.error and "not a UTF-8 text file" in binary.text


def test_files_outside_the_work_directory_are_viewed_from_an_excerpt(
    sandbox: Any, runner: asyncio.Runner
) -> None:
    runner.run(sandbox.run("head -c 400000 /dev/zero | tr '\\0' 'z' > /tmp/outside.txt"))
    out = view(sandbox, runner, "/tmp/outside.txt")
    assert not out.error and "cut at line 1 of 1" in out.text and len(out.text) <= MAX_VIEW_CHARS + 400
    device = view(sandbox, runner, "/dev/zero")  # never read: it is not a regular file
    assert device.error and "not a regular file" in device.text
    missing = view(sandbox, runner, "/tmp/none.txt")
    assert missing.error and "does not exist" in missing.text


# -- edits: files up to EDIT_READ_BYTES, undo history bounded ------------------------------------------


def test_an_edit_of_a_file_over_the_cap_is_refused_in_one_sentence(
    sandbox: Any, runner: asyncio.Runner
) -> None:
    from toolgym.plugins.swe.editor import EDIT_READ_BYTES

    runner.run(sandbox.write_file("/workspace/huge.txt", "x = 1\n" * (EDIT_READ_BYTES // 6 + 10)))
    for args in (
        {"command": "str_replace", "old_str": "x = 1", "new_str": "x = 2"},
        {"command": "insert", "insert_line": 1, "new_str": "y = 0"},
    ):
        out = runner.run(str_replace_editor.call({**args, "path": "/workspace/huge.txt"}, sandbox=sandbox))
        assert out.error and "is larger than 4 MiB, the most the editor changes" in out.text, out.text


def test_the_undo_history_forgets_the_oldest_texts_past_its_bound(
    sandbox: Any, runner: asyncio.Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgym.plugins.swe import editor

    monkeypatch.setattr(editor, "HISTORY_BYTES", 10_000)
    history: editor.History = {}
    ed = editor.Editor(sandbox, history)
    runner.run(sandbox.write_file("/workspace/a.py", "v = 0\n" + "#" * 3_000 + "\n"))
    for i in range(8):
        runner.run(ed.run("str_replace", "/workspace/a.py", old_str=f"v = {i}\n", new_str=f"v = {i + 1}\n"))
    kept = [t for t in history["/workspace/a.py"] if t is not None]
    assert sum(map(len, kept)) <= 10_000 and len(kept) == 3
    assert kept[-1].startswith("v = 7\n")  # the newest survive: undo still goes back step by step
    runner.run(ed.run("undo_edit", "/workspace/a.py"))
    assert runner.run(sandbox.read_file("/workspace/a.py")).startswith(b"v = 7\n")
