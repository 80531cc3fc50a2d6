"""One composition of the config file for both trainers: the same file, the same override grammar
(OmegaConf dotlist, ``+`` to add, ``${...}`` resolved) and the same one-line errors from
``toolgym train --trainer local`` and ``--trainer verl --dry-run``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.required import need_module
from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.training.config_file import LOCAL_EXAMPLES, VERL_EXAMPLES, compose_file, resolve_config

GOOD = (VERL_EXAMPLES / "keychain_cpu.yaml").read_text()

BAD_FILES = {
    "invalid YAML": "toolgym: {env: keychain\nverl: {}\n",
    "no toolgym section": "verl: {trainer: {device: cpu}}\n",
    "a list, not sections": "- toolgym\n- verl\n",
    "unknown section": GOOD + "optimizer: {lr: 1}\n",
    "interpolation of a missing key": GOOD.replace("device: cpu", "device: ${toolgym.no_such_key}"),
}
BAD_OVERRIDES = {
    "no section": ["lr=1"],
    "no value": ["toolgym.env"],
    "empty key part": ["verl.trainer..device=cpu"],
    "unknown section": ["trainer.total_epochs=3"],
    "unknown section, added": ["+optimizer.lr=1"],
    "value not YAML": ["toolgym.env_kwargs=[1,2"],
    "interpolation of a missing key": ["toolgym.env=${no_such.key}"],
}


def _verl() -> None:
    need_module("verl")
    need_module("transfer_queue")


def _error(trainer: str, config: str, overrides: list[str], tmp_path: Path) -> str:
    """The one-line ConfigError ``toolgym train --trainer TRAINER --dry-run`` ends with."""
    data_dir = ["--data-dir", str(tmp_path / "tasks")] if trainer == "verl" else []
    args = ["train", "--trainer", trainer, "--config", config, "--dry-run", *data_dir, *overrides]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ConfigError), (trainer, result.output, result.exception)
    message = str(result.exception)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_both_trainers_refuse_a_bad_file_with_the_same_message(case: str, tmp_path: Path) -> None:
    _verl()
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_FILES[case])
    local = _error("local", str(path), [], tmp_path)
    assert local == _error("verl", str(path), [], tmp_path)
    assert str(path) in local


@pytest.mark.parametrize("case", sorted(BAD_OVERRIDES))
def test_both_trainers_refuse_a_bad_override_with_the_same_message(case: str, tmp_path: Path) -> None:
    _verl()
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    overrides = BAD_OVERRIDES[case]
    local = _error("local", str(path), overrides, tmp_path)
    assert local == _error("verl", str(path), overrides, tmp_path)
    assert "override" in local or "cannot resolve" in local


BAD_TOOLGYM_VALUES = {
    "unknown key": ["+toolgym.no_such_option=1"],
    "wrong type": ["toolgym.group_size=many"],
    "out of range": ["toolgym.group_size=0"],
}


@pytest.mark.parametrize("case", sorted(BAD_TOOLGYM_VALUES))
def test_both_trainers_refuse_a_bad_toolgym_value_with_the_same_message(case: str, tmp_path: Path) -> None:
    _verl()
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    overrides = BAD_TOOLGYM_VALUES[case]
    local = _error("local", str(path), overrides, tmp_path)
    assert local == _error("verl", str(path), overrides, tmp_path)
    assert local.startswith(("toolgym.", "unknown key toolgym.")), local


def test_both_trainers_name_the_shipped_examples_of_both_folders(tmp_path: Path) -> None:
    _verl()
    local = _error("local", "no_such_config", [], tmp_path)
    assert local == _error("verl", "no_such_config", [], tmp_path)
    assert "keychain_gigpo" in local and "keychain_cpu" in local and "search_arpo" in local


def test_the_errors_say_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    expected = {
        "invalid YAML": "is not valid YAML: expected ',' or '}'",
        "no toolgym section": "needs a `toolgym:` section",
        "unknown section": "has unknown section(s) optimizer; the sections are toolgym, verl, warm_start",
        "interpolation of a missing key": "cannot resolve verl.trainer.device",
    }
    for case, words in expected.items():
        path.write_text(BAD_FILES[case])
        with pytest.raises(ConfigError) as err:
            compose_file(path, examples=LOCAL_EXAMPLES)
        assert words in str(err.value), (case, str(err.value))
    path.write_text(GOOD)
    for overrides, words in (
        (["lr=1"], "is not of the form section.key=value"),
        (["trainer.total_epochs=3"], "must start with one of toolgym, verl, warm_start"),
        (["toolgym.env_kwargs=[1,2"], "has a value that is not valid YAML"),
    ):
        with pytest.raises(ConfigError) as err:
            compose_file(path, overrides, examples=LOCAL_EXAMPLES)
        assert words in str(err.value), (overrides, str(err.value))


def test_a_name_picks_the_calling_trainers_own_example_first() -> None:
    assert resolve_config("alfworld_gigpo", examples=LOCAL_EXAMPLES).parent == LOCAL_EXAMPLES
    assert resolve_config("alfworld_gigpo", examples=VERL_EXAMPLES).parent == VERL_EXAMPLES
    assert resolve_config("keychain_cpu", examples=LOCAL_EXAMPLES).parent == VERL_EXAMPLES  # only there


OVERRIDES = [
    "toolgym.group_size=4",
    "toolgym.env_kwargs={max_hops: 3}",  # a mapping merges into the file's
    "verl.trainer.experiment_name=${toolgym.env}_run",
    "+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=${toolgym.group_size}",
]


def _interpolating_file(tmp_path: Path) -> Path:
    path = tmp_path / "interpolated.yaml"
    path.write_text(GOOD.replace("total_training_steps: 2", "total_training_steps: ${toolgym.group_size}"))
    return path


def test_the_local_trainer_resolves_interpolations_and_merges_mapping_overrides(tmp_path: Path) -> None:
    from toolgym.training.runner import build, load_config

    data = load_config(str(_interpolating_file(tmp_path)), OVERRIDES)
    assert type(data["verl"]) is dict  # plain values from here on
    assert data["verl"]["actor_rollout_ref"]["rollout"]["engine_kwargs"]["vllm"]["swap_space"] == 4
    rl, run = build(data)
    assert rl.steps == 4 and rl.group_size == 4
    assert rl.env_kwargs == {"min_hops": 1, "max_hops": 3}
    assert run["tracking"]["experiment_name"] == "keychain_run"


def test_verl_resolves_interpolations_and_merges_mapping_overrides(tmp_path: Path) -> None:
    _verl()
    from toolgym.training.verl import compose

    cfg, settings = compose.compose_config(
        _interpolating_file(tmp_path), OVERRIDES, data_dir=tmp_path / "tasks"
    )
    assert cfg.trainer.total_training_steps == 4 and cfg.actor_rollout_ref.rollout.n == 4
    assert settings.env_kwargs == {"min_hops": 1, "max_hops": 3}
    assert cfg.trainer.experiment_name == "keychain_run"
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space == 4


def test_verl_leaves_the_warm_start_section_to_the_local_trainer(tmp_path: Path) -> None:
    _verl()
    from toolgym.training.verl import compose

    path = tmp_path / "warm.yaml"
    path.write_text(GOOD + "warm_start: {recipe: alfworld}\n")
    with pytest.raises(ConfigError, match="`warm_start:` section is read by the local trainer only"):
        compose.compose_config(path, data_dir=tmp_path / "tasks")
