"""SWE grading against swebench 5.0.2's semantics (``harness/grading.py``, ``log_parsers/python.py``,
the evaluation script's ``>>>>> Test Exit Code``), case by case.

The expected answers are derived from swebench 5.0.2's source and its own tests: FAIL_TO_PASS
succeeds on PASSED or XFAIL and fails on FAILED, ERROR, SKIPPED or missing; PASS_TO_PASS succeeds
on PASSED, XFAIL or SKIPPED; an id with more ``[`` than ``]`` matches the log's ids it prefixes when
they agree on passing; a log whose test command exited non-zero while it reports no failure is not
graded; resolved iff both success rates are 1. ``docs/fidelity.md`` lists the deliberate differences.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sandboxes.helpers import make_backend
from toolgym.plugins.swe.datasets import load_tasks, shipped_tasks
from toolgym.plugins.swe.harness import evaluate
from toolgym.plugins.swe.logs import END_TEST_OUTPUT, START_TEST_OUTPUT, grade_log, parse_django, parse_pytest
from toolgym.sandboxes.pool import PooledBackend


def wrap(body: str, exit_code: int | None = 0) -> str:
    """An evaluation log as swebench's eval script writes it (markers, then the recorded exit code)."""
    tail = f">>>>> Test Exit Code: {exit_code}\n" if exit_code is not None else ""
    return f"+ git apply -v -\n{START_TEST_OUTPUT}\n{body}{END_TEST_OUTPUT}\n{tail}+ git checkout abc tests/t.py\n"


@dataclass(frozen=True)
class Case:
    name: str
    log: str
    f2p: tuple[str, ...]
    p2p: tuple[str, ...]
    resolved: bool
    """swebench 5.0.2's answer."""
    parser: str = "pytest"


