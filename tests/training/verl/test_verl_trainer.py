"""The ``toolgym`` V1 trainer mode: verl's sync trainer, checked before it starts, and the launch
checks of ``run_training`` that need no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from toolgym.core.errors import ConfigError
from toolgym.training.verl import compose
from toolgym.training.verl.trainer import ToolgymPPOTrainer


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_toolgym_mode_is_verls_sync_trainer(tmp_path: Path) -> None:
    cfg, settings = compose.compose_config("webshop_gigpo", data_dir=tmp_path)
    assert get_trainer_cls(cfg.trainer.v1.trainer_mode) is ToolgymPPOTrainer
    trainer = ToolgymPPOTrainer(cfg)
    assert trainer.trainer_mode == "sync" and trainer.parameter_sync_step == 1
    assert type(trainer.replay_buffer) is ReplayBuffer
    assert trainer.toolgym.advantage.options == settings.advantage.options


def test_settings_the_estimators_cannot_honour_are_refused(tmp_path: Path) -> None:
    cfg, _ = compose.compose_config(
        "webshop_gigpo", ["verl.algorithm.use_kl_in_reward=true"], data_dir=tmp_path
    )
    with pytest.raises(ConfigError, match="use_kl_loss"):
        ToolgymPPOTrainer(cfg)
    cfg, _ = compose.compose_config("webshop_gigpo", data_dir=tmp_path)
    cfg.algorithm.adv_estimator = "toolgym_grpo"
    with pytest.raises(ConfigError, match="make them agree"):
        ToolgymPPOTrainer(cfg)


def test_run_training_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _ = compose.compose_config("alfworld_gigpo", data_dir=tmp_path)
    monkeypatch.setattr(compose, "_missing", lambda module: True)
    with pytest.raises(ConfigError, match="vllm is not installed"):
        compose.run_training(cfg)
