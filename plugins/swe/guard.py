"""What keeps the agent's patch from grading itself.

The candidate patch is the only thing of the agent's that reaches the grader, but it runs there:
the tests import the repository's code, and pytest reads configuration and plugins from the
repository. Three defences, each cheap:

1. ``filter_patch``: before the patch is applied, the files in it that configure or extend the
   test run are dropped: ``conftest.py`` anywhere, ``pytest.ini``, ``.pytest.ini``, ``tox.ini``,
   ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``, anything under ``*.dist-info`` /
   ``*.egg-info`` / ``*.egg-link`` (entry points), and symbolic links. ``setup.cfg`` and
   ``pyproject.toml`` keep the patch's changes unless their pytest section changed
   (``config_guard_script`` puts such a file back to the base). The instance's test files and
   test patch are applied after all this, so the instance's own configuration wins.
2. The reporter (``sandbox_reporter.py``), loaded with ``-p`` from a directory outside the
   repository under a random name, records each test's outcome and any tampering, and writes
   them with a one-time nonce; ``check_report`` reads that back. A pytest command gets it
   (``inject_reporter``); Django's and SymPy's runners, and tox, do not (they are graded from
   their log and exit code, as SWE-bench does).
3. ``unbacked_claims``: every status the log gives a graded test (PASSED, XFAIL, SKIPPED) must be
   one the reporter saw for that test; a log line the reporter did not back is a forgery.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from toolgym.plugins.swe.logs import FAILING, resolve_case

REPORTER_SOURCE = Path(__file__).with_name("sandbox_reporter.py")
SELF_HOSTED = frozenset({"pytest-dev/pytest", "pytest-dev/pluggy"})
"""Repositories that are pytest's own machinery: the code under test is the reporter's ground, so
they get no reporter (graded from log and exit code, as Django's runner)."""
GRADE_DIR = "/tmp/.toolgym-grade"
"""Where the reporter, its settings and its result live during a test run (outside the repository)."""
RESULT_FILE = f"{GRADE_DIR}/result.json"
PROTECTED_NAMES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "sitecustomize.py", "usercustomize.py"}
)
PROTECTED_SUFFIXES = (".pth",)
PROTECTED_DIR_SUFFIXES = (".dist-info", ".egg-info", ".egg-link")
CONFIG_SECTIONS = {"setup.cfg": r"^\[(tool:pytest|pytest)\]", "pyproject.toml": r"^\[tool\.pytest"}
"""Files whose pytest section (header pattern) may not change, and the rest may."""


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def git_unquote(name: str) -> str:
    """A path as git reads it from a patch: a name in double quotes is C-quoted (``\\t``,
    ``\\"``, ``\\ooo`` octal bytes, UTF-8 underneath) and git un-escapes it before it writes the
    file, so every check on a patch's paths must see the name git will use."""
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    out = bytearray()
    body, i = name[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 == len(body):
            out += ch.encode("utf-8")
            i += 1
        elif body[i + 1] in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1 : i + 4])
            assert digits is not None
            out.append(int(digits.group(), 8) & 0xFF)
            i += 1 + len(digits.group())
        else:
            out.append(_C_ESCAPES.get(body[i + 1], ord(body[i + 1])))
            i += 2
    return out.decode("utf-8", errors="surrogateescape")


_NAME = re.compile(r'"(?:[^"\\]|\\.)*"|\S+')


def _strip_side(path: str) -> str:
    return path[2:] if path[:2] in ("a/", "b/") else path


def _git_line_paths(rest: str) -> list[str]:
    """The two names of a ``diff --git`` line (quoted or not; unquoted names may hold spaces, and
    git then takes the split where both sides name the same path)."""
    tokens = _NAME.findall(rest)
    if len(tokens) == 2 or any(t.startswith('"') for t in tokens):
        return [_strip_side(git_unquote(t)) for t in tokens]
    for at in (m.start() for m in re.finditer(" b/", rest)):
        old, new = rest[:at], rest[at + 1 :]
        if _strip_side(old) == _strip_side(new):
            return [_strip_side(old)]
    return [_strip_side(t) for t in tokens]


