"""The local trainer on the target environments: configs, bad input, progress, metrics, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.runner import build, latest_checkpoint, load_config, model_dir

TWINS = [
    ("alfworld_gigpo", "alfworld_grpo", "alfworld-verl"),
    ("webshop_gigpo", "webshop_grpo", "webshop-verl"),
    ("math_python_arpo", "math_python_grpo", "math-python"),
    ("keychain_arpo", "keychain_grpo", "keychain"),
]


@pytest.mark.parametrize(("first", "second", "env"), TWINS)
def test_shipped_configs_build_and_twins_share_their_budget(first: str, second: str, env: str) -> None:
    a, run_a = build(load_config(first, []))
    b, run_b = build(load_config(second, []))
    assert a.env == b.env == env and a.estimator != b.estimator
    assert run_a["model"] == run_b["model"] and run_a["out"] != run_b["out"]
    assert (a.steps, a.tasks_per_step, a.engine.get("max_turns"), a.ppo, a.optim, a.eval) == (
        b.steps,
        b.tasks_per_step,
        b.engine.get("max_turns"),
        b.ppo,
        b.optim,
        b.eval,
    )
    budget = a.engine.get("arpo", {}).get("budget", a.group_size)
    assert budget == b.group_size  # the same number of trajectories per task


def test_alfworld_configs_use_verl_agent_format_and_the_warm_start() -> None:
    rl, run = build(load_config("alfworld_gigpo", []))
    assert rl.env_kwargs["history_length"] == 2 and rl.eval.env_kwargs == {"split": "validation"}
    assert (
        rl.estimator_options["gamma"] == 0.95 and rl.group_size == 8 and run["model"] == "warmstart:alfworld"
    )


def _one_line_error(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError), result.output
    message = str(result.exception)
    assert "\n" not in message
    return message


def test_bad_input_fails_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = [
        "train",
        "--trainer",
        "local",
        "--config",
        "keychain_gigpo",
        f"verl.trainer.default_local_dir={out}",
    ]
    assert "unknown key toolgym.bogus" in _one_line_error([*base, "toolgym.bogus=1"])
    assert "did you mean verl.trainer.total_training_steps" in _one_line_error(
        [*base, "verl.trainer.total_training_step=3"]
    )
    assert "warm_start" in _one_line_error([*base, "warm_start.recipe=alfworld", "warm_start.bogus=1"])
    no_tokenizer = tmp_path / "model"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text("{}")
    assert "has no tokenizer" in _one_line_error([*base, f"verl.actor_rollout_ref.model.path={no_tokenizer}"])
    sandbox = _one_line_error(
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "math_python_grpo",
            "toolgym.sandbox_backend=none",
            f"verl.trainer.default_local_dir={out}",
        ]
    )
    assert "python sandboxes" in sandbox
    config = tmp_path / "extra.yaml"
    config.write_text("toolgym: {env: keychain}\nverl: {}\noptimizer: {lr: 1}\n")
    assert "unknown section(s) optimizer" in _one_line_error(
        ["train", "--trainer", "local", "--config", str(config)]
    )
    assert not out.exists()


def test_a_missing_warm_start_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgym.training.warmstart import build as warmstart

    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="toolgym warmstart --env alfworld"):
        warmstart.resolve("alfworld")


# -- a killed run resumes with the results of an uninterrupted one ------------------------------------

SMALL = [
    "verl.data.train_batch_size=2",
    "toolgym.group_size=2",
    "toolgym.val.num_tasks=2",
    "toolgym.engine.max_tokens_per_turn=8",
    "verl.trainer.save_freq=1",
    "verl.trainer.test_freq=2",
    "verl.trainer.total_training_steps=3",
    "verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "verl.actor_rollout_ref.model.path=tiny",
]


def _train(out: Path) -> subprocess.Popen[str]:
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
        f"verl.trainer.default_local_dir={out}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _finish(proc: subprocess.Popen[str]) -> str:
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    return output


def _comparable(out: Path) -> list[dict[str, object]]:
    keys = ("step", "train_success", "mean_reward", "policy_loss", "entropy", "tokens", "heldout")
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    return [
        {
            k: (r[k] if k != "heldout" else {"success": r[k]["success"], "mean_reward": r[k]["mean_reward"]})
            for k in keys
            if k in r
        }
        for r in rows
    ]


def test_a_killed_run_resumes_to_the_same_results(tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    model_dir("tiny")  # the tiny model is built (cached) here, not by both runs at once
    uninterrupted, proc = _train(whole), _train(killed)  # side by side: one thread each, nothing else shared
    deadline = time.time() + 600
    while latest_checkpoint(killed) is None and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    first = latest_checkpoint(killed)
    assert first is not None
    output = _finish(uninterrupted)
    assert "step 3/3" in output and "tok/s" in output and "ETA" in output and "held-out" in output
    resumed = _finish(_train(killed))
    if first.name != "step-00003":
        assert f"resumed from {first}" in resumed

    assert _comparable(killed) == _comparable(whole)
    a = torch.load(whole / "step-00003" / "trainer_state.pt", weights_only=False)
    b = torch.load(killed / "step-00003" / "trainer_state.pt", weights_only=False)
    assert a["step"] == b["step"]
    from safetensors.torch import load_file

    wa, wb = (
        load_file(str(whole / "step-00003" / "model.safetensors")),
        load_file(str(killed / "step-00003" / "model.safetensors")),
    )
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    records = [json.loads(ln) for ln in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3] and "by_type" in records[0]["heldout"]
    assert {"tokens_per_s", "episodes_per_s", "kl", "policy_loss", "entropy", "step_groups"} <= set(
        records[1]
    )


def test_arpo_twins_start_from_the_math_python_warm_start() -> None:
    for name in ("math_python_arpo", "math_python_grpo"):
        rl, run = build(load_config(name, []))
        assert run["model"] == "warmstart:math_python" and rl.env == "math-python"


def test_held_out_episodes_never_branch() -> None:
    """ARPO branches training rollouts only: evaluation samples one trajectory per task (its forks
    were sampled and dropped, 15 times the work for the same held-out figure)."""
    from toolgym.core.registry import get_registry
    from toolgym.training.local.loop import eval_engine

    rl, _ = build(load_config("math_python_arpo", []))
    assert rl.engine_config().arpo.enabled
    engine = eval_engine(rl, policy=object(), registry=get_registry(), ev=rl.eval)  # type: ignore[arg-type]
    assert not engine.config.arpo.enabled and engine.config.max_turns == rl.engine_config().max_turns
