"""Tests of dependencies that CI must have fail under ``CI=1`` when one is missing, and skip elsewhere.

Each case runs real test files in a pytest of their own, with one package shadowed by a stub that
cannot be imported (first on ``PYTHONPATH``), as on a machine that lacks it. Also: what the tests
import is what ``make setup`` installs (the dev extra, and openenv-core beside it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CASES = [
    ("openenv", "tests/gym/test_openenv.py", "openenv-core without its gradio web UI"),
    ("fastmcp", "tests/gym/test_openenv.py", "openenv-core without its gradio web UI"),
    ("websockets", "tests/gym/test_openenv.py", "openenv-core without its gradio web UI"),
    ("websockets", "tests/gym/test_other_trainers_doc.py::test_the_openenv_example", "openenv-core"),
    ("mcp", "tests/plugins/mcp/test_mcp.py", "pip install -e '.[dev]'"),
]


def run_without(package: str, target: str, tmp_path: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    stub = tmp_path / "stubs" / package
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text(
        f"raise ModuleNotFoundError({f'No module named {package!r} (stubbed out)'!r}, name={package!r})\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "stubs"), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    if ci:
        env["CI"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", target, "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("package", "target", "hint"), CASES, ids=[f"{c[0]}-{c[1].split('/')[-1]}" for c in CASES]
)
def test_a_missing_dependency_fails_in_ci_and_skips_elsewhere(
    package: str, target: str, hint: str, tmp_path: Path
) -> None:
    ci = run_without(package, target, tmp_path, ci=True)
    out = ci.stdout + ci.stderr
    assert ci.returncode != 0, out
    assert "must be available in CI" in out and f"cannot import {package}" in out and hint in out, out
    assert not re.search(r"\b\d+ passed", out), out
    here = run_without(package, target, tmp_path, ci=False)
    out = here.stdout + here.stderr
    assert re.search(r"\b\d+ skipped", out) and "error" not in out.lower(), out
    assert f"unavailable here: cannot import {package}" in out, out


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_make_setup_installs_what_these_tests_import() -> None:
    """The dev extra holds the packages the tests above import (openenv-core's runtime needs among
    them), and scripts/setup.sh installs openenv-core itself beside it (without gradio)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev = _names(project["optional-dependencies"]["dev"]) | _names(project["dependencies"])
    assert {"mcp", "fastmcp", "websockets", "fastapi", "uvicorn", "gymnasium"} <= dev, sorted(dev)
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert re.search(r"\*,dev,\*\).*pip\" install -q --no-deps \"openenv-core>=0\.3\"", setup), (
        "scripts/setup.sh no longer installs openenv-core with the dev extra"
    )
    assert (
        "EXTRAS=${TOOLGYM_EXTRAS:-dev," in setup
        and "setup:\n\tbash scripts/setup.sh" in (REPO / "Makefile").read_text()
    )
