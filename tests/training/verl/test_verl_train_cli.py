"""``toolgym train``: composing verl's config from the shipped examples, overrides, dry runs."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.verl import compose

PUBLISHED = {
    # name: (env, estimator, verl rollout.n, max steps)
    "alfworld_gigpo": ("alfworld-verl", "toolgym_gigpo", 8, 50),
    "webshop_gigpo": ("webshop-verl", "toolgym_gigpo", 8, 15),
    "math_python_arpo": ("math-python", "toolgym_arpo", 1, None),  # ARPO: one call runs the group of 16
    "search_arpo": ("search-qa", "toolgym_arpo", 1, None),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_examples_compose_into_valid_verl_configs(name: str, tmp_path: Path) -> None:
    env, estimator, group, max_steps = PUBLISHED[name]
    cfg, settings = compose.compose_config(name, data_dir=tmp_path)
    compose.check_config(cfg)  # verl's own batch-size arithmetic
    assert (settings.env, cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n) == (
        env,
        estimator,
        group,
    )
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "toolgym"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "toolgym_agent"
    assert cfg.toolgym.env == env and cfg.algorithm.use_kl_in_reward is False
    if estimator == "toolgym_gigpo":
        opts = settings.advantage.options
        assert (opts["gamma"], opts["omega"], settings.layout) == (0.95, 1.0, "step")
        assert settings.env_kwargs["history_length"] == 2 and settings.engine["max_turns"] == max_steps
    else:
        arpo = settings.arpo
        assert arpo is not None
        assert (arpo.global_rollouts, arpo.initial_rollouts, arpo.tau, arpo.beta) == (16, 8, 0.5, 0.2)
    train = pq.read_table(cfg.data.train_files).to_pylist()
    assert len(train) == settings.train.num_tasks
    assert train[3]["agent_name"] == "toolgym_agent" and train[3]["extra_info"]["toolgym_env"] == env
    assert train[3]["extra_info"]["seed"] == settings.train.seed + 3


def test_overrides_and_their_errors(tmp_path: Path) -> None:
    cfg, settings = compose.compose_config(
        "webshop_gigpo",
        [
            "toolgym.group_size=4",
            "verl.trainer.total_training_steps=2",
            "+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
        ],
        data_dir=tmp_path,
    )
    assert cfg.actor_rollout_ref.rollout.n == 4 and settings.group_size == 4
    assert cfg.trainer.total_training_steps == 2
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space == 4
    with pytest.raises(ConfigError, match=r"verl has no setting 'trainer\.totl_epochs'"):
        compose.compose_config("webshop_gigpo", ["verl.trainer.totl_epochs=3"], data_dir=tmp_path)
    with pytest.raises(ConfigError, match="must start with one of toolgym, verl"):
        compose.compose_config("webshop_gigpo", ["trainer.total_epochs=3"], data_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"differs from what toolgym\.group_size implies"):
        compose.compose_config("webshop_gigpo", ["verl.actor_rollout_ref.rollout.n=3"], data_dir=tmp_path)
    with pytest.raises(ConfigError, match="takes no option 'omega'"):
        compose.compose_config("math_python_arpo", ["toolgym.advantage.options.omega=1"], data_dir=tmp_path)
    with pytest.raises(ConfigError, match="not found; give a path or one of the shipped examples"):
        compose.compose_config("nope", data_dir=tmp_path)


def test_dry_run_from_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "train",
            "--config",
            "alfworld_gigpo",
            "--dry-run",
            "--data-dir",
            str(tmp_path),
            "verl.trainer.total_epochs=1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "toolgym_gigpo" in result.output and "trainer_mode: toolgym" in result.output
    assert (tmp_path / "train.parquet").exists() and (tmp_path / "val.parquet").exists()
    result = runner.invoke(
        app,
        [
            "train",
            "--config",
            "alfworld_gigpo",
            "--dry-run",
            "--data-dir",
            str(tmp_path),
            "toolgym.env=no-such-env",
        ],
    )
    assert "unknown environment 'no-such-env'" in str(result.exception)
    # the verl example's hub model, given to the local trainer: one clear error before anything runs (the
    # name alone would pick the local trainer's own alfworld_gigpo config and train for real)
    verl_example = str(compose.EXAMPLES / "alfworld_gigpo.yaml")
    result = runner.invoke(app, ["train", "--config", verl_example, "--trainer", "local", "--dry-run"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", "--config", verl_example, "--trainer", "local"])
    assert "is not a local Hugging Face directory" in str(result.exception)


def test_train_on_a_given_task_file(tmp_path: Path) -> None:
    """`toolgym.train_files` (e.g. from `toolgym export verl`) replaces the generated train range."""
    first, _ = compose.compose_config("webshop_gigpo", data_dir=tmp_path / "a")
    given = str(first.data.train_files)
    cfg, settings = compose.compose_config(
        "webshop_gigpo", [f"toolgym.train_files={given}"], data_dir=tmp_path / "b"
    )
    assert cfg.data.train_files == given and settings.train_files == given
    assert cfg.data.val_files != given  # validation still comes from the val range
    with pytest.raises(ConfigError, match="toolgym export verl"):
        compose.compose_config(
            "webshop_gigpo", [f"toolgym.train_files={tmp_path / 'missing.parquet'}"], data_dir=tmp_path / "c"
        )
