"""Grading as SWE-bench does it: test logs → per-test status → resolved or not.

A log parser turns the test command's output into ``{test id: status}``. The pytest parsers read
the short summary that ``pytest -rA`` prints (``PASSED tests/test_x.py::test_y``, ``FAILED
tests/test_x.py::test_z - AssertionError``); SWE-smith's reads ``--verbose`` lines
(``tests/test_x.py::test_y PASSED``); Django's and SymPy's read their own runners' output.

``grade`` compares the map with the instance's FAIL_TO_PASS and PASS_TO_PASS lists:

- SWE-bench rule (swebench 5.0.2): a FAIL_TO_PASS test succeeds when its status is PASSED or
  XFAIL and fails when it is FAILED, ERROR, SKIPPED or missing from the log; a PASS_TO_PASS test
  succeeds when PASSED, XFAIL or SKIPPED and fails when FAILED, ERROR or missing. A listed id cut
  off inside its parameters matches the log's ids it prefixes (``resolve_case``). Each list's
  success rate is successes / (successes + failures), 1 for an empty list. Resolved
  (RESOLVED_FULL) iff both rates are 1. A log is not graded at all (``log_rejection``) when it
  holds no results, or when the test command exited non-zero but the log reports no failure.
- SWE-smith rule: a test missing from the log counts as passed (it runs only the files of the
  FAIL_TO_PASS tests), and only the listed tests in those files are graded.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
TEST_EXIT_CODE_VAR = "TOOLGYM_TEST_EXIT_CODE"
_EXIT_CODE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")


class TestStatus(enum.StrEnum):
    __test__ = False  # not a pytest class

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


_STATUSES = tuple(s.value for s in TestStatus)
_ANSI = re.compile(r"\[(\d+)m")
_SKIP_COUNT = re.compile(r"^\[\d+\]$")
_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def _is_skip_summary(status: str, name: str) -> bool:
    """pytest's ``SKIPPED [N] path:line: reason`` summary line, whose ``[N]`` is a count, not a test."""
    return status == TestStatus.SKIPPED and _SKIP_COUNT.match(name) is not None


