"""Splits: ``validation`` is the published ``eval`` goals under the name every environment uses, and the
goals of validation, test and train are three disjoint sets whatever the seed."""

from __future__ import annotations

import pytest

from toolgym.core.errors import ConfigError
from toolgym.plugins.webshop.env import WebShopEnv
from toolgym.plugins.webshop.goals import split_indices


@pytest.mark.parametrize("num_goals", [2000, 12087])
def test_validation_test_and_train_goal_positions_are_disjoint(num_goals: int) -> None:
    validation, test, train = (set(split_indices(num_goals, s)) for s in ("validation", "test", "train"))
    assert split_indices(num_goals, "validation") == split_indices(num_goals, "eval") == range(500, 1500)
    assert not validation & test and not validation & train and not test & train
    assert validation | test | train == set(range(num_goals))
    with pytest.raises(ConfigError, match="validation"):
        split_indices(num_goals, "dev")


def test_every_seed_of_the_validation_split_plays_a_validation_goal() -> None:
    env = WebShopEnv(split="validation")
    goals = {env.goal_index(seed) for seed in [*range(300), *range(10_000, 10_300), 900_000]}
    assert goals <= set(range(500, 1500)) and len(goals) > 250
    assert [env.goal_index(s) for s in range(96)] == [
        WebShopEnv(split="eval").goal_index(s) for s in range(96)
    ]
