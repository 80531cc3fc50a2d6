"""Outcomes the code under test can choose for itself count only as they did in the reference run.

swebench's rules count XFAIL as a pass for FAIL_TO_PASS and PASS_TO_PASS, and SKIPPED as a pass for
PASS_TO_PASS; SWE-smith's count a test missing from the log as passed. Each is an outcome that a
patch can produce without fixing anything (``pytest.xfail()`` or ``pytest.skip()`` called from the
code under test, a test deselected or crashed out of the log). swebench grades submissions, where
such outcomes are rare and honest; toolgym grades a policy that optimises against the grader and
finds them. So: a graded test whose outcome is one of these counts as that outcome only when the
reference run (the task's gold patch, graded the same way in the same sandbox image) gave it the
same one; otherwise it counts as FAILED. The reference run happens only when a candidate run has
such an outcome, once per task and process (cached).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from toolgym.plugins.swe.logs import TestStatus, resolve_case
from toolgym.plugins.swe.task import SWETask

CHOOSABLE = (TestStatus.XFAIL, TestStatus.SKIPPED)
MISSING = "MISSING"

_cache: dict[str, dict[str, str]] = {}


def task_key(task: SWETask) -> str:
    """What makes two reference runs the same: the task's tests, gold patch, command and image."""
    parts = (
        task.instance_id,
        task.base_commit,
        task.patch,
        task.test_patch,
        task.test_cmd,
        task.image or "",
        task.install_cmd,
        task.bug_patch,
        *task.fail_to_pass,
        *task.pass_to_pass,
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached(task: SWETask) -> dict[str, str] | None:
    return _cache.get(task_key(task))


def remember(task: SWETask, outcomes: dict[str, str]) -> None:
    _cache[task_key(task)] = outcomes


def outcome(test: str, statuses: Mapping[str, str]) -> str:
    key = resolve_case(test, statuses)
    return statuses[key] if key is not None else MISSING


def outcomes(tests: Iterable[str], statuses: Mapping[str, str]) -> dict[str, str]:
    """Each test's outcome in a log's statuses (``MISSING`` when absent)."""
    return {t: outcome(t, statuses) for t in tests}


def chosen(tests: Iterable[str], statuses: Mapping[str, str], *, rule: str) -> list[str]:
    """Graded tests whose outcome the code under test could have chosen (under ``rule``)."""
    choosable = (*CHOOSABLE, MISSING) if rule == "swesmith" else CHOOSABLE
    return [t for t in tests if outcome(t, statuses) in choosable]


def hold(
    tests: Iterable[str], statuses: Mapping[str, str], reference: Mapping[str, str], *, rule: str
) -> tuple[dict[str, str], list[str]]:
    """``statuses`` with each chosen outcome that the reference run did not share made FAILED, and
    one line per such test."""
    out = dict(statuses)
    demoted = []
    for test in chosen(tests, statuses, rule=rule):
        mine, theirs = outcome(test, statuses), reference.get(test, MISSING)
        if mine != theirs:
            out[resolve_case(test, statuses) or test] = TestStatus.FAILED.value
            demoted.append(f"{test}: {mine} here but {theirs} in the reference run, so it counts as FAILED")
    return out, demoted
