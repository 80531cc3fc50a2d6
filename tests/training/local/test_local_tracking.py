"""``verl.trainer.logger`` in the local trainer: every step's metrics and every held-out evaluation
go through verl's own ``Tracking`` (TensorBoard, W&B offline, ...); bad names fail in one sentence."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.required import need_module
from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.local.progress import tracking_metrics
from toolgym.training.runner import build, load_config

SMALL = [
    "verl.data.train_batch_size=2",
    "toolgym.group_size=2",
    "toolgym.val.num_tasks=2",
    "toolgym.engine.max_tokens_per_turn=8",
    "verl.trainer.total_training_steps=1",
]


def _tracking(*overrides: str) -> dict[str, object]:
    return build(load_config("keychain_gigpo", list(overrides)))[1]["tracking"]


def test_logger_keys_are_read_and_console_needs_no_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "verl", None)  # as if verl were not installed
    assert _tracking() == {
        "backends": [],
        "project_name": "toolgym_local",
        "experiment_name": "keychain_gigpo_local",
    }
    assert _tracking(
        "verl.trainer.logger=[console]", "verl.trainer.project_name=p", "verl.trainer.experiment_name=e"
    ) == {"backends": [], "project_name": "p", "experiment_name": "e"}
    with pytest.raises(ConfigError, match=r"pip install toolgym\[verl\]") as err:
        _tracking("verl.trainer.logger=[console,tensorboard]")
    assert "\n" not in str(err.value)


def test_an_unknown_backend_fails_in_one_sentence_before_anything_is_written(tmp_path: Path) -> None:
    need_module("verl")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "keychain_gigpo",
            "verl.trainer.logger=[console,tensorbord]",
            f"verl.trainer.default_local_dir={out}",
        ],
    )
    assert isinstance(result.exception, ConfigError), result.output
    message = str(result.exception)
    assert "\n" not in message and message.count(". ") == 0
    assert (
        message.startswith("unknown backend 'tensorbord' in verl.trainer.logger") and "tensorboard" in message
    )
    assert not out.exists()
    with pytest.raises(ConfigError, match="must be a backend name or a list"):
        _tracking("verl.trainer.logger={a: 1}")


def test_tracking_metrics_are_flat_scalars() -> None:
    rec = {
        "step": 3,
        "train_success": 0.5,
        "policy_loss": None,
        "kl": 0.01,
        "kl_kind": "ref",
        "step_groups": {"repeat_rate": 0.25},
        "filters": {"filter/kept": 4.0},
        "heldout": {
            "success": 0.75,
            "by_type": {"two_hop": 1.0},
            "episodes": 2,
            "per_task": {"0": 1.0, "1": 0.0},
        },
    }
    assert tracking_metrics(rec) == {  # per-task outcomes stay in metrics.jsonl
        "train/success": 0.5,
        "train/kl_ref": 0.01,
        "step_groups/repeat_rate": 0.25,
        "filter/kept": 4.0,
        "heldout/success": 0.75,
        "heldout/by_type/two_hop": 1.0,
        "heldout/episodes": 2.0,
    }


def _run(tmp_path: Path, logger: str, env: dict[str, str]) -> Path:
    """One RL step in a process of its own (W&B and TensorBoard keep state per process), cwd tmp_path."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "toolgym",
        "train",
        "--trainer",
        "local",
        "--config",
        "keychain_gigpo",
        *SMALL,
        f"verl.trainer.logger=[console,{logger}]",
        "verl.trainer.project_name=tg_project",
        "verl.trainer.experiment_name=tg_experiment",
        f"verl.trainer.default_local_dir={out}",
    ]
    done = subprocess.run(
        cmd,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"tracking: {logger} through verl's Tracking" in done.stderr
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]  # metrics.jsonl as before
    return out


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_gets_every_step_and_held_out_evaluation(tmp_path: Path) -> None:
    need_module("verl")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = tmp_path / "tb"
    _run(tmp_path, "tensorboard", {"TENSORBOARD_DIR": str(logs)})
    assert list(logs.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(logs))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/success", "train/policy_loss", "train/kl_old", "heldout/success", "filter/kept"} <= tags
    assert [e.step for e in events.Scalars("heldout/success")] == [0, 1]  # before RL and after the last step
    assert [e.step for e in events.Scalars("train/success")] == [1]


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_wandb_offline_run_holds_the_logged_keys(tmp_path: Path) -> None:
    need_module("verl")
    _run(
        tmp_path,
        "wandb",
        {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true", "WANDB_CONSOLE": "off"},
    )
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    data = b"".join(p.read_bytes() for p in runs[0].glob("run-*.wandb"))
    for key in (b"train/success", b"train/policy_loss", b"heldout/success", b"step_groups/repeat_rate"):
        assert key in data, key
    assert b"tg_project" in data and b"tg_experiment" in data
