"""The CPU path's config (``cpu_config.py``, ``keychain_cpu.yaml``, ``verl.trainer.device=cpu``) and its
one-sentence errors: a rollout engine that is not installed, an unknown rollout replica, a model too
large for the host's memory. No Ray here (``test_cpu_fit.py`` runs the trainer)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.verl import compose, cpu_config


def test_keychain_cpu_composes_into_verls_cpu_path(tmp_path: Path) -> None:
    cfg, settings = compose.compose_config("keychain_cpu", data_dir=tmp_path)
    compose.check_config(cfg)
    assert settings.env == "keychain" and cfg.algorithm.adv_estimator == "toolgym_grpo"
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.name, rollout.checkpoint_engine.backend, cfg.trainer.device) == (
        "toolgym_cpu",
        "naive",
        "cpu",
    )
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert (
        Path(cfg.actor_rollout_ref.model.path) / "config.json"
    ).is_file()  # `tiny` resolved to the built model
    assert cfg.trainer.use_v1 is True and list(cfg.trainer.logger) == ["console", "file"]


def test_a_gpu_example_switches_to_the_cpu_with_one_override(tmp_path: Path) -> None:
    cfg, _ = compose.compose_config("alfworld_gigpo", ["verl.trainer.device=cpu"], data_dir=tmp_path)
    assert cfg.actor_rollout_ref.rollout.name == "toolgym_cpu" and cfg.trainer.n_gpus_per_node == 1
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1


def test_dry_run_from_the_command_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["train", "--config", "keychain_cpu", "--dry-run", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "toolgym_cpu" in result.output


def test_missing_rollout_engine_says_how_to_run_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, _ = compose.compose_config("alfworld_gigpo", data_dir=tmp_path)
    monkeypatch.setattr(compose, "_missing", lambda module: True)  # as on a machine without vLLM
    with pytest.raises(ConfigError) as info:
        compose.run_training(cfg)
    message = str(info.value)
    assert "\n" not in message and "'vllm'" in message and "verl.trainer.device=cpu" in message


def test_unknown_rollout_replica_is_refused_when_composing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        compose.compose_config(
            "keychain_cpu",
            ["verl.trainer.device=cuda", "verl.actor_rollout_ref.rollout.name=vllm_cpu"],
            data_dir=tmp_path,
        )
    message = str(info.value)
    assert "\n" not in message and "'vllm_cpu'" in message and "toolgym_cpu" in message


def test_a_model_too_large_for_the_host_is_refused_in_one_sentence(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    with open(big / "model.safetensors", "wb") as f:  # sparse: 14 GB of bf16 = 7B parameters
        f.truncate(14 * 10**9)
    assert cpu_config.model_params(big) == 7 * 10**9
    with pytest.raises(ConfigError) as info:
        cpu_config.check_cpu_budget(str(big), available=64 * 2**30)
    message = str(info.value)
    assert "\n" not in message and "7.00B parameters" in message and "smaller model" in message
    cpu_config.check_cpu_budget(str(big), available=200 * 2**30)  # fits: 140 GB needed
    cpu_config.check_cpu_budget("Qwen/Qwen2.5-7B-Instruct")  # a hub name is not looked up


def test_the_budget_is_checked_when_composing(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text("{}")
    with open(big / "model.safetensors", "wb") as f:
        f.truncate(
            os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        )  # float32: RAM/4 parameters x 20 bytes
    with pytest.raises(ConfigError, match="to train on the CPU"):
        compose.compose_config(
            "keychain_cpu", [f"verl.actor_rollout_ref.model.path={big}"], data_dir=tmp_path / "d"
        )


def test_logprob_sync_metrics_compare_sampled_tokens_only() -> None:
    import torch

    from toolgym.training.verl.trainer import logprob_sync_metrics

    actor = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, 0.0]])
    rollout = torch.tensor([[-1.0, -2.5, -9.0], [-0.5, -0.25, -7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the third column is padding: its gap must not count
    got = logprob_sync_metrics({"old_log_probs": actor, "rollout_log_probs": rollout, "response_mask": mask})
    assert got == {"toolgym/rollout_logprob_diff_max": 0.5, "toolgym/rollout_logprob_diff_mean": 0.125}
    assert (
        logprob_sync_metrics(
            {"old_log_probs": actor, "rollout_log_probs": rollout, "response_mask": mask * 0}
        )
        == {}
    )


def test_dry_run_in_a_fresh_interpreter_knows_the_cpu_replica(tmp_path: Path) -> None:
    """From the command line toolgym's modules import verl first, and verl's plugin loader then finds
    them half-imported; composing must still see the ``toolgym_cpu`` replica (pytest imports verl first)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolgym",
            "train",
            "--config",
            "keychain_cpu",
            "--dry-run",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    assert "toolgym_cpu" in proc.stdout
