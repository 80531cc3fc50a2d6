"""Live counters of a rollout run, for progress displays and the run's summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from toolgym.core.trajectory import Status, Trajectory


@dataclass
class EngineStats:
    """Live counters for progress displays. Read them; only the engine (or a driver that gathers
    trajectories from several engines) writes them, through :meth:`record`."""

    total: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    reward_sum: float = 0.0
    generated_tokens: int = 0
    turns: int = 0
    started_at: float = field(default_factory=time.perf_counter)
    group_sizes: dict[str, int] = field(default_factory=dict)
    """Finished trajectories per group id (ARPO groups vary in size unless filled to the budget)."""
    count_groups: bool = False
    """Whether :meth:`record` counts ``group_sizes`` (ARPO runs, whose group sizes vary)."""
    forks_refused: int = 0
    """ARPO forks dropped because replaying the parent's actions did not reproduce its recorded
    observations (a tool that is not deterministic; ``toolgym.core.rollout.branching``)."""
    fork_refused_reason: str | None = None
    """The last such fork's reason (where the replay differed)."""

    def turn(self, generated_tokens: int) -> None:
        """One model call has returned ``generated_tokens`` tokens (counted as it happens)."""
        self.turns += 1
        self.generated_tokens += generated_tokens

    def record(self, trajectory: Trajectory, *, turns_counted: bool = False) -> None:
        """One finished episode. ``turns_counted``: its turns were already counted live with
        :meth:`turn` (the engine does); otherwise they are counted here from its steps."""
        self.done += 1
        if not turns_counted:
            self.turns += len(trajectory.steps)
            self.generated_tokens += sum(
                s.llm.completion_tokens for s in trajectory.steps if s.llm is not None
            )
        if self.count_groups:
            self.group_sizes[trajectory.group_id] = self.group_sizes.get(trajectory.group_id, 0) + 1
        if trajectory.status is Status.ERROR:
            self.failed += 1
        else:
            self.reward_sum += trajectory.reward

    @property
    def mean_reward(self) -> float:
        ok = self.done - self.failed
        return self.reward_sum / ok if ok else 0.0

    def group_size_summary(self) -> str | None:
        """``"groups of 16 (min 16, max 16, 8 groups)"``-style line, or None before any group ends."""
        sizes = list(self.group_sizes.values())
        if not sizes:
            return None
        mean = sum(sizes) / len(sizes)
        return f"group size mean {mean:.2f} (min {min(sizes)}, max {max(sizes)}, {len(sizes)} groups)"

    @property
    def tokens_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started_at
        return self.generated_tokens / elapsed if elapsed > 0 else 0.0
