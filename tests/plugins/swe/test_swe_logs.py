"""Log parsing and grading, checked against logs in the shapes the real runners print."""

from __future__ import annotations

import pytest

from toolgym.plugins.swe.logs import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    grade,
    parse_django,
    parse_matplotlib,
    parse_pytest,
    parse_pytest_options,
    parse_pytest_v2,
    parse_pytest_verbose,
    parse_seaborn,
    parse_sympy,
    test_section,
)

PYTEST_RA = """\
============================= test session starts ==============================
collected 6 items

tests/test_slug.py ..F.sx                                                [100%]

=========================== short test summary info ============================
PASSED tests/test_slug.py::test_lowercases
PASSED tests/test_slug.py::test_param[a-b]
FAILED tests/test_slug.py::test_runs - AssertionError: assert 'a--b' == 'a-b'
ERROR tests/test_slug.py::test_fixture - RuntimeError: boom
SKIPPED [1] tests/test_slug.py:40: needs network
XFAIL tests/test_slug.py::test_known_bug - reason: later
FAILED
==================== 1 failed, 2 passed, 1 skipped in 0.12s ====================
"""


def test_pytest_summary_lines() -> None:
    assert parse_pytest(PYTEST_RA) == {
        "tests/test_slug.py::test_lowercases": "PASSED",
        "tests/test_slug.py::test_param[a-b]": "PASSED",
        "tests/test_slug.py::test_runs": "FAILED",
        "tests/test_slug.py::test_fixture": "ERROR",
        "tests/test_slug.py::test_known_bug": "XFAIL",  # the skip summary's "[1]" is not a test
    }


def test_pytest_variants() -> None:
    log = "PASSED tests/test_io.py::test_read[/tmp/pytest-of-x/pytest-3/data.csv]\nPASSED tests/t.py::test_u[//net]\n"
    assert parse_pytest_options(log) == {
        "tests/test_io.py::test_read[/data.csv]": "PASSED",
        "tests/t.py::test_u[//net]": "PASSED",
    }
    coloured = "\x1b[32mPASSED\x1b[0m tests/t.py::test_a\n\x1b[31mFAILED\x1b[0m tests/t.py::test_b - x\n"
    assert parse_pytest_v2(coloured) == {"tests/t.py::test_a": "PASSED", "tests/t.py::test_b": "FAILED"}
    verbose = (
        "tests/test_m.py::test_f PASSED                                   [ 33%]\n"
        "tests/test_m.py::T::test_g FAILED                                 [ 66%]\n"
        "tests/test_m.py::test_h SKIPPED (no reason)                       [100%]\n"
    )
    assert parse_pytest_verbose(verbose) == {
        "tests/test_m.py::test_f": "PASSED",
        "tests/test_m.py::T::test_g": "FAILED",
        "tests/test_m.py::test_h": "SKIPPED",
    }
    assert parse_matplotlib("PASSED lib/t.py::test_click[MouseButton.LEFT]\n") == {
        "lib/t.py::test_click[1]": "PASSED"
    }
    assert parse_seaborn("tests/t.py::test_a PASSED [ 50%]\nFAILED tests/t.py::test_b\n") == {
        "tests/t.py::test_a": "PASSED",
        "tests/t.py::test_b": "FAILED",
    }


def test_django_runner_output() -> None:
    log = """\
test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok
test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests) ... FAIL
test_skip (auth_tests.test_validators.X) ... skipped 'no db'
test_err (auth_tests.test_validators.X) ... ERROR
test_split (auth_tests.test_validators.X) ... System check identified no issues (0 silenced)
ok
======================================================================
FAIL: test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)
"""
    statuses = parse_django(log)
    assert statuses["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"] == "PASSED"
    assert statuses["test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)"] == "FAILED"
    assert statuses["test_skip (auth_tests.test_validators.X)"] == "SKIPPED"
    assert statuses["test_err (auth_tests.test_validators.X)"] == "ERROR"
    assert statuses["test_split (auth_tests.test_validators.X)"] == "PASSED"


def test_sympy_runner_output() -> None:
    log = """\
sympy/core/tests/test_basic.py[3]
test_a ok
test_b F
test_c E
________________ sympy/core/tests/test_basic.py:test_b ________________
"""
    assert parse_sympy(log) == {
        "test_a": "PASSED",
        "test_b": "FAILED",
        "test_c": "ERROR",
        "sympy/core/tests/test_basic.py:test_b": "FAILED",
    }


def test_section_between_markers() -> None:
    log = f"applying\nPASSED early::x\n{START_TEST_OUTPUT}\nPASSED t::a\n{END_TEST_OUTPUT}\nPASSED late::y\n"
    assert parse_pytest(test_section(log)) == {"t::a": "PASSED"}
    assert test_section("no markers") == "no markers"


def test_swebench_rule() -> None:
    statuses = {"f1": "PASSED", "f2": "XFAIL", "p1": "PASSED", "p2": "SKIPPED"}
    report = grade(statuses, ["f1", "f2"], ["p1", "p2"])
    assert report.resolved and report.status == "RESOLVED_FULL"
    assert report.p2p_success == ["p1", "p2"] and report.p2p_failure == []  # a skipped P2P test is kept
    skipped = grade({"f1": "SKIPPED"}, ["f1"], [])
    assert skipped.f2p_failure == ["f1"] and not skipped.resolved  # a skipped F2P test is not a fix
    missing = grade({"f1": "PASSED"}, ["f1", "f2"], [])
    assert missing.f2p_failure == ["f2"] and missing.status == "RESOLVED_PARTIAL" and not missing.resolved
    broken = grade({"f1": "PASSED", "p1": "ERROR"}, ["f1"], ["p1"])
    assert broken.status == "RESOLVED_NO" and broken.p2p_failure == ["p1"]
    assert grade({}, ["f1"], []).status == "RESOLVED_NO"
    assert grade({}, [], []).resolved  # nothing to check: both rates are 1, as in SWE-bench


def test_swesmith_rule() -> None:
    statuses = {"tests/a.py::f": "PASSED"}
    report = grade(
        statuses,
        ["tests/a.py::f"],
        ["tests/a.py::g", "tests/b.py::h"],
        rule="swesmith",
        test_files=["tests/a.py"],
    )
    assert report.resolved and report.p2p_success == [
        "tests/a.py::g"
    ]  # missing counts as passed; b.py not graded
    failing = grade(
        {"tests/a.py::f": "FAILED"}, ["tests/a.py::f"], [], rule="swesmith", test_files=["tests/a.py"]
    )
    assert not failing.resolved
    with pytest.raises(ValueError, match="rule"):
        grade({}, [], [], rule="lenient")
