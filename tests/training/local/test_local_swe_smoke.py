"""``swe_grpo`` with the local trainer, end to end: the tiny model, Docker sandboxes, 2 RL steps.

Checks what a real SWE run depends on: every episode is graded (the tests run in the sandbox at the
turn limit: autosubmit), the reward the grading gives is the trajectory's and reaches
``metrics.jsonl``, the episode filters count what they did (in the metrics and the progress
line), sandboxes come from the warm pool and are reused between episodes (fewer containers
created than episodes played), and no container of the run is left when it ends.
The tiny model never solves a task, so every reward is 0: the PPO update itself is covered by
``test_local_rl_loop.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.sandboxes.helpers import ensure_images, require

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def docker_lines(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=True).stdout
    return [ln for ln in out.splitlines() if ln.strip()]


def created_by(owner_prefix: str, since: float) -> list[dict[str, Any]]:
    """Labels of the toolgym containers this process created since ``since`` (Docker's event log)."""
    lines = docker_lines(
        "events",
        "--since",
        f"{since:.3f}",
        "--until",
        f"{time.time():.3f}",
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        "label=toolgym.sandbox",
        "--format",
        "{{json .Actor.Attributes}}",
    )
    labels = [json.loads(ln) for ln in lines]
    return [a for a in labels if str(a.get("toolgym.owner", "")).startswith(owner_prefix)]


def test_swe_grpo_two_steps_with_docker_sandboxes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require("docker")
    ensure_images("shell")
    from toolgym.training import runner

    out = tmp_path / "run"
    overrides = [
        "verl.trainer.total_training_steps=2",
        "verl.data.train_batch_size=1",
        "toolgym.group_size=2",
        "verl.actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "toolgym.env_kwargs.max_turns=2",
        "toolgym.engine.max_turns=2",
        "toolgym.engine.max_tokens_per_turn=12",
        "toolgym.val.num_tasks=1",
        "verl.trainer.test_freq=0",
        "verl.trainer.save_freq=0",
        f"verl.trainer.default_local_dir={out}",
    ]
    owner = f"{socket.gethostname()}:{os.getpid()}:"
    started = time.time() - 1
    runner.run("swe_grpo", overrides)
    created = created_by(owner, started)

    trajs = [json.loads(ln) for ln in (out / "trajectories" / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 2 * 1 * 2  # two steps of one task x 2 samples (held-out episodes are not stored)
    episodes = len(trajs) + 2  # and one held-out episode before and one after training
    for t in trajs:
        assert t["status"] == "ok", t["status_reason"]
        last = t["steps"][-1]["info"]
        # graded at the turn limit: the task's tests ran on the (empty) diff, FAIL_TO_PASS failed
        assert last["status"] == "empty_patch" and last["duration_s"] > 0, last
        assert last["tests_status"]["FAIL_TO_PASS"]["failure"], last["tests_status"]
        assert t["reward"] == float(last["resolved"]) == 0.0
        assert t["truncation_reason"].startswith("turn limit (2) reached; the diff was graded")
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2]
    assert sum(r["mean_reward"] * r["episodes"] for r in steps) == sum(t["reward"] for t in trajs)
    for r in steps:
        f = r["filters"]  # swe_grpo masks turn-limited episodes, and the group (all 0) is dropped
        assert (
            f["filter/turn_limit"] == 2 and f["filter/equal_reward_groups"] == 1 and f["filter/dropped"] == 2
        )
        assert r["trainable"] == 0 and r["rows"] == 0
    assert "filtered 0 masked/2 dropped (turn_limit 2, 1 equal group)" in capsys.readouterr().err

    assert created, "no toolgym container was created by this run"
    assert len(created) < episodes, (
        f"{len(created)} containers for {episodes} episodes: sandboxes were not reused"
    )
    # this run's containers (other tests in this process may still hold pooled sandboxes of their own)
    ours = {a.get("toolgym.id") for a in created}
    left = docker_lines(
        "ps", "-a", "--filter", "label=toolgym.sandbox", "--format", '{{.Label "toolgym.id"}}'
    )
    assert not [i for i in left if i in ours], f"containers left behind: {sorted(ours & set(left))}"
