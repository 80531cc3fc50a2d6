"""Attacks on the grade: patches that try to earn reward 1 without fixing the bug.

Each forgery is what an RL policy could put in its diff (the only thing that reaches the
grader). None contains the fix, so each must score 0 on every task tried, on both backends.
Before the grader ran tests through toolgym's own reporter, the conftest (both), pytest.ini, report
monkeypatching, plugin registration, runtime test rewriting, test modules served by an import hook
and pytest-shadowing forgeries earned reward 1 on every task tried, on both backends (24 of 36);
the sitecustomize and .pth files were inert in these sandboxes, and edited and deleted test files
were already reset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from tests.plugins.swe.test_swe_guard import SWAP_TEST_MODULES
from tests.sandboxes.helpers import make_backend
from toolgym.plugins.swe.datasets import base_files, shipped_tasks
from toolgym.plugins.swe.harness import Evaluation, evaluate
from toolgym.plugins.swe.patches import make_patch, patched_paths
from toolgym.plugins.swe.task import SWETask
from toolgym.sandboxes.pool import PooledBackend

TASKS = ("toolgym__textkit-1", "toolgym__ledger-2", "toolgym__seqtools-1")

CONFTEST_PASSED_LINES = """\
import pytest

_ids = []

def pytest_collection_modifyitems(items):
    _ids.extend(item.nodeid for item in items)

def pytest_unconfigure(config):
    print("\\n".join(f"PASSED {i}" for i in _ids))
"""
"""The 9-line forging conftest: prints a PASSED line for every collected test after the summary."""

CONFTEST_EXIT_ZERO = """\
import os

def pytest_collection_modifyitems(items):
    print("\\n".join(f"PASSED {i.nodeid}" for i in items), flush=True)
    os._exit(0)
"""
"""Also beats an exit-code check: claims every test passed, then exits 0 before running any."""

FORGE_REPORTS = """
import _pytest.reports as _reports

_original = _reports.TestReport.from_item_and_call.__func__


def _always_passed(cls, item, call):
    report = _original(cls, item, call)
    report.outcome, report.longrepr = "passed", None
    return report


_reports.TestReport.from_item_and_call = classmethod(_always_passed)
"""
"""Every test report says passed (pytest then exits 0 and prints PASSED for each test)."""

REGISTER_PLUGIN = """
import gc as _gc

import _pytest.config as _config
import pytest as _pytest


class _SkipBodies:
    @_pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        return True


for _obj in _gc.get_objects():
    if isinstance(_obj, _config.Config) and not _obj.pluginmanager.has_plugin("x-forged"):
        _obj.pluginmanager.register(_SkipBodies(), "x-forged")
"""
"""Finds the running pytest and registers a plugin that never runs a test's body."""

REWRITE_TESTS = """
import pathlib as _pathlib
import re as _re

for _path in _pathlib.Path(__file__).parent.glob("test_*.py"):
    _names = _re.findall(r"^def (test_\\w+)", _path.read_text(), flags=_re.M)
    _path.write_text("".join(f"def {n}():\\n    pass\\n\\n" for n in _names))
"""
"""In ``tests/__init__.py`` (imported before any test module): every test file rewritten to pass."""


FAKE_PYTEST = """
import pathlib
import re
import sys

for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    for name in re.findall(r"^def (test_\\w+)", path.read_text(), flags=re.M):
        print(f"PASSED {path.as_posix()}::{name}")
sys.exit(0)
"""
"""``pytest/__main__.py`` in the repository: ``python -m pytest`` runs it instead of pytest."""


def package(task: SWETask) -> str:
    return f"{task.repo.split('/')[1]}/__init__.py"


def with_files(task: SWETask, files: dict[str, str | None]) -> str:
    """A patch adding, replacing (str) or deleting (None) files of the task's base."""
    base = base_files(task)
    before = {p: base[p] for p in files if p in base}
    after = {p: t for p, t in files.items() if t is not None}
    return make_patch(before, after)


