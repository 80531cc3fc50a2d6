"""``group_size`` is a run option, not an engine setting: the engine never read it.
``EngineConfig(group_size=...)`` still works, with a warning, and its value reaches the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgym.collect.plan import CollectOptions, fingerprint
from toolgym.core.errors import ConfigError
from toolgym.core.rollout.config import EngineConfig


def test_the_engine_settings_have_no_group_size() -> None:
    assert "group_size" not in EngineConfig.model_fields
    assert "group_size" not in EngineConfig().model_dump()
    assert EngineConfig().moved_group_size() is None


def test_the_old_key_warns_and_reaches_the_run(tmp_path: Path) -> None:
    with pytest.warns(
        FutureWarning, match=r"EngineConfig\(group_size=\.\.\.\) is deprecated.*CollectOptions\(group_size"
    ):
        engine = EngineConfig(group_size=3, max_turns=2)
    assert (
        engine.max_turns == 2 and engine.moved_group_size() == 3 and "group_size" not in engine.model_dump()
    )
    opts = CollectOptions(env="adder", out=tmp_path, engine=engine)
    assert opts.group_size == 3 and fingerprint(opts)["group_size"] == 3  # the manifest key stays
    assert CollectOptions(env="adder", out=tmp_path, group_size=3, engine=engine).group_size == 3
    with pytest.warns(FutureWarning):
        assert (
            EngineConfig.model_validate({"group_size": "2"}).moved_group_size() == 2
        )  # a config file's text


def test_the_new_option(tmp_path: Path) -> None:
    assert CollectOptions(env="adder", out=tmp_path).group_size == 1
    assert fingerprint(CollectOptions(env="adder", out=tmp_path, group_size=4))["group_size"] == 4
    with pytest.raises(ConfigError, match="--group-size must be at least 1"):
        CollectOptions(env="adder", out=tmp_path, group_size=0)


def test_given_twice_differently_is_refused(tmp_path: Path) -> None:
    with pytest.warns(FutureWarning):
        engine = EngineConfig(group_size=3)
    with pytest.raises(ConfigError, match="given twice"):
        CollectOptions(env="adder", out=tmp_path, group_size=2, engine=engine)


@pytest.mark.parametrize("bad", [0, -1, "x", 1.5, True])
def test_the_old_key_is_still_checked(bad: object) -> None:
    with (
        pytest.raises(ValueError, match="group_size must be an integer of at least 1"),
        pytest.warns(FutureWarning),
    ):
        EngineConfig(group_size=bad)
