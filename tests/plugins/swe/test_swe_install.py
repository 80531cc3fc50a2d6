"""The install step (SWE-bench's ``install``): re-run after the candidate patch, before the test
patch; its failure does not stop grading; a row's ``install`` field sets it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandboxes.helpers import make_backend
from toolgym.plugins.swe.datasets import load_tasks, shipped_tasks
from toolgym.plugins.swe.harness import Evaluation, evaluate
from toolgym.plugins.swe.patches import make_patch
from toolgym.plugins.swe.task import REPO_INSTALL
from toolgym.sandboxes.pool import PooledBackend

PROBE = 'echo "install saw: $(cat BUILD_NOTE 2>/dev/null || echo nothing)"'


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, images=("shell",))
    yield b
    runner.run(b.aclose())


def test_install_runs_after_the_patch_and_its_failure_does_not_stop_grading(
    backend: PooledBackend, runner: asyncio.Runner
) -> None:
    task = next(t for t in shipped_tasks() if t.instance_id == "toolgym__ledger-1")
    probing = dataclasses.replace(task, install_cmd=PROBE)
    failing = dataclasses.replace(task, install_cmd="exit 3")
    note = make_patch({}, {"BUILD_NOTE": "from the patch\n"})

    async def run() -> list[Evaluation]:
        sb = await backend.acquire("shell")
        try:
            return [
                await evaluate(sb, probing, task.patch + note),
                await evaluate(sb, failing, task.patch),
                await evaluate(sb, failing, ""),
            ]
        finally:
            await backend.release(sb)

    probed, failed_install, empty = runner.run(run())
    assert "install saw: from the patch" in probed.log and probed.resolved
    assert (
        probed.log.index(">>>>> Applied Patch")
        < probed.log.index("install saw")
        < probed.log.index("tests/test_money.py")
    )
    assert ">>>>> Install Exit Code: 3" in failed_install.log and failed_install.resolved
    assert not empty.resolved


def test_rows_carry_the_install_step(tmp_path: Path) -> None:
    row = {
        "repo": "psf/requests",
        "instance_id": "psf__requests-2317",
        "base_commit": "a" * 40,
        "patch": "",
        "test_patch": "diff --git a/tests/t.py b/tests/t.py\n",
        "problem_statement": "x",
        "hints_text": "",
        "created_at": "",
        "version": "2.4",
        "FAIL_TO_PASS": "[]",
        "PASS_TO_PASS": "[]",
        "environment_setup_commit": "",
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps(row)
        + "\n"
        + json.dumps({**row, "instance_id": "psf__requests-1", "install": "make"})
        + "\n"
    )
    default, own = load_tasks(path)
    assert default.install_cmd == REPO_INSTALL["psf/requests"] == "python -m pip install ."
    assert (
        own.install_cmd == "make" and own.to_row()["install"] == "make" and "install" not in default.to_row()
    )
    assert all(not t.install_cmd for t in shipped_tasks())