T = "tests/test_x.py::"
CASES = [
    Case(
        "all pass",
        wrap(f"PASSED {T}test_fix\nPASSED {T}test_old\n"),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        True,
    ),
    Case(
        "FAIL_TO_PASS still fails",
        wrap(f"PASSED {T}test_old\nFAILED {T}test_fix - AssertionError: x\n", 1),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
    ),
    Case(
        "PASS_TO_PASS broken",
        wrap(f"PASSED {T}test_fix\nFAILED {T}test_old - assert 1 == 2\n", 1),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
    ),
    Case(
        "FAIL_TO_PASS skipped (by id, as verbose logs write it)",
        wrap(f"{T}test_fix SKIPPED\n{T}test_old PASSED\n"),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
        parser="pytest_v2",
    ),
    Case(
        "Django: FAIL_TO_PASS skipped",
        wrap("test_fix (app.tests.T) ... skipped 'needs db'\ntest_old (app.tests.T) ... ok\n"),
        ("test_fix (app.tests.T)",),
        ("test_old (app.tests.T)",),
        False,
        parser="django",
    ),
    Case(
        "Django: PASS_TO_PASS skipped is kept",
        wrap("test_fix (app.tests.T) ... ok\ntest_old (app.tests.T) ... skipped 'no db'\n"),
        ("test_fix (app.tests.T)",),
        ("test_old (app.tests.T)",),
        True,
        parser="django",
    ),
    Case(
        "FAIL_TO_PASS XFAIL counts as passed",
        wrap(f"XFAIL {T}test_fix - reason: later\nPASSED {T}test_old\n"),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        True,
    ),
    Case(
        "FAIL_TO_PASS XPASS (non-strict) is not a status: missing",
        wrap(f"XPASS {T}test_fix later\nPASSED {T}test_old\n"),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
    ),
    Case(
        "error at collection",
        wrap("ERROR tests/test_x.py - ImportError: cannot import name 'f'\n", 2),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
    ),
    Case(
        "FAIL_TO_PASS missing from the log",
        wrap(f"PASSED {T}test_old\n"),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
    ),
    Case(
        "truncated id, one match",
        wrap(f"PASSED {T}test_fix[args1-None]\nPASSED {T}test_old\n"),
        (f"{T}test_fix[args1-No",),
        (f"{T}test_old",),
        True,
    ),
    Case(
        "truncated id, matches disagree",
        wrap(f"PASSED {T}test_fix[args1-None]\nFAILED {T}test_fix[args1-No-value]\n", 1),
        (f"{T}test_fix[args1-No",),
        (),
        False,
    ),
    Case(
        "truncated id, PASSED and XFAIL agree",
        wrap(f"PASSED {T}test_fix[a-b]\nXFAIL {T}test_fix[a-c] - later\n"),
        (f"{T}test_fix[a-",),
        (),
        True,
    ),
    Case(
        "PASSED lines printed by the repository, tests exited 1",
        wrap(f"FAILED {T}test_fix - AssertionError\nPASSED {T}test_old\nPASSED {T}test_fix\n", 1),
        (f"{T}test_fix",),
        (f"{T}test_old",),
        False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_grading_case_matches_swebench(case: Case) -> None:
    statuses, report, rejection = grade_log(case.log, case.parser, case.f2p, case.p2p)
    resolved = report is not None and report.resolved
    assert resolved == case.resolved, (statuses, report and report.as_dict(), rejection)


def test_fourteen_cases() -> None:
    assert len(CASES) == 14


def test_reports_have_swebench_lists() -> None:
    _, report, _ = grade_log(CASES[1].log, "pytest", CASES[1].f2p, CASES[1].p2p)
    assert report is not None and report.status == "RESOLVED_NO"
    assert report.as_dict() == {
        "FAIL_TO_PASS": {"success": [], "failure": [f"{T}test_fix"]},
        "PASS_TO_PASS": {"success": [f"{T}test_old"], "failure": []},
    }
    partial = wrap(f"PASSED {T}a\nFAILED {T}b - x\n", 1)
    _, report, _ = grade_log(partial, "pytest", (f"{T}a", f"{T}b"), ())
    assert report is not None and report.status == "RESOLVED_PARTIAL"


def test_logs_swebench_does_not_grade() -> None:
    assert grade_log(wrap(f"PASSED {T}a\n", 1), "pytest", (f"{T}a",), ())[2]  # non-zero exit, no failure
    assert grade_log(wrap("", 0), "pytest", (), ())[2]  # no results at all
    assert grade_log(f"PASSED {T}a\n", "pytest", (f"{T}a",), ())[2]  # no markers
    assert grade_log(">>>>> Patch Apply Failed\n" + wrap(f"PASSED {T}a\n"), "pytest", (f"{T}a",), ())[2]
    # no recorded exit code (logs from before swebench recorded it): graded on the log alone
    assert grade_log(wrap(f"PASSED {T}a\n", None), "pytest", (f"{T}a",), ())[1] is not None
    # results printed outside the markers are read when the markers hold none
    outside = f"PASSED {T}a\n{START_TEST_OUTPUT}\n{END_TEST_OUTPUT}\n>>>>> Test Exit Code: 0\n"
    assert grade_log(outside, "pytest", (f"{T}a",), ())[1] is not None


# -- the pytest parser on real `pytest -rA` output ---------------------------------------------------

REAL_TESTS = """\
import pytest

@pytest.mark.parametrize("a,b", [(1, 1), (2, 3), ("x y", "x y")])
def test_eq(a, b):
    assert a == b

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="fixed already")
def test_xpass():
    pass

@pytest.mark.xfail(strict=True, reason="must fail")
def test_xpass_strict():
    pass

@pytest.mark.skip(reason="later")
def test_skip():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture")

def test_setup_error(broken):
    pass

class TestGroup:
    def test_method(self):
        pass
"""


def run_pytest(root: Path, target: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider", target],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_pytest_parser_on_real_output(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text(REAL_TESTS)
    (tmp_path / "tests" / "test_broken.py").write_text("from nowhere import f\n\ndef test_f():\n    f()\n")
    done = run_pytest(tmp_path, "tests/test_real.py")
    r = "tests/test_real.py::"
    assert parse_pytest(done.stdout) == {
        f"{r}test_eq[1-1]": "PASSED",
        f"{r}test_eq[2-3]": "FAILED",
        f"{r}test_eq[x": "PASSED",  # an id with a space is cut at it, as swebench's parser cuts it
        f"{r}test_xfail": "XFAIL",
        f"{r}test_xpass_strict": "FAILED",
        f"{r}test_setup_error": "ERROR",
        f"{r}TestGroup::test_method": "PASSED",
    }, done.stdout  # XPASS and the "SKIPPED [1] file:line" summary give no status
    assert done.returncode == 1
    broken = run_pytest(tmp_path, "tests")
    assert parse_pytest(broken.stdout) == {"tests/test_broken.py": "ERROR"}, broken.stdout  # names the file
    assert broken.returncode == 2  # a collection error interrupts the session: no test runs


def test_django_parser_reads_interrupted_ok_lines() -> None:
    log = "test_a (m.T) ... some output\nmore output\nok\ntest_b (m.T) ... ok\n"
    assert parse_django(log) == {"test_a (m.T)": "PASSED", "test_b (m.T)": "PASSED"}


# -- one instance in the exact SWE-bench row format, end to end ----------------------------------------

ROW_KEYS = [
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
]


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, images=("shell",))
    yield b
    runner.run(b.aclose())


def test_swebench_row_end_to_end(tmp_path: Path, backend: PooledBackend, runner: asyncio.Runner) -> None:
    source = next(t for t in shipped_tasks() if t.instance_id == "toolgym__seqtools-1")
    row = {k: source.to_row()[k] for k in ROW_KEYS}
    assert isinstance(row["FAIL_TO_PASS"], str) and isinstance(row["PASS_TO_PASS"], str)  # JSON-encoded lists
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(path)
    assert task.fail_to_pass == tuple(json.loads(row["FAIL_TO_PASS"])) and task == source

    async def run() -> list:
        sb = await backend.acquire("shell")
        try:
            return [await evaluate(sb, task, p) for p in (task.patch, "")]
        finally:
            await backend.release(sb)

    gold, empty = runner.run(run())
    assert gold.resolved and gold.report.status == "RESOLVED_FULL" and gold.exit_code == 0, gold.log[-2000:]
    assert gold.report.as_dict()["FAIL_TO_PASS"] == {"success": list(task.fail_to_pass), "failure": []}
    assert not empty.resolved and empty.report.status == "RESOLVED_NO" and empty.exit_code == 1
    assert sorted(empty.report.f2p_failure) == sorted(task.fail_to_pass)
    summary = gold.summary()
    assert summary["resolved"] is True and set(summary["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS"}
