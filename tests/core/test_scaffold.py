"""`toolgym new tool|env` writes packages that install, register and pass their own tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.core.errors import ConfigError
from toolgym.scaffold import scaffold


@pytest.mark.parametrize("kind", ["tool", "env"])
def test_scaffolded_package_installs_and_passes(kind: str, tmp_path: Path) -> None:
    name = f"my_{kind}"
    made = subprocess.run(
        [sys.executable, "-m", "toolgym", "new", kind, name, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    root = tmp_path / f"toolgym-my-{kind}"
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(root),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    listing = "tools" if kind == "tool" else "envs"
    listed = subprocess.run(
        [sys.executable, "-m", "toolgym", listing, "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert name in {row["name"] for row in json.loads(listed.stdout)}


def test_scaffold_refuses_bad_names_and_overwrites(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lowercase"):
        scaffold("tool", "Bad-Name", tmp_path)
    scaffold("tool", "ok", tmp_path)
    with pytest.raises(ConfigError, match="already exists"):
        scaffold("tool", "ok", tmp_path)
