"""Must-fail canary tests: a check on the test run that does not trust the test interpreter.

The code under test runs in the interpreter that runs the tests, so anything that interpreter says
about itself (its reports, its exit status, the reporter's findings) can be chosen by that code:
a patch can turn off pytest's test bodies, rewrite its reports or disarm toolgym's reporter. What
it cannot do without telling the tests apart is pass the grader's canaries: before the run, each
graded test file gets a few extra test functions, named like ordinary tests and placed among the
file's own, whose body fails on every code base. The grader knows their ids; it reads their
outcomes from the log, which the sandbox agent captured outside the test process. A run in which
any canary is not FAILED or ERROR (passed, skipped, xfailed, or missing) was steered, and grades 0.

What canaries do not catch: a patch that reads the test files, singles the canaries out and forges
only the others. ``docs/fidelity.md`` lists that residual beside the other layers.
"""

from __future__ import annotations

import base64
import secrets
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from toolgym.plugins.swe.guard import log_key
from toolgym.plugins.swe.logs import FAILING

WORDS = (
    "empty",
    "input",
    "default",
    "values",
    "handles",
    "returns",
    "unicode",
    "edge",
    "case",
    "roundtrip",
    "negative",
    "zero",
    "large",
    "nested",
    "order",
    "keeps",
    "raises",
    "error",
    "none",
    "strips",
    "mixed",
    "single",
    "multiple",
    "repeated",
    "long",
    "short",
    "boundary",
    "whitespace",
    "format",
    "parse",
    "limit",
)
PER_FILE = 2
_rng = secrets.SystemRandom()


@dataclass(frozen=True, slots=True)
class Canary:
    """One must-fail test appended to a graded test file."""

    path: str
    """The test file, relative to the repository."""
    name: str
    """The test function's name (``test_...``)."""

    @property
    def nodeid(self) -> str:
        return f"{self.path}::{self.name}"

    def source(self) -> str:
        var = _rng.choice(("result", "got", "value", "out", "actual"))
        a = _rng.randrange(10**6)
        b = a + _rng.randrange(1, 10**6)
        return f"\n\ndef {self.name}():\n    {var} = {a}\n    assert {var} == {b}\n"


def make(test_files: Iterable[str], *, avoid: Iterable[str] = ()) -> list[Canary]:
    """``PER_FILE`` canaries for each Python test file, with fresh names unlike any in ``avoid``."""
    taken = set(avoid)
    out: list[Canary] = []
    for path in dict.fromkeys(test_files):
        if not path.endswith(".py"):
            continue
        for _ in range(PER_FILE):
            while True:
                name = f"test_{_rng.choice(WORDS)}_{_rng.choice(WORDS)}_{_rng.randrange(100, 1000)}"
                canary = Canary(path, name)
                if not any(canary.name in t for t in taken):
                    break
            taken.add(canary.nodeid)
            out.append(canary)
    return out


def append_script(canaries: Iterable[Canary]) -> str:
    """Bash that appends each canary to its file (a file that is not there gets none: the canary
    is then missing from the log, which the reference run tells apart from tampering)."""
    lines = []
    for canary in canaries:
        code = base64.b64encode(canary.source().encode()).decode()
        q = shlex.quote(canary.path)
        lines.append(f"if [ -f {q} ]; then echo {code} | base64 -d >> {q}; fi")
    return "\n".join(lines)


def outcomes(
    canaries: Iterable[Canary], statuses: Mapping[str, str], parser: Callable[[str], dict[str, str]]
) -> dict[str, str]:
    """Each canary's status in the log (``MISSING`` when the log gives it none)."""
    out = {}
    for canary in canaries:
        key = log_key(parser, canary.nodeid)
        out[canary.nodeid] = statuses.get(key, "MISSING") if key is not None else "MISSING"
    return out


def violations(seen: Mapping[str, str], *, missing_ok: bool = False) -> list[str]:
    """Why the run was steered, one line per canary that did not fail (missing ones are let
    through with ``missing_ok``: the reference run did not collect its canaries either)."""
    out = []
    for nodeid, status in seen.items():
        if status in FAILING or (status == "MISSING" and missing_ok):
            continue
        what = "is missing from the log" if status == "MISSING" else f"was reported {status}"
        out.append(f"canary test {nodeid}, which fails on every code base, {what}")
    return out