def _block_paths(block: str) -> set[str]:
    paths: set[str] = set()
    first = block.split("\n", 1)[0]
    if first.startswith("diff --git "):
        paths.update(_git_line_paths(first[len("diff --git ") :].rstrip("\r")))
    for line in block.split("\n"):
        for prefix in ("--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ", "Index: "):
            if line.startswith(prefix):
                raw = line[len(prefix) :].rstrip("\r")
                raw = raw if raw.startswith('"') else raw.split("\t", 1)[0].rstrip()
                path = git_unquote(raw.strip())
                if prefix in ("--- ", "+++ "):
                    path = _strip_side(path)
                if path != "/dev/null":
                    paths.add(path)
    return paths


def touched_paths(patch: str) -> list[str]:
    """Every path a patch names (old and new names), sorted."""
    return sorted({p for block in split_patch(patch) for p in _block_paths(block)})


def protected(path: str) -> bool:
    """Whether a file at ``path`` (relative to the repository) may configure or extend the test run,
    or lies outside the work tree (absolute, ``..``, or in ``.git``)."""
    p = PurePosixPath(path)
    if p.is_absolute() or any(part in ("..", ".git") for part in p.parts):
        return True
    return (
        p.name in PROTECTED_NAMES
        or p.name.endswith(PROTECTED_SUFFIXES)
        or any(part.endswith(PROTECTED_DIR_SUFFIXES) for part in p.parts)
    )


def split_patch(patch: str) -> list[str]:
    """The per-file blocks of a patch, text unchanged: a block starts at a ``diff --git`` line, or
    at a ``---``/``+++`` pair that is not the header of the block before (which has no hunk yet)."""
    lines = patch.splitlines(keepends=True)
    blocks: list[list[str]] = []
    hunks = False
    for i, line in enumerate(lines):
        pair = line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        if line.startswith("diff --git ") or (pair and (hunks or not blocks)):
            blocks.append([])
            hunks = False
        if not blocks:
            blocks.append([])  # text before the first header stays with the first block
        blocks[-1].append(line)
        hunks = hunks or line.startswith("@@")
    return ["".join(b) for b in blocks if "".join(b).strip()]


@dataclass(slots=True)
class FilteredPatch:
    """A candidate patch with the files that could steer the test run taken out."""

    patch: str
    dropped: list[str] = field(default_factory=list)
    """Paths whose changes were dropped."""
    config_files: list[str] = field(default_factory=list)
    """``setup.cfg`` / ``pyproject.toml`` files the patch changes (their pytest section is checked in the sandbox)."""


def filter_patch(patch: str) -> FilteredPatch:
    kept: list[str] = []
    result = FilteredPatch("")
    for block in split_patch(patch):
        paths = _block_paths(block)
        header = block.split("\n@@", 1)[0]
        symlink = re.search(
            r"^(new file mode|new mode|old mode|deleted file mode) 120000", header, re.MULTILINE
        )
        if any(protected(p) for p in paths) or symlink:
            result.dropped.extend(sorted(paths))
            continue
        kept.append(block)
        result.config_files.extend(sorted(p for p in paths if PurePosixPath(p).name in CONFIG_SECTIONS))
    result.patch = "".join(kept)
    return result


def config_guard_script(files: Iterable[str], base: str) -> str:
    """Bash that puts each of ``files`` back to ``base`` when its pytest section differs from the base's."""
    lines = []
    for path in sorted(set(files)):
        pattern = CONFIG_SECTIONS[PurePosixPath(path).name]
        section = f"awk 'BEGIN{{p=0}} /^\\[/{{p=($0 ~ /{pattern}/)}} p'"
        q, ref = shlex.quote(path), shlex.quote(f"{base}:{path}")
        lines.append(
            f'if [ "$(git show {ref} 2>/dev/null | {section})" != "$( ([ -f {q} ] && cat {q}) | {section})" ]; then '
            f"echo '>>>>> Dropped the patch to the pytest configuration in {path}'; "
            f"git checkout -q {shlex.quote(base)} -- {q} 2>/dev/null || rm -f {q}; fi"
        )
    return "\n".join(lines)


# -- the reporter ----------------------------------------------------------------------------------


