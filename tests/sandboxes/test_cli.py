"""``toolgym sandbox``: build (a no-op when cached), doctor, ls."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.sandboxes.helpers import make_backend, require


def toolgym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolgym", "sandbox", *args], capture_output=True, text=True, timeout=300
    )


def test_help_lists_the_commands() -> None:
    out = toolgym("--help")
    assert out.returncode == 0
    for command in ("build", "gc", "doctor", "ls"):
        assert command in out.stdout


@pytest.mark.docker
def test_build_is_a_no_op_when_the_recipe_is_unchanged() -> None:
    require("docker")
    make_backend("docker")  # builds python once if needed
    out = toolgym("build", "python")
    assert out.returncode == 0, out.stderr
    assert "python: up to date" in out.stderr and "base: up to date" in out.stderr
    assert out.stdout.startswith("rootfs\ttoolgym/rootfs:bookworm")
    bad = toolgym("build", "nonsense")
    assert bad.returncode != 0 and "unknown image nonsense" in bad.stderr


@pytest.mark.docker
def test_doctor_and_ls() -> None:
    require("docker")
    make_backend("docker")
    out = toolgym("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "docker: engine" in out.stdout and "image python   up to date" in out.stdout
    assert "docker smoke test: ok" in out.stdout
    listing = toolgym("ls", "--json")
    assert listing.returncode == 0 and isinstance(json.loads(listing.stdout), list)
