"""A range of task instances of an environment, as both trainers configure it (verl's ``train`` and
``val`` splits, the local trainer's held-out evaluation)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TaskRange(BaseModel):
    """Tasks ``first_task`` .. ``first_task + num_tasks - 1``; task ``i`` uses environment seed ``seed + i``."""

    model_config = ConfigDict(extra="forbid")

    num_tasks: int = Field(64, ge=1)
    first_task: int = Field(0, ge=0)
    seed: int = 0
    """Base environment seed of the range."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Environment options for this range only (``split: test``), over the run's ``env_kwargs``."""

    def indices(self) -> range:
        """The task indices of the range."""
        return range(self.first_task, self.first_task + self.num_tasks)