def parse_pytest(log: str) -> dict[str, str]:
    """``-rA`` summary lines: ``STATUS test_id[ - message]`` (a skip summary's ``[N]`` is not a test)."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        if not line.startswith(_STATUSES):
            continue
        if line.startswith(TestStatus.FAILED):
            line = line.replace(" - ", " ")
        parts = line.split()
        if len(parts) > 1 and not _is_skip_summary(parts[0], parts[1]):
            statuses[parts[1]] = parts[0]
    return statuses


def parse_pytest_options(log: str) -> dict[str, str]:
    """Like ``parse_pytest``, but a parametrization that is an absolute path keeps only its last
    component (``test_x[/tmp/abc/file]`` → ``test_x[/file]``), as those differ between runs."""
    option = re.compile(r"(.*?)\[(.*)\]")
    statuses: dict[str, str] = {}
    for test, status in parse_pytest(log).items():
        m = option.search(test)
        if m:
            main, param = m.groups()
            if param.startswith("/") and not param.startswith("//") and "*" not in param:
                param = "/" + param.split("/")[-1]
            test = f"{main}[{param}]"
        statuses[test] = status
    return statuses


def parse_pytest_v2(log: str) -> dict[str, str]:
    """Later pytest versions: colour codes and control characters removed; ``STATUS id`` lines
    (a FAILED line's `` - message`` dropped; an id may hold spaces), or, for older versions'
    progress lines, ``id STATUS`` (a line that ends with its status)."""
    statuses: dict[str, str] = {}
    for raw in log.split("\n"):
        line = _ANSI.sub("", raw).translate(_CONTROL)
        if line.startswith(_STATUSES):
            if line.startswith(TestStatus.FAILED):
                line = line.split(" - ", 1)[0]
            parts = line.split()
            if len(parts) >= 2 and not _is_skip_summary(parts[0], parts[1]):
                statuses[" ".join(parts[1:])] = parts[0]
        elif line.endswith(_STATUSES):
            parts = line.split()
            if len(parts) >= 2:
                statuses[" ".join(parts[:-1])] = parts[-1]
    return statuses


def parse_pytest_verbose(log: str) -> dict[str, str]:
    """``pytest --verbose`` lines: ``test_id STATUS [ NN%]`` (SWE-smith's parser)."""
    pattern = re.compile(rf"^(\S+)\s+({'|'.join(_STATUSES)})\b")
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        if m := pattern.match(line):
            statuses[m.group(1)] = m.group(2)
    return statuses


def parse_matplotlib(log: str) -> dict[str, str]:
    """``parse_pytest`` with mouse-button enum names written as their values."""
    return parse_pytest(log.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"))


def parse_seaborn(log: str) -> dict[str, str]:
    """Seaborn's logs: ``FAILED id`` summary lines, ``id PASSED`` progress lines, ``PASSED id``."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        parts = line.split()
        if line.startswith(TestStatus.FAILED) and len(parts) > 1:
            statuses[parts[1]] = TestStatus.FAILED
        elif f" {TestStatus.PASSED} " in line and len(parts) > 1 and parts[1] == TestStatus.PASSED:
            statuses[parts[0]] = TestStatus.PASSED
        elif line.startswith(TestStatus.PASSED) and len(parts) > 1:
            statuses[parts[1]] = TestStatus.PASSED
    return statuses


_DJANGO_INTERRUPTED = (
    r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$",
    r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$",
    r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
)


def parse_django(log: str) -> dict[str, str]:
    """Django's runner at ``--verbosity 2``: ``test (module.Class) ... ok|FAIL|ERROR|skipped``,
    plus ``FAIL: test`` / ``ERROR: test`` headers; a line starting ``ok`` passes the last test whose
    ``...`` line was interrupted by output, and the three known splits of an ``... ok`` line."""
    statuses: dict[str, str] = {}
    previous: str | None = None
    for raw in log.split("\n"):
        line = raw.strip()
        if "--version is equivalent to version" in line:
            statuses["--version is equivalent to version"] = TestStatus.PASSED
        if " ... " in line:
            previous = line.split(" ... ")[0]
        for suffix in (" ... ok", " ... OK", " ...  OK"):
            if line.endswith(suffix):
                if line.startswith("Applying sites.0002_alter_domain_unique...test_no_migrations"):
                    line = line.split("...", 1)[
                        -1
                    ].strip()  # django__django-7188: a migration line runs into the test's
                statuses[line.rsplit(suffix, 1)[0]] = TestStatus.PASSED
                break
        if " ... skipped" in line:
            statuses[line.split(" ... skipped")[0]] = TestStatus.SKIPPED
        if line.endswith(" ... FAIL"):
            statuses[line.split(" ... FAIL")[0]] = TestStatus.FAILED
        if line.startswith("FAIL:") and len(line.split()) > 1:
            statuses[line.split()[1].strip()] = TestStatus.FAILED
        if line.endswith(" ... ERROR"):
            statuses[line.split(" ... ERROR")[0]] = TestStatus.ERROR
        if line.startswith("ERROR:") and len(line.split()) > 1:
            statuses[line.split()[1].strip()] = TestStatus.ERROR
        if line.startswith("ok") and previous is not None:
            statuses[previous] = TestStatus.PASSED
    for pattern in _DJANGO_INTERRUPTED:
        for m in re.finditer(pattern, log, re.MULTILINE):
            statuses[m.group(1)] = TestStatus.PASSED
    return statuses


def parse_sympy(log: str) -> dict[str, str]:
    """SymPy's ``bin/test --verbose``: ``test_name ok|F|E`` lines and ``___ file.py:test ___`` headers."""
    statuses: dict[str, str] = {}
    for m in re.findall(r"(_*) (.*)\.py:(.*) (_*)", log):
        statuses[f"{m[1]}.py:{m[2]}"] = TestStatus.FAILED
    for raw in log.split("\n"):
        line = raw.strip()
        if not line.startswith("test_"):
            continue
        name = line.split()[0]
        if line.endswith(" E"):
            statuses[name] = TestStatus.ERROR
        elif line.endswith(" F"):
            statuses[name] = TestStatus.FAILED
        elif line.endswith(" ok"):
            statuses[name] = TestStatus.PASSED
    return statuses


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    "pytest": parse_pytest,
    "pytest_options": parse_pytest_options,
    "pytest_v2": parse_pytest_v2,
    "pytest_verbose": parse_pytest_verbose,
    "matplotlib": parse_matplotlib,
    "seaborn": parse_seaborn,
    "django": parse_django,
    "sympy": parse_sympy,
}


def test_section(log: str) -> str:
    """The part of an evaluation log between the start and end markers (all of it without them)."""
    start = log.find(START_TEST_OUTPUT)
    if start == -1:
        return log
    end = log.find(END_TEST_OUTPUT, start)
    return log[start + len(START_TEST_OUTPUT) : end if end != -1 else len(log)]


test_section.__test__ = False  # type: ignore[attr-defined]


def parse_test_exit_code(log: str) -> int | None:
    """The test command's exit status that the evaluation script wrote after the end marker."""
    m = _EXIT_CODE.search(log)
    return int(m.group(1)) if m else None


parse_test_exit_code.__test__ = False  # type: ignore[attr-defined]


@dataclass(slots=True)
class Report:
    """FAIL_TO_PASS and PASS_TO_PASS tests split into successes and failures."""

    f2p_success: list[str] = field(default_factory=list)
    f2p_failure: list[str] = field(default_factory=list)
    p2p_success: list[str] = field(default_factory=list)
    p2p_failure: list[str] = field(default_factory=list)

    @staticmethod
    def _rate(success: list[str], failure: list[str]) -> float:
        total = len(success) + len(failure)
        return 1.0 if total == 0 else len(success) / total

    @property
    def f2p_rate(self) -> float:
        return self._rate(self.f2p_success, self.f2p_failure)

    @property
    def p2p_rate(self) -> float:
        return self._rate(self.p2p_success, self.p2p_failure)

    @property
    def status(self) -> str:
        """``RESOLVED_FULL``, ``RESOLVED_PARTIAL`` (some FAIL_TO_PASS fixed, nothing broken) or ``RESOLVED_NO``."""
        if self.f2p_rate == 1 and self.p2p_rate == 1:
            return "RESOLVED_FULL"
        if 0 < self.f2p_rate < 1 and self.p2p_rate == 1:
            return "RESOLVED_PARTIAL"
        return "RESOLVED_NO"

    @property
    def resolved(self) -> bool:
        return self.status == "RESOLVED_FULL"

    def as_dict(self) -> dict[str, dict[str, list[str]]]:
        return {
            "FAIL_TO_PASS": {"success": self.f2p_success, "failure": self.f2p_failure},
            "PASS_TO_PASS": {"success": self.p2p_success, "failure": self.p2p_failure},
        }


PASSING = (TestStatus.PASSED, TestStatus.XFAIL)
FAILING = (TestStatus.FAILED, TestStatus.ERROR)


def resolve_case(test: str, statuses: Mapping[str, str]) -> str | None:
    """The key of ``statuses`` that stands for ``test``: the test itself, or, for an id cut off
    inside its parameters (more ``[`` than ``]``, as SWE-bench Verified stores some), the keys it
    prefixes when they agree on passing or not (PASSED and XFAIL agree); None when neither."""
    if test in statuses:
        return test
    if test.count("[") > test.count("]"):
        matches = [k for k in statuses if k.startswith(test)]
        if matches and len({statuses[k] in PASSING for k in matches}) == 1:
            return matches[0]
    return None


def test_passed(test: str, statuses: Mapping[str, str]) -> bool:
    """PASSED or XFAIL."""
    key = resolve_case(test, statuses)
    return key is not None and statuses[key] in PASSING


def test_maintained(test: str, statuses: Mapping[str, str]) -> bool:
    """A PASS_TO_PASS test kept: passed, or skipped (a skip is not a regression)."""
    key = resolve_case(test, statuses)
    return test_passed(test, statuses) or (key is not None and statuses[key] == TestStatus.SKIPPED)


def test_failed(test: str, statuses: Mapping[str, str]) -> bool:
    """Missing from the log, FAILED, ERROR, or SKIPPED (a skipped FAIL_TO_PASS test is not a fix)."""
    key = resolve_case(test, statuses)
    return key is None or statuses[key] in (*FAILING, TestStatus.SKIPPED)


for _f in (test_passed, test_maintained, test_failed):
    _f.__test__ = False  # type: ignore[attr-defined]


def log_rejection(statuses: Mapping[str, str], exit_code: int | None) -> str | None:
    """Why SWE-bench would not grade this run's log at all (None when it would): no test results,
    or a test command that exited non-zero while the log reports no failure or error (a log that
    does not describe the run, such as PASSED lines printed by the repository's own code)."""
    if not statuses:
        return "the test output holds no test results"
    if exit_code not in (None, 0) and not any(s in FAILING for s in statuses.values()):
        return f"the test command exited {exit_code} but its log reports no failure"
    return None


def grade(
    statuses: Mapping[str, str],
    fail_to_pass: Iterable[str],
    pass_to_pass: Iterable[str],
    *,
    rule: str = "swebench",
    test_files: Iterable[str] = (),
) -> Report:
    """The report of one evaluation under ``rule`` (``swebench`` or ``swesmith``; see the module doc).
    ``test_files``: for ``swesmith``, the files that were run (tests elsewhere are not graded)."""
    if rule not in ("swebench", "swesmith"):
        raise ValueError(f"unknown grading rule {rule!r}; use 'swebench' or 'swesmith'")
    files = tuple(test_files)

    def graded(tests: Iterable[str]) -> list[str]:
        tests = list(tests)
        if rule == "swesmith" and files:
            return [t for t in tests if t.startswith(files)]
        return tests

    def smith(test: str, success: list[str], failure: list[str]) -> None:
        status = statuses.get(test)
        if status is None or status in PASSING:
            success.append(test)
        elif status in FAILING:
            failure.append(test)

    report = Report()
    for test in graded(fail_to_pass):
        if rule == "swesmith":
            smith(test, report.f2p_success, report.f2p_failure)
        elif test_passed(test, statuses):
            report.f2p_success.append(test)
        elif test_failed(test, statuses):
            report.f2p_failure.append(test)
    for test in graded(pass_to_pass):
        if rule == "swesmith":
            smith(test, report.p2p_success, report.p2p_failure)
        elif test_maintained(test, statuses):
            report.p2p_success.append(test)
        elif test_failed(test, statuses):
            report.p2p_failure.append(test)
    return report


def grade_log(
    log: str,
    parser: str,
    fail_to_pass: Iterable[str],
    pass_to_pass: Iterable[str],
    *,
    exit_code: int | None = None,
    rule: str = "swebench",
    test_files: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> tuple[dict[str, str], Report | None, str | None]:
    """A whole evaluation log graded as SWE-bench 5.0.2's ``get_logs_eval`` + report do:
    ``(statuses, report, None)``, or ``(statuses, None, why)`` when the log is not graded (a
    failure marker, no test output markers, no results, or ``log_rejection``). The statuses come
    from the part between the markers, or from the whole log when that part yields none.
    ``exit_code``: the test command's status, else the ``>>>>> Test Exit Code`` line's.
    ``ignore``: keys that are not the repository's tests (the grader's canaries): they are in the
    statuses returned, but neither graded nor counted by ``log_rejection``."""
    bad = [m for m in (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT) if m in log]
    if bad:
        return {}, None, f"the log holds {bad[0]!r}"
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return {}, None, "the log has no test output markers"
    parse = PARSERS[parser]
    statuses = parse(test_section(log)) or parse(log)
    if exit_code is None:
        exit_code = parse_test_exit_code(log)
    skip = set(ignore)
    own = {k: v for k, v in statuses.items() if k not in skip}
    why = log_rejection(own, exit_code) if rule == "swebench" else None
    if why is not None:
        return statuses, None, why
    return statuses, grade(own, fail_to_pass, pass_to_pass, rule=rule, test_files=test_files), None