_PYTEST = re.compile(r"^(?:.*/)?(?:pytest|py\.test)$")
_PYTHON = re.compile(r"^(?:.*/)?python[0-9.]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def inject_reporter(test_cmd: str, module: str) -> str | None:
    """``test_cmd`` with ``-p module`` right after its pytest invocation (``pytest``, ``python -m
    pytest``, after any leading ``VAR=value``), or None when it does not invoke pytest directly
    (Django's and SymPy's runners, tox)."""
    try:
        tokens = shlex.split(test_cmd)
    except ValueError:
        return None
    i = 0
    while i < len(tokens) and _ASSIGNMENT.match(tokens[i]):
        i += 1
    if i < len(tokens) and _PYTEST.match(tokens[i]):
        at = i + 1
    elif (
        i + 2 < len(tokens)
        and _PYTHON.match(tokens[i])
        and tokens[i + 1] == "-m"
        and tokens[i + 2] in ("pytest", "py.test")
    ):
        at = i + 3
    else:
        return None

    def quote(j: int, token: str) -> str:
        if j < i:
            name, value = token.split("=", 1)
            return f"{name}={shlex.quote(value)}"
        return shlex.quote(token)

    quoted = [quote(j, t) for j, t in enumerate(tokens)]
    return " ".join([*quoted[:at], "-p", module, *quoted[at:]])


@dataclass(slots=True)
class ReporterSetup:
    """One test run's reporter: its module name, the files to put in ``GRADE_DIR``, its nonce."""

    module: str
    nonce: str
    files: dict[str, str]


def reporter_setup(
    root: str, *, trusted: Iterable[str] = (), out: str = RESULT_FILE, patched: Iterable[str] = ()
) -> ReporterSetup:
    """A fresh reporter for a run in repository ``root``; ``trusted``: path prefixes whose code may
    be writable and still trusted (pytest's zip that toolgym copies in); ``out``: its result file;
    ``patched``: the files the candidate patch touched (a plugin module among them is tampering)."""
    module = f"_toolgym_reporter_{secrets.token_hex(6)}"
    nonce = secrets.token_hex(16)
    settings = {
        "nonce": nonce,
        "root": root,
        "out": out,
        "trusted": list(trusted),
        "patched": sorted(patched),
    }
    return ReporterSetup(
        module,
        nonce,
        {f"{module}.py": REPORTER_SOURCE.read_text(encoding="utf-8"), "settings.json": json.dumps(settings)},
    )


@dataclass(slots=True)
class ReporterResult:
    """What the reporter saw: statuses per test id (pytest's, as the ``-rA`` summary writes them)."""

    tests: dict[str, list[str]] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    exitstatus: int | None = None


def check_report(raw: bytes | None, nonce: str) -> ReporterResult:
    """The reporter's result; a missing, unreadable or wrongly stamped one is itself tampering
    (the reporter writes it at the end of every session that was not cut short)."""
    if raw is None:
        return ReporterResult(tampered=["toolgym's reporter wrote no result (the test run was cut short)"])
    try:
        data: Any = json.loads(raw)
        ok = isinstance(data, dict) and secrets.compare_digest(str(data.get("nonce", "")), nonce)
    except (ValueError, TypeError):
        ok = False
    if not ok:
        return ReporterResult(tampered=["the reporter's result is not the one toolgym's reporter wrote"])
    tests = {str(k): [str(s) for s in v] for k, v in dict(data.get("tests") or {}).items()}
    return ReporterResult(tests, [str(t) for t in data.get("tampered") or []], data.get("exitstatus"))


def log_key(parser: Callable[[str], dict[str, str]], nodeid: str) -> str | None:
    """The id a log parser gives ``nodeid`` (its id transforms applied), None if it gives none."""
    for line in (f"PASSED {nodeid}", f"{nodeid} PASSED"):
        keys = list(parser(line))
        if keys:
            return keys[0]
    return None


def unbacked_claims(
    log_statuses: Mapping[str, str],
    result: ReporterResult,
    parser: Callable[[str], dict[str, str]],
    graded: Iterable[str],
) -> list[str]:
    """Graded tests whose status in the log (other than a failure) the reporter did not see."""
    seen: dict[str, set[str]] = {}
    for nodeid, statuses in result.tests.items():
        key = log_key(parser, nodeid)
        if key is not None:
            seen.setdefault(key, set()).update(statuses)
    claims = []
    for test in graded:
        key = resolve_case(test, log_statuses)
        if key is None:
            continue
        status = log_statuses[key]
        if status not in FAILING and status not in seen.get(key, set()):
            claims.append(f"the log says {key} {status}, which toolgym's reporter did not see")
    return claims
