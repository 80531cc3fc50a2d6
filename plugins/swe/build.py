"""Build (or check) the shipped task file ``data/tasks.jsonl`` from ``bugs.py`` and ``data/repos``.

    python -m toolgym.plugins.swe.build            # rewrite data/tasks.jsonl
    python -m toolgym.plugins.swe.build --check    # exit 1 when the file is out of date

For each bug: the base state is the fixed repository with the bug's edits undone and its added
tests removed; ``patch`` turns the base sources into the fixed ones, ``test_patch`` adds the tests.
FAIL_TO_PASS and PASS_TO_PASS are measured here by running pytest (this interpreter) on the test
files of ``test_patch``, before the fix (base + test patch) and after it (fixed repository):
FAIL_TO_PASS failed before and pass after, PASS_TO_PASS pass both times, nothing fails after. The
base commit id is the one ``harness.checkout`` produces in a sandbox (same files, same commit
recipe). Needs git and pytest on this machine.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from toolgym.plugins.swe.bugs import BUGS, Bug
from toolgym.plugins.swe.datasets import TASKS_FILE, repo_files
from toolgym.plugins.swe.harness import GIT_ENV, INIT_AND_COMMIT, commit_message
from toolgym.plugins.swe.logs import TestStatus, parse_pytest
from toolgym.plugins.swe.patches import make_patch
from toolgym.plugins.swe.task import SHIPPED_TEST_CMD, test_directives

CREATED_AT = "2025-01-01T00:00:00Z"
VERSION = "1.0"


def remove_tests(source: str, names: tuple[str, ...], path: str) -> str:
    """``source`` without the module-level test functions ``names`` (and their decorators)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    spans = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            last = node.end_lineno or node.lineno
            while first > 0 and not lines[first - 1].strip():
                first -= 1  # the blank lines before it go with it
            spans.append((first, last))
    found = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} & set(names)
    if found != set(names):
        raise SystemExit(f"{path}: test functions not found: {sorted(set(names) - found)}")
    for first, last in sorted(spans, reverse=True):
        del lines[first:last]
    return "".join(lines)


def bug_files(bug: Bug) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(fixed repository, base sources + fixed tests, base repository)."""
    fixed = repo_files(bug.repo)
    buggy_src = dict(fixed)
    for path, good, bad in bug.edits:
        count = buggy_src[path].count(good)
        if count != 1:
            raise SystemExit(
                f"{bug.instance_id}: the fixed snippet occurs {count} times in {path}; it must occur once"
            )
        buggy_src[path] = buggy_src[path].replace(good, bad)
    base = dict(buggy_src)
    for path, names in bug.hidden.items():
        base[path] = remove_tests(fixed[path], names, path)
    return fixed, buggy_src, base


def run_pytest(files: dict[str, str], directives: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="toolgym-swe-") as tmp:
        for path, text in files.items():
            target = Path(tmp, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        cmd = [sys.executable, "-m", *SHIPPED_TEST_CMD.split()[2:], *directives]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=300, env=env)
        return parse_pytest(done.stdout)


def base_commit(files: dict[str, str], message: str) -> str:
    with tempfile.TemporaryDirectory(prefix="toolgym-swe-git-") as tmp:
        for path, text in files.items():
            target = Path(tmp, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            target.chmod(0o644)
        env = {**os.environ, **GIT_ENV, "TOOLGYM_COMMIT_MESSAGE": message}
        done = subprocess.run(
            ["bash", "-c", INIT_AND_COMMIT], cwd=tmp, capture_output=True, text=True, env=env, check=True
        )
        return done.stdout.strip().splitlines()[-1]


def build_row(bug: Bug) -> dict[str, Any]:
    fixed, buggy_src, base = bug_files(bug)
    sources = sorted({p for p, _, _ in bug.edits})
    patch = make_patch({p: buggy_src[p] for p in sources}, {p: fixed[p] for p in sources})
    test_patch = make_patch({p: base[p] for p in bug.hidden}, {p: fixed[p] for p in bug.hidden})
    repo = f"toolgym/{bug.repo}"
    directives = test_directives(repo, test_patch)
    before = run_pytest({**base, **{p: fixed[p] for p in bug.hidden}}, directives)
    after = run_pytest(fixed, directives)
    broken = sorted(t for t, s in after.items() if s != TestStatus.PASSED)
    if broken or not after:
        raise SystemExit(f"{bug.instance_id}: tests fail on the fixed repository: {broken or 'no tests ran'}")
    f2p = sorted(t for t in after if before.get(t) != TestStatus.PASSED)
    p2p = sorted(t for t in after if before.get(t) == TestStatus.PASSED)
    hidden = {f"{path}::{name}" for path, names in bug.hidden.items() for name in names}
    if not hidden <= set(f2p):
        raise SystemExit(
            f"{bug.instance_id}: added tests that pass without the fix: {sorted(hidden - set(f2p))}"
        )
    commit = base_commit(base, commit_message(repo, bug.instance_id))
    return {
        "repo": repo,
        "instance_id": bug.instance_id,
        "base_commit": commit,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": bug.problem_statement,
        "hints_text": "",
        "created_at": CREATED_AT,
        "version": VERSION,
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": commit,
        "category": bug.category,
    }


def render(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with data/tasks.jsonl instead of writing it"
    )
    args = parser.parse_args(argv)
    rows = []
    for bug in BUGS:
        rows.append(build_row(bug))
        print(
            f"{bug.instance_id}: {len(json.loads(rows[-1]['FAIL_TO_PASS']))} fail-to-pass, "
            f"{len(json.loads(rows[-1]['PASS_TO_PASS']))} pass-to-pass",
            file=sys.stderr,
        )
    text = render(rows)
    if args.check:
        current = TASKS_FILE.read_text(encoding="utf-8") if TASKS_FILE.exists() else ""
        if current != text:
            print(f"{TASKS_FILE} is out of date: run python -m toolgym.plugins.swe.build", file=sys.stderr)
            return 1
        print(f"{TASKS_FILE} is up to date ({len(rows)} tasks)", file=sys.stderr)
        return 0
    TASKS_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {TASKS_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