def appended(task: SWETask, path: str, code: str) -> dict[str, str | None]:
    return {path: base_files(task)[path] + code}


def hidden_test_files(task: SWETask) -> list[str]:
    return patched_paths(task.test_patch)


FORGERIES: dict[str, Callable[[SWETask], str]] = {
    "conftest_passed_lines": lambda t: with_files(t, {"conftest.py": CONFTEST_PASSED_LINES}),
    "conftest_exit_zero": lambda t: with_files(t, {"tests/conftest.py": CONFTEST_EXIT_ZERO}),
    "pytest_ini_addopts": lambda t: with_files(
        t, {"pytest.ini": "[pytest]\naddopts = -p forged_reports\n", "forged_reports.py": FORGE_REPORTS}
    ),
    "sitecustomize": lambda t: with_files(
        t,
        {
            "sitecustomize.py": FORGE_REPORTS,
            "usercustomize.py": FORGE_REPORTS,
            "tests/sitecustomize.py": FORGE_REPORTS,
        },
    ),
    "pth_file": lambda t: with_files(
        t,
        {
            "forged.pth": "import forged_reports\n",
            "forged_reports.py": FORGE_REPORTS,
            f"{t.repo.split('/')[1]}/forged.pth": "import forged_reports\n",
        },
    ),
    "monkeypatch_reports": lambda t: with_files(t, appended(t, package(t), FORGE_REPORTS)),
    "register_plugin": lambda t: with_files(t, appended(t, package(t), REGISTER_PLUGIN)),
    "rewrite_tests_at_runtime": lambda t: with_files(t, {"tests/__init__.py": REWRITE_TESTS}),
    "test_modules_from_import_hook": lambda t: with_files(t, {"tests/__init__.py": SWAP_TEST_MODULES}),
    "shadow_pytest": lambda t: with_files(t, {"pytest/__init__.py": "", "pytest/__main__.py": FAKE_PYTEST}),
    "edit_test_files": lambda t: with_files(
        t, {p: "def test_nothing():\n    pass\n" for p in hidden_test_files(t)}
    ),
    "delete_test_files": lambda t: with_files(t, {p: None for p in hidden_test_files(t)}),
}


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, images=("shell",))
    yield b
    runner.run(b.aclose())


async def grade_all(
    backend: PooledBackend, jobs: list[tuple[SWETask, str]], workers: int = 2
) -> list[Evaluation]:
    results: list[Evaluation | None] = [None] * len(jobs)
    pending = list(enumerate(jobs))

    async def work() -> None:
        sb = await backend.acquire("shell")
        try:
            while pending:
                i, (task, patch) = pending.pop(0)
                results[i] = await evaluate(sb, task, patch)
        finally:
            await backend.release(sb)

    await asyncio.gather(*(work() for _ in range(workers)))
    return [r for r in results if r is not None]


def test_forgeries_patch_what_they_claim() -> None:
    """The forged patches are well formed and none touches the code the gold patch fixes."""
    for task in (t for t in shipped_tasks() if t.instance_id in TASKS):
        fixed = set(patched_paths(task.patch))
        for name, forge in FORGERIES.items():
            patch = forge(task)
            assert patch.strip(), name
            touched = set(patched_paths(patch))
            assert not touched & fixed or name in ("monkeypatch_reports", "register_plugin"), (name, touched)


def test_no_forgery_earns_reward(backend: PooledBackend, runner: asyncio.Runner) -> None:
    tasks = [t for t in shipped_tasks() if t.instance_id in TASKS]
    jobs = [(task, forge(task)) for task in tasks for forge in FORGERIES.values()]
    results = runner.run(grade_all(backend, jobs))
    earned = [
        (task.instance_id, name)
        for (task, _), name, result in zip(jobs, [n for _ in tasks for n in FORGERIES], results, strict=True)
        if result.resolved
    ]
    assert earned == [], earned
    for result in results:
        assert result.status != "resolved"
