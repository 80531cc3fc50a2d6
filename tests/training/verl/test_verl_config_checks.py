"""Config checks of ``toolgym train`` that verl itself does not make: no deprecated keys in the
shipped examples, ARPO needs the servers' logprobs, and a dry run never reaches for a model hub."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.verl import compose

SHIPPED = sorted(p.stem for p in compose.EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_examples_set_nothing_verl_reports_as_deprecated(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, _ = compose.compose_config(name, data_dir=tmp_path)
    capsys.readouterr()
    compose.check_config(cfg)
    out = capsys.readouterr()
    assert "deprecated" not in (out.out + out.err).lower(), out.out + out.err
    assert cfg.data.val_batch_size is None


def test_arpo_without_server_logprobs_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="calculate_log_probs is false, so ARPO would never branch"):
        compose.compose_config(
            "math_python_arpo",
            ["verl.actor_rollout_ref.rollout.calculate_log_probs=false"],
            data_dir=tmp_path,
        )
    cfg, _ = compose.compose_config("math_python_arpo", data_dir=tmp_path)  # verl's default: true
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    # estimators that do not branch do not need them
    compose.compose_config(
        "webshop_gigpo", ["verl.actor_rollout_ref.rollout.calculate_log_probs=false"], data_dir=tmp_path
    )


def test_vllm_rollouts_must_return_the_sampled_distributions_logprobs(tmp_path: Path) -> None:
    raw = [
        "verl.actor_rollout_ref.rollout.logprobs_mode=raw_logprobs",
        "verl.actor_rollout_ref.rollout.temperature=0.7",
    ]
    with pytest.raises(ConfigError, match=r"logprobs_mode is 'raw_logprobs': at temperature 0\.7"):
        compose.compose_config("webshop_gigpo", raw, data_dir=tmp_path)
    compose.compose_config("webshop_gigpo", raw[:1], data_dir=tmp_path)  # at temperature 1 both modes agree
    cfg, _ = compose.compose_config("webshop_gigpo", data_dir=tmp_path)
    assert cfg.actor_rollout_ref.rollout.logprobs_mode == "processed_logprobs"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuse every IP connection (as a machine without a route to a model hub would), and record it."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(address)
            raise OSError(f"test: no network ({address})")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return attempts


@pytest.mark.parametrize("name", SHIPPED)
def test_a_dry_run_contacts_no_model_hub(name: str, tmp_path: Path, no_network: list[Any]) -> None:
    result = CliRunner().invoke(app, ["train", "--config", name, "--dry-run", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert no_network == []


def test_a_critic_is_refused_in_one_line_before_its_model_is_looked_up(
    tmp_path: Path, no_network: list[Any]
) -> None:
    """verl's config check builds the critic's model config, which resolves the model on a hub."""
    args = ["verl.critic.enable=true", "verl.critic.model.path=Qwen/Qwen2.5-1.5B-Instruct"]
    result = CliRunner().invoke(
        app, ["train", "--config", "alfworld_gigpo", "--dry-run", "--data-dir", str(tmp_path), *args]
    )
    assert isinstance(result.exception, ConfigError), result.output
    message = str(result.exception)
    assert "critic.enable is true but toolgym_gigpo uses no critic" in message and "\n" not in message
    assert no_network == []
