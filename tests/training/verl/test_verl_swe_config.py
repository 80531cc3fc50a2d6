"""``swe_grpo``: DeepSWE's published settings reach verl's composed config; the dry run works."""

from __future__ import annotations

from pathlib import Path

from tests.required import need_module

need_module("verl")

from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.training.verl import compose


def test_swe_grpo_composes_with_deepswe_settings(tmp_path: Path) -> None:
    cfg, settings = compose.compose_config("swe_grpo", data_dir=tmp_path)
    compose.check_config(cfg)
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (4096, 32768)
    assert rollout.n == 8 and cfg.data.train_batch_size == 8 and rollout.temperature == 1.0
    assert actor.clip_ratio_high == 0.28 and actor.use_kl_loss is False and actor.entropy_coeff == 0.0
    assert actor.loss_agg_mode == "seq-mean-token-sum"
    assert cfg.algorithm.adv_estimator == "toolgym_grpo" and settings.advantage.options == {"std_norm": False}
    assert settings.env == "swe" and settings.env_kwargs["max_turns"] == 50
    engine = settings.engine_config(max_prompt_len=4096, max_response_len=32768)
    assert (
        engine.max_turns == 50
        and engine.episode_timeout_s == 5400
        and engine.max_tokens_per_trajectory == 36864
    )
    f = settings.filters
    assert (f.overlong, f.turn_limit, f.timeout, f.equal_reward_groups) == ("mask", "mask", "mask", "drop")
    assert cfg.toolgym.filters.overlong == "mask"  # the workers read the composed config's section


def test_swe_grpo_dry_run_and_filter_overrides(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "train",
            "--config",
            "swe_grpo",
            "--dry-run",
            "--data-dir",
            str(tmp_path),
            "toolgym.filters.overlong=drop",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "overlong: drop" in result.output and "toolgym_grpo" in result.output
    result = runner.invoke(
        app,
        [
            "train",
            "--config",
            "swe_grpo",
            "--dry-run",
            "--data-dir",
            str(tmp_path),
            "toolgym.filters.timeout=keep",
        ],
    )
    assert result.exit_code != 0 and "timeout" in str(result.exception)
