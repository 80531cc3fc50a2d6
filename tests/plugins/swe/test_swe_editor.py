"""The file editor (SWE-agent's str_replace_editor semantics) and search, on a local sandbox."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from toolgym.plugins.swe.tools import search, str_replace_editor
from toolgym.sandboxes.pool import PooledBackend

FILE = "/workspace/pkg/mod.py"
TEXT = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n"


class Ctx:
    """Just the part of EpisodeContext the editor uses: a per-episode resource."""

    def __init__(self) -> None:
        self.resources: dict[str, Any] = {}

    async def resource(self, name: str, factory: Any, close: Any = None) -> Any:
        if name not in self.resources:
            self.resources[name] = factory(self)
        return self.resources[name]


@pytest.fixture(scope="module")
def sandbox(local_backend: PooledBackend, runner: asyncio.Runner) -> Iterator[Any]:
    sb = runner.run(local_backend.acquire("shell"))
    yield sb
    runner.run(local_backend.release(sb))


@pytest.fixture()
def edit(sandbox: Any, runner: asyncio.Runner) -> Any:
    runner.run(sandbox.run("rm -rf /workspace/* && mkdir -p /workspace/pkg/sub /workspace/.hidden"))
    runner.run(sandbox.write_file(FILE, TEXT))
    ctx = Ctx()

    def call(**args: Any) -> Any:
        return runner.run(str_replace_editor.call(args, sandbox=sandbox, ctx=ctx))

    return call


def read(sandbox: Any, runner: asyncio.Runner, path: str = FILE) -> str:
    return runner.run(sandbox.read_file(path)).decode()


def test_view_numbers_lines_like_cat_n(edit: Any) -> None:
    out = edit(command="view", path=FILE)
    assert not out.error
    assert out.text.splitlines()[1:3] == ["     1\tdef f(x):", "     2\t    return x + 1"]
    part = edit(command="view", path=FILE, view_range=[5, -1])
    assert part.text.splitlines()[1:] == ["     5\tdef g(x):", "     6\t    return x + 1", "     7\t"]
    assert edit(command="view", path=FILE, view_range=[2, 2]).text.splitlines()[1:] == [
        "     2\t    return x + 1"
    ]
    for bad in ([0, 3], [3, 99], [4, 2], [1]):
        assert edit(command="view", path=FILE, view_range=bad).error


def test_view_directory_lists_two_levels_without_hidden(edit: Any) -> None:
    out = edit(command="view", path="/workspace")
    assert out.text.splitlines()[1:] == [
        "/workspace",
        "/workspace/pkg",
        "/workspace/pkg/mod.py",
        "/workspace/pkg/sub",
    ]
    assert edit(command="view", path="/workspace", view_range=[1, 2]).error
    assert not edit(command="view", path="/etc/os-release").error  # files outside the repository can be read


def test_paths_must_be_absolute_and_exist(edit: Any) -> None:
    rel = edit(command="view", path="pkg/mod.py")
    assert rel.error and "/workspace/pkg/mod.py" in rel.text
    missing = edit(command="str_replace", path="/workspace/nope.py", old_str="a", new_str="b")
    assert missing.error and "does not exist" in missing.text


def test_str_replace_needs_a_unique_match(edit: Any, sandbox: Any, runner: asyncio.Runner) -> None:
    many = edit(command="str_replace", path=FILE, old_str="return x + 1", new_str="return x + 2")
    assert many.error and "2 times" in many.text and "lines 2, 6" in many.text
    none = edit(command="str_replace", path=FILE, old_str="return x+1", new_str="y")
    assert none.error and "does not occur verbatim" in none.text
    assert read(sandbox, runner) == TEXT  # refused edits change nothing
    ok = edit(
        command="str_replace",
        path=FILE,
        old_str="def g(x):\n    return x + 1",
        new_str="def g(x):\n    return x - 1",
    )
    assert not ok.error and "     6\t    return x - 1" in ok.text
    assert read(sandbox, runner) == "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x - 1\n"
    deleted = edit(command="str_replace", path=FILE, old_str="\n\ndef g(x):\n    return x - 1\n")
    assert not deleted.error and read(sandbox, runner) == "def f(x):\n    return x + 1\n"


def test_insert_after_a_line(edit: Any, sandbox: Any, runner: asyncio.Runner) -> None:
    assert not edit(command="insert", path=FILE, insert_line=0, new_str="import os").error
    assert read(sandbox, runner).startswith("import os\ndef f(x):\n")
    assert not edit(command="insert", path=FILE, insert_line=7, new_str="# end\n").error
    assert read(sandbox, runner).endswith("    return x + 1\n# end\n")
    bad = edit(command="insert", path=FILE, insert_line=99, new_str="x")
    assert bad.error and "0 to 8" in bad.text
    assert edit(command="insert", path=FILE, new_str="x").error  # insert_line is required


def test_create_and_undo(edit: Any, sandbox: Any, runner: asyncio.Runner) -> None:
    exists = edit(command="create", path=FILE, file_text="x")
    assert exists.error and "already exists" in exists.text
    assert not edit(command="create", path="/workspace/pkg/new/b.py", file_text="B = 1\n").error
    assert read(sandbox, runner, "/workspace/pkg/new/b.py") == "B = 1\n"
    edit(command="str_replace", path=FILE, old_str="def f(x):", new_str="def f(y):")
    edit(command="insert", path=FILE, insert_line=0, new_str="# top")
    assert not edit(command="undo_edit", path=FILE).error
    assert read(sandbox, runner).startswith("def f(y):")
    assert not edit(command="undo_edit", path=FILE).error
    assert read(sandbox, runner) == TEXT
    nothing = edit(command="undo_edit", path=FILE)
    assert nothing.error and "no edit" in nothing.text
    assert not edit(command="undo_edit", path="/workspace/pkg/new/b.py").error
    assert edit(command="view", path="/workspace/pkg/new/b.py").error  # undoing a create removes the file


def test_edits_stay_in_the_repository(edit: Any) -> None:
    out = edit(command="create", path="/tmp/elsewhere.py", file_text="x")
    assert out.error and "/workspace" in out.text
    assert edit(command="explode", path=FILE).error  # not one of the commands: a readable argument error


def test_search(edit: Any, sandbox: Any, runner: asyncio.Runner) -> None:
    runner.run(sandbox.write_file("/workspace/pkg/sub/notes.txt", "return x + 1 in a note\n"))

    def find(**args: Any) -> Any:
        return runner.run(search.call(args, sandbox=sandbox))

    found = find(pattern="return x + 1")
    assert found.text.splitlines()[0] == "3 matching lines for 'return x + 1' in /workspace:"
    assert "/workspace/pkg/mod.py:2:    return x + 1" in found.text
    only_py = find(pattern="return x + 1", include="*.py")
    assert only_py.metadata["matches"] == 2
    assert find(pattern=r"def [fg]\(", regex=True).metadata["matches"] == 2
    assert find(pattern="def [fg](").metadata["matches"] == 0  # plain text by default
    assert "No matches" in find(pattern="nowhere to be found").text
    assert find(pattern="(", regex=True).error
    runner.run(sandbox.write_file("/workspace/big.txt", "hit\n" * 250))
    many = find(pattern="hit", path="/workspace/big.txt")
    assert many.metadata["matches"] == 250 and "150 more matching lines" in many.text
