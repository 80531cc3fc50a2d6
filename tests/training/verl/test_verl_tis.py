"""``toolgym.tis_cap`` maps onto verl's own token-level truncated importance sampling, and verl's
weights are the local trainer's (min(π_train_old / π_rollout, C))."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

import torch

from toolgym.core.errors import ConfigError
from toolgym.training.local.loss import tis_weights
from toolgym.training.runner import build, load_config
from toolgym.training.verl import compose


def test_off_by_default_leaves_verls_rollout_correction_as_verl_has_it(tmp_path: Path) -> None:
    cfg, settings = compose.compose_config("webshop_gigpo", data_dir=tmp_path)
    assert settings.tis_cap is None
    assert cfg.algorithm.rollout_correction == compose.verl_defaults().algorithm.rollout_correction
    assert cfg.algorithm.rollout_correction.rollout_is is None


def test_tis_cap_sets_verls_token_level_tis_in_decoupled_mode(tmp_path: Path) -> None:
    cfg, _ = compose.compose_config("webshop_gigpo", ["toolgym.tis_cap=2.0"], data_dir=tmp_path)
    corr = cfg.algorithm.rollout_correction
    assert (corr.rollout_is, corr.rollout_is_threshold, corr.bypass_mode) == ("token", 2.0, False)
    assert corr.rollout_rs is None and corr.rollout_is_batch_normalize is False
    compose.check_config(cfg)
    # the same key given to verl directly agrees, so it is accepted
    compose.compose_config(
        "webshop_gigpo",
        ["toolgym.tis_cap=2.0", "verl.algorithm.rollout_correction.rollout_is=token"],
        data_dir=tmp_path,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["verl.actor_rollout_ref.rollout.calculate_log_probs=false"], "no rollout logprobs"),
        (["verl.algorithm.rollout_correction.bypass_mode=true"], "bypass_mode is true"),
        (["verl.algorithm.rollout_correction.rollout_is=sequence"], "disagree"),
        (
            [
                "verl.algorithm.rollout_correction.rollout_is=token",
                "verl.algorithm.rollout_correction.rollout_is_threshold=3.0",
            ],
            "disagree",
        ),
    ],
)
def test_settings_verl_would_ignore_or_contradict_are_refused(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        compose.compose_config("webshop_gigpo", ["toolgym.tis_cap=2.0", *extra], data_dir=tmp_path)


def test_verls_weights_are_the_local_trainers(tmp_path: Path) -> None:
    from verl import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    cfg, _ = compose.compose_config("webshop_gigpo", ["toolgym.tis_cap=2.0"], data_dir=tmp_path)
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=gen) * 3
    rollout = old + torch.randn(4, 6, generator=gen) * 0.8  # ratios from ~0.1 to ~10
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    batch = DataProto.from_dict({"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask})
    out, metrics = compute_rollout_correction_and_add_to_batch(batch, cfg.algorithm.rollout_correction)
    keep = mask.bool()
    ours, stats = tis_weights(old[keep], rollout[keep], 2.0)
    torch.testing.assert_close(out.batch["rollout_is_weights"][keep], ours)
    assert (out.batch["rollout_is_weights"][~keep] == 0).all()
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(
        stats["tis_weight"] / stats["tis_tokens"], rel=1e-5
    )
    assert stats["tis_clipped"] > 0 and stats["tis_ratio_max"] > 2.0


def test_the_local_trainer_reads_the_same_setting(tmp_path: Path) -> None:
    data = load_config("keychain_gigpo", ["toolgym.tis_cap=1.5"])
    rl, _ = build(data)
    assert rl.ppo.tis_cap == 1.5
    assert build(load_config("keychain_gigpo", []))[0].ppo.tis_cap is None
