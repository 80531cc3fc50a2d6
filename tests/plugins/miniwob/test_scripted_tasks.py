"""``--model scripted`` on MiniWoB++: without a task list the scripted run plays the
tasks that have a solver (``tasks=solvable``) instead of failing every episode on one that has none;
an explicit list with such a task is refused in one sentence, naming it and the fix, before any
browser starts. The last test runs the README's command in real Chromium (Docker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandboxes.helpers import require
from toolgym.collect.guard import apply_scripted_defaults, check_scripted_solver
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.errors import ConfigError
from toolgym.core.registry import get_registry
from toolgym.plugins.miniwob.solvers import SOLVERS
from toolgym.plugins.miniwob.tasks import supported_tasks


def _opts(out: Path, model: str, **env_kwargs: object) -> CollectOptions:
    return CollectOptions(
        env="miniwob", out=out, model=model, episodes=8, sandbox_backend="none", env_kwargs=dict(env_kwargs)
    )


def test_a_scripted_run_without_a_task_list_plays_the_solvable_tasks(tmp_path: Path) -> None:
    reg = get_registry()
    opts = _opts(tmp_path, "scripted", observation="both")
    apply_scripted_defaults(reg, opts)
    assert opts.env_kwargs == {"observation": "both", "tasks": "solvable"}
    check_scripted_solver(reg, opts)  # every planned task has a solver: no error
    mine = _opts(tmp_path, "scripted", task="click-button")
    apply_scripted_defaults(reg, mine)
    assert mine.env_kwargs["task"] == "click-button"  # the user's choice wins (task= overrides tasks=)
    model = _opts(tmp_path, "tiny", observation="both")
    apply_scripted_defaults(reg, model)
    assert model.env_kwargs == {"observation": "both"}  # a model plays every task: the default stays `all`


async def test_an_explicit_list_with_an_unsolvable_task_fails_before_any_browser(tmp_path: Path) -> None:
    unsolved = next(t for t in supported_tasks() if t not in SOLVERS)
    out = tmp_path / "ds"
    for tasks in ("all", f"click-button,{unsolved}"):
        with pytest.raises(ConfigError) as caught:
            await collect(_opts(out, "scripted", tasks=tasks), registry=get_registry())
        message = str(caught.value)
        assert unsolved in message and "tasks=solvable" in message and message.count(". ") == 0, message
        assert not out.exists()  # refused before planning, the store, or a sandbox
    check_scripted_solver(get_registry(), _opts(out, "tiny", tasks="all"))  # a model needs no solver


def test_the_readme_command_collects_in_chromium(tmp_path: Path) -> None:
    require("docker")
    from tests.sandboxes.helpers import ensure_images

    ensure_images("browser")
    out = tmp_path / "shots"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolgym",
            "collect",
            "--env",
            "miniwob",
            "--model",
            "scripted",
            "--env-arg",
            "observation=both",
            "--env-arg",
            "time_limit=60",
            "--episodes",
            "4",
            "--sandbox-backend",
            "docker",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["reward"] > 0 for r in rows)
    assert {r["metadata"]["env_info"]["miniwob_task"] for r in rows} <= set(SOLVERS)
    assert json.loads((out / "manifest.json").read_text())["fingerprint"]["env_kwargs"]["tasks"] == "solvable"
