"""``toolgym train --trainer local``: the config file maps onto the local trainer, runs and resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.runner import build, load_config


def test_verl_keys_map_onto_local_settings() -> None:
    data = load_config(
        "keychain_gigpo",
        [
            "verl.actor_rollout_ref.actor.optim.lr=0.01",
            "toolgym.group_size=4",
            "verl.actor_rollout_ref.actor.use_kl_loss=true",
            "verl.actor_rollout_ref.actor.kl_loss_coef=0.1",
        ],
    )
    rl, run = build(data)
    assert rl.optim.lr == 0.01 and rl.group_size == 4 and rl.estimator == "gigpo"
    assert rl.ppo.kl_coef == 0.1 and rl.ppo.kl_estimator == "k3" and rl.ppo.loss_agg == "seq-mean-token-mean"
    assert rl.eval.env_kwargs == {"split": "test"} and run["model"] == "warmstart:keychain"
    assert rl.optim.weight_decay == 0.0 and (rl.optim.beta1, rl.optim.beta2) == (0.9, 0.999)
    adamw, _ = build(
        load_config(
            "keychain_gigpo",
            [
                "verl.actor_rollout_ref.actor.optim.weight_decay=0.01",
                "verl.actor_rollout_ref.actor.optim.betas=[0.9,0.95]",
            ],
        )
    )
    assert adamw.optim.weight_decay == 0.01 and (adamw.optim.beta1, adamw.optim.beta2) == (0.9, 0.95)
    with pytest.raises(ConfigError, match="betas must be two numbers"):
        build(load_config("keychain_gigpo", ["verl.actor_rollout_ref.actor.optim.betas=[0.9]"]))
    with pytest.raises(ConfigError, match="override"):
        load_config("keychain_gigpo", ["lr=1"])
    with pytest.raises(ConfigError, match="not found"):
        load_config("no_such_config", [])


def test_dry_run_prints_the_composed_settings() -> None:
    result = CliRunner().invoke(
        app, ["train", "--trainer", "local", "--config", "keychain_gigpo", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    body = result.output[result.output.index("{") :]
    assert json.loads(body)["rl"]["env"] == "keychain"


def test_a_short_run_writes_checkpoints_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    common = [
        "train",
        "--trainer",
        "local",
        "--config",
        "keychain_gigpo",
        "verl.data.train_batch_size=2",
        "toolgym.group_size=2",
        "toolgym.val.num_tasks=2",
        "toolgym.engine.max_tokens_per_turn=8",
        "verl.trainer.save_freq=1",
        f"verl.trainer.default_local_dir={out}",
    ]
    first = CliRunner().invoke(app, [*common, "verl.trainer.total_training_steps=1"])
    assert first.exit_code == 0, first.output
    assert (out / "step-00001" / "trainer_state.pt").is_file()
    second = CliRunner().invoke(app, [*common, "verl.trainer.total_training_steps=2"])
    assert second.exit_code == 0, second.output
    assert "resumed from" in second.output and (out / "step-00002").is_dir()
    assert json.loads((out / "step-00002" / "trainer_extra.json").read_text())["next_step"] == 2
    before = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    per_task = before["heldout"]["per_task"]  # each held-out task's outcome, for paired comparisons
    assert sorted(per_task) == ["0", "1"] and all(v in (0.0, 1.0) for v in per_task.values())
    assert sum(per_task.values()) / 2 == before["heldout"]["success"]


def test_every_tiny_family_is_a_model_of_the_local_trainer(tmp_path: Path) -> None:
    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.resolve import TINY
    from toolgym.training.runner import model_dir

    for name, family in TINY.items():
        assert model_dir(name) == ensure_tiny_model(family), name  # type: ignore[arg-type]
    out = tmp_path / "glm"  # a family whose template drops reasoning from history, through one training step
    done = CliRunner().invoke(
        app,
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "keychain_gigpo",
            "verl.actor_rollout_ref.model.path=tiny-glm-4.5",
            "verl.data.train_batch_size=2",
            "toolgym.group_size=2",
            "toolgym.val.num_tasks=2",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.trainer.total_training_steps=1",
            f"verl.trainer.default_local_dir={out}",
        ],
    )
    assert done.exit_code == 0, done.output
    assert json.loads((out / "step-00001" / "trainer_extra.json").read_text())["next_step"] == 1


def test_episode_mean_loss_trains_one_step_from_the_cli(tmp_path: Path) -> None:
    """``loss_agg_mode=episode-mean-token-mean`` reaches the trainer (rows know their episode) and
    an unknown mode fails at build, before any episode runs."""
    mode = "verl.actor_rollout_ref.actor.loss_agg_mode=episode-mean-token-mean"
    rl, _ = build(load_config("alfworld_grpo", [mode]))
    assert rl.ppo.loss_agg == "episode-mean-token-mean"
    with pytest.raises(
        ConfigError,
        match=r"local trainer setting loss_agg: .*'episode-mean-token-mean' \(got 'episode-sum'\)",
    ):
        build(load_config("alfworld_grpo", ["verl.actor_rollout_ref.actor.loss_agg_mode=episode-sum"]))
    out = tmp_path / "run"
    done = CliRunner().invoke(
        app,
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "alfworld_grpo",
            "verl.actor_rollout_ref.model.path=tiny",
            mode,
            "verl.data.train_batch_size=2",
            "toolgym.group_size=2",
            "toolgym.val.num_tasks=2",
            "toolgym.engine.max_turns=3",
            "toolgym.env_kwargs.max_steps=3",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.trainer.total_training_steps=1",
            f"verl.trainer.default_local_dir={out}",
        ],
    )
    assert done.exit_code == 0, done.output
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]


def test_keychain_config_starts_from_the_demos_warm_start() -> None:
    """`train --config keychain_gigpo` on the untrained tiny model sat at 0 % for 27 min: the config
    names the demo's warm start, built once and cached."""
    from toolgym.training.runner import build, demo_warm_start, model_dir

    _, settings = build(load_config("keychain_gigpo", []))
    assert settings["model"] == "warmstart:keychain"
    path = model_dir(settings["model"])
    assert (
        path == demo_warm_start() and (path / "config.json").is_file() and (path.parent / "READY").is_file()
    )


def test_val_before_train_false_skips_the_evaluation_before_rl(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = CliRunner().invoke(
        app,
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "keychain_gigpo",
            "verl.data.train_batch_size=2",
            "toolgym.group_size=2",
            "toolgym.val.num_tasks=2",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.trainer.total_training_steps=1",
            "verl.trainer.test_freq=0",
            "verl.trainer.val_before_train=false",
            f"verl.trainer.default_local_dir={out}",
        ],
    )
    assert done.exit_code == 0, done.output
    assert "before RL" not in done.output
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]
