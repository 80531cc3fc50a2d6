"""One task-range model for both trainers: verl's ``train``/``val`` splits and the
local trainer's evaluation are the same ``TaskRange``, with the same seeds and the same checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from toolgym.training.local.config import EvalConfig
from toolgym.training.tasks import TaskRange
from toolgym.training.verl.settings import ToolgymSettings


def test_both_trainers_use_the_one_model() -> None:
    settings = ToolgymSettings(env="adder", val={"num_tasks": 3, "first_task": 7, "seed": 5})
    assert type(settings.train) is TaskRange and type(settings.val) is TaskRange
    assert isinstance(EvalConfig(), TaskRange)
    assert settings.val.indices() == range(7, 10)
    local = EvalConfig(**settings.val.model_dump())
    assert (local.indices(), local.seed, local.env_kwargs) == (range(7, 10), 5, {})


def test_defaults_and_checks() -> None:
    assert (TaskRange().num_tasks, TaskRange().first_task, TaskRange().seed) == (64, 0, 0)
    assert EvalConfig().seed == 1_000_003  # the held-out tasks' own seed
    for bad in ({"num_tasks": 0}, {"first_task": -1}, {"tasks": 3}):
        with pytest.raises(ValidationError):
            TaskRange(**bad)
        with pytest.raises(ValidationError):
            EvalConfig(**bad)
