"""Grading in real sandboxes: the gold patch resolves every shipped task and the empty patch none
(on the Docker ``shell`` image and on the local backend); wrong and unappliable patches; and the
image path (SWE-bench and SWE-smith style images built here from a shipped repository)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandboxes.helpers import ensure_images, make_backend, require
from toolgym.plugins.swe.datasets import base_files, load_tasks, repo_files, shipped_tasks
from toolgym.plugins.swe.harness import GIT_ENV, INIT_AND_COMMIT, Evaluation, commit_message, evaluate
from toolgym.plugins.swe.patches import make_patch, reverse_patch
from toolgym.plugins.swe.task import SWETask
from toolgym.sandboxes.pool import PooledBackend


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, images=("shell",))
    yield b
    runner.run(b.aclose())


async def evaluate_all(
    backend: PooledBackend, jobs: list[tuple[SWETask, str]], workers: int = 2
) -> list[Evaluation]:
    """Evaluate (task, patch) pairs on a few sandboxes at once; results in job order."""
    results: list[Any] = [None] * len(jobs)
    pending = list(enumerate(jobs))

    async def work() -> None:
        sb = await backend.acquire("shell")
        try:
            while pending:
                i, (task, patch) = pending.pop(0)
                results[i] = await evaluate(sb, task, patch)
        finally:
            await backend.release(sb)

    await asyncio.gather(*(work() for _ in range(workers)))
    return results


def test_gold_resolves_every_task_and_empty_patch_none(
    backend: PooledBackend, runner: asyncio.Runner
) -> None:
    tasks = shipped_tasks()
    results = runner.run(evaluate_all(backend, [(t, p) for t in tasks for p in (t.patch, "")]))
    for i, task in enumerate(tasks):
        gold, empty = results[2 * i], results[2 * i + 1]
        assert gold.resolved and gold.status == "resolved", (
            task.instance_id,
            gold.report.as_dict(),
            gold.log[-2000:],
        )
        assert len(gold.report.f2p_success) == len(task.fail_to_pass)
        assert len(gold.report.p2p_success) == len(task.pass_to_pass)
        assert not empty.resolved and empty.status == "empty_patch", task.instance_id
        # before the fix every FAIL_TO_PASS test fails and every PASS_TO_PASS test passes
        assert sorted(empty.report.f2p_failure) == sorted(task.fail_to_pass), task.instance_id
        assert sorted(empty.report.p2p_success) == sorted(task.pass_to_pass), task.instance_id


def test_wrong_and_broken_patches(backend: PooledBackend, runner: asyncio.Runner) -> None:
    task = next(t for t in shipped_tasks() if t.instance_id == "toolgym__ledger-2")
    base = base_files(task)
    src = "ledger/account.py"
    # fixes the issue but breaks the overdraft check: a PASS_TO_PASS test fails
    overfix = make_patch(
        {src: base[src]},
        {
            src: base[src].replace(
                "if self.balance - amount <= -self.overdraft_limit:",
                "if self.balance - amount < -self.overdraft_limit - 1:",
            )
        },
    )
    garbage = (
        "diff --git a/ledger/account.py b/ledger/account.py\n--- a/ledger/account.py\n+++ b/ledger/account.py\n"
        "@@ -1,3 +1,3 @@\n-this line is not in the file\n+nor is this\n context\n"
    )
    # the gold fix plus an edit of a test file: test files are reset to the base before the test patch
    tests = "tests/test_account.py"
    tampered = task.patch + make_patch(
        {tests: base[tests]}, {tests: base[tests] + "\ndef test_extra():\n    assert False\n"}
    )
    overfixed, broken, with_tests = runner.run(
        evaluate_all(backend, [(task, overfix), (task, garbage), (task, tampered)])
    )
    assert not overfixed.resolved and overfixed.status == "unresolved" and overfixed.report.f2p_failure == []
    assert overfixed.report.p2p_failure == [
        "tests/test_account.py::test_failed_transfer_changes_nothing",
        "tests/test_account.py::test_overdraw_is_refused",
    ]
    assert broken.status == "patch_failed" and not broken.resolved
    assert with_tests.resolved and "test_extra" not in with_tests.tests


def test_grading_starts_from_a_clean_sandbox(backend: PooledBackend, runner: asyncio.Runner) -> None:
    """What the agent leaves outside its patch (files in /tmp, home, the work tree's ignored files)
    cannot reach the grader: the sandbox is reset and the repository checked out again."""
    task = next(t for t in shipped_tasks() if t.instance_id == "toolgym__seqtools-2")

    async def run() -> tuple[Evaluation, str]:
        sb = await backend.acquire("shell")
        try:
            # a sitecustomize on the user's path and a conftest that passes everything, left behind
            await sb.run(
                "mkdir -p ~/.local/lib && echo 'raise SystemExit(0)' > /tmp/sitecustomize.py && "
                "printf 'import pytest\\n@pytest.hookimpl(tryfirst=True)\\ndef pytest_runtest_call(item):\\n"
                '    raise pytest.skip.Exception("x")\\n\' > /workspace/conftest.py'
            )
            result = await evaluate(sb, task, "")
            leftover = (await sb.run("ls /tmp /workspace")).stdout
            return result, leftover
        finally:
            await backend.release(sb)

    result, leftover = runner.run(run())
    assert not result.resolved and result.report.f2p_failure == list(task.fail_to_pass)
    assert "sitecustomize" not in leftover


# -- image tasks (Docker only) --------------------------------------------------------------------

NAMESPACE = "toolgym-test"


def _commit_tree(root: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    done = subprocess.run(
        ["bash", "-c", INIT_AND_COMMIT],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **GIT_ENV, "TOOLGYM_COMMIT_MESSAGE": message},
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two images in the formats of SWE-bench (the repository at the task's base commit in
    /testbed) and SWE-smith (the clean repository), made FROM the shell image, and a dataset file
    for each."""
    require("docker")  # skips here (fails in CI) without a Docker engine
    ensure_images("shell")
    import docker

    client = docker.from_env()
    task = next(t for t in shipped_tasks() if t.instance_id == "toolgym__textkit-2")
    root = tmp_path_factory.mktemp("swe-images")
    made: dict[str, Any] = {}
    for style, files in (("swebench", base_files(task)), ("swesmith", repo_files("textkit"))):
        ctx = root / style
        head = _commit_tree(ctx / "testbed", files, commit_message(task.repo, task.instance_id))
        (ctx / "Dockerfile").write_text("FROM toolgym/sandbox-shell:latest\nCOPY testbed /testbed\n")
        if style == "swebench":
            tag = f"{NAMESPACE}/sweb.eval.x86_64.toolgym_1776_textkit-2:latest"
            row = {**task.to_row(), "base_commit": head}
        else:
            tag = f"{NAMESPACE}/swesmith.x86_64.toolgym_1776_textkit.00000000:latest"
            row = {
                "instance_id": "toolgym__textkit.00000000.truncate_off_by_one",
                "repo": "swesmith/toolgym__textkit.00000000",
                "patch": reverse_patch(task.patch),
                "FAIL_TO_PASS": list(task.fail_to_pass),
                "PASS_TO_PASS": list(task.pass_to_pass),
                "image_name": tag,
                "problem_statement": task.problem_statement,
                "created_at": "2025-01-01",
                "base_commit": "not-available-offline",
            }
        client.images.build(path=str(ctx), tag=tag, network_mode="none", rm=True)
        (root / f"{style}.jsonl").write_text(json.dumps(row) + "\n")
        made[style] = {"tag": tag, "dataset": root / f"{style}.jsonl"}
    yield made
    for entry in made.values():
        client.images.remove(entry["tag"], force=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.docker
@pytest.mark.parametrize("style", ["swebench", "swesmith"])
def test_image_tasks_are_graded_like_their_harness(
    style: str, images: dict[str, Any], docker_backend: PooledBackend, runner: asyncio.Runner
) -> None:
    (task,) = load_tasks(
        images[style]["dataset"], style, image_namespace=NAMESPACE if style == "swebench" else None
    )
    assert task.image == images[style]["tag"] and task.family == style

    from toolgym.plugins.swe.env import SWEEnv

    kind = SWEEnv(dataset=str(images[style]["dataset"]), family=style, image_namespace=NAMESPACE)._kind(task)

    async def run() -> tuple[Evaluation, Evaluation]:
        sb = await docker_backend.acquire(kind)
        try:
            return await evaluate(sb, task, task.patch), await evaluate(sb, task, "")
        finally:
            await docker_backend.release(sb)

    gold, empty = runner.run(run())
    assert gold.resolved, gold.log[-3000:]
    assert not empty.resolved and sorted(empty.report.f2p_failure) == sorted(task.fail_to_pass)
    if style == "swesmith":  # the verbose log lines were parsed
        assert "PASSED" in gold.log and " PASSED" in next(ln for ln in gold.log.splitlines() if "::" in ln)
