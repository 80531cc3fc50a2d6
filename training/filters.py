"""Episode filters for RL on long-horizon tool tasks (SWE): which rollouts a step trains on.

SWE RL recipes do not train on every rollout. DeepSWE's "compact filtering" (rLLM,
``agent.overlong_filter``) masks the loss of episodes that hit the context limit, the step limit or
the trajectory timeout, so the policy is not pushed away from long but sound work; DAPO's dynamic
sampling drops groups whose rewards are all equal, which carry no GRPO signal but dilute a
token-mean loss; SkyRL-SWE and DeepSWE leave out episodes whose sandbox failed. Each rollout is
put in one class (:func:`classify`), first match wins:

| class | when |
|---|---|
| ``timeout`` | ``status=error`` and the reason says it timed out (episode or environment timeout) |
| ``sandbox_error`` | ``status=error`` and the reason names a sandbox or Docker failure |
| ``error`` | any other ``status=error`` (model call failed, environment raised) |
| ``untrainable`` | ``status=untrainable`` (not token-faithful, a template rewrote history) |
| ``overlong`` | truncated because the context budget (``max_tokens_per_trajectory``) was used up |
| ``turn_limit`` | truncated by the turn limit (the engine's, or the environment's: SWE autosubmit) |
| ``ok`` | everything else |

and :class:`EpisodeFilters` says what happens to each class:

- ``keep``: trained on as any rollout (only for classes that are trainable: overlong, turn_limit);
- ``mask``: takes part in its group's baseline with its reward, but none of its tokens is trained
  on (DeepSWE's masking);
- ``drop``: left out of the group altogether, as if it had not been sampled.

Errored and untrainable rollouts can only be masked or dropped (their tokens are not sound).
Then, with ``equal_reward_groups: drop``, a group whose remaining rollouts (kept and masked) all
have the same reward is dropped whole. :func:`apply_filters` returns the decisions and the counts
that the trainers log (``filter/<class>`` rollouts, ``filter/equal_reward_groups`` groups,
``filter/masked``, ``filter/dropped``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from toolgym.core.trajectory import Status, Trajectory

Outcome = Literal["ok", "overlong", "turn_limit", "timeout", "sandbox_error", "error", "untrainable"]
OUTCOMES: tuple[str, ...] = (
    "ok",
    "overlong",
    "turn_limit",
    "timeout",
    "sandbox_error",
    "error",
    "untrainable",
)
Action = Literal["keep", "mask", "drop"]
Unsound = Literal["mask", "drop"]

TIMEOUT = re.compile(r"timed out|\bTimeoutError\b|\btimeout\b", re.IGNORECASE)
SANDBOX = re.compile(r"sandbox|docker|container|\bAgentSandbox\b", re.IGNORECASE)
CONTEXT = re.compile(r"context budget|max_tokens_per_trajectory|context (length|limit)", re.IGNORECASE)


def classify(trajectory: Trajectory) -> Outcome:
    """The filter class of ``trajectory`` (see the module docstring)."""
    reason = trajectory.status_reason or ""
    if trajectory.status is Status.ERROR:
        if TIMEOUT.search(reason):
            return "timeout"
        if SANDBOX.search(reason):
            return "sandbox_error"
        return "error"
    if trajectory.status is Status.UNTRAINABLE or not trajectory.token_faithful:
        return "untrainable"
    if trajectory.truncated and not trajectory.terminated:
        return "overlong" if CONTEXT.search(trajectory.truncation_reason or "") else "turn_limit"
    return "ok"


class EpisodeFilters(BaseModel):
    """What a trainer does with each class of rollout. The defaults train on every sound rollout
    and drop unsound ones (toolgym's behaviour without filters); ``swe_grpo`` masks overlong,
    turn-limited and timed-out rollouts and drops equal-reward groups, as DeepSWE and DAPO do."""

    model_config = ConfigDict(extra="forbid")

    overlong: Action = "keep"
    """Rollouts that used up the context budget."""
    turn_limit: Action = "keep"
    """Rollouts stopped by a turn limit (graded or not)."""
    timeout: Unsound = "drop"
    """Rollouts that timed out (episode or environment timeout): ``status=error``."""
    sandbox_error: Unsound = "drop"
    """Rollouts whose sandbox failed: ``status=error``."""
    error: Unsound = "drop"
    """Other failed rollouts (model call, environment)."""
    untrainable: Unsound = "drop"
    """Rollouts that are not token-faithful."""
    equal_reward_groups: Literal["keep", "drop"] = "keep"
    """``drop``: leave out groups whose remaining rollouts all have the same reward (DAPO)."""

    def action(self, outcome: str) -> Action:
        return "keep" if outcome == "ok" else getattr(self, outcome)  # type: ignore[no-any-return]


@dataclass
class FilterResult:
    """Decisions for one batch, in the order of the rollouts given."""

    outcomes: list[str]
    """Each rollout's class."""
    actions: list[Action]
    """Each rollout's fate (an equal-reward group's rollouts are ``drop``)."""
    counts: dict[str, float] = field(default_factory=dict)
    """``filter/<class>`` (rollouts of each non-ok class), ``filter/equal_reward_groups``,
    ``filter/masked``, ``filter/dropped``, ``filter/kept``."""

    def select(self, items: Sequence[Trajectory]) -> tuple[list[Trajectory], list[bool]]:
        """(rollouts that take part in advantages, per rollout: True when its loss is masked)."""
        part = [(t, a == "mask") for t, a in zip(items, self.actions, strict=True) if a != "drop"]
        return [t for t, _ in part], [m for _, m in part]


def apply_filters(trajectories: Sequence[Trajectory], filters: EpisodeFilters) -> FilterResult:
    """Classify ``trajectories`` and decide each one's fate (see the module docstring)."""
    outcomes: list[str] = [classify(t) for t in trajectories]
    return decide(
        outcomes, [t.group_id for t in trajectories], [float(t.reward) for t in trajectories], filters
    )


def decide(
    outcomes: Sequence[str], groups: Sequence[object], rewards: Sequence[float], filters: EpisodeFilters
) -> FilterResult:
    """:func:`apply_filters` on already classified rollouts (the verl trainer has rows, not trajectories)."""
    actions: list[Action] = [filters.action(o) for o in outcomes]
    equal_groups = 0
    if filters.equal_reward_groups == "drop":
        members: dict[object, list[int]] = defaultdict(list)
        for k, g in enumerate(groups):
            if actions[k] != "drop":
                members[g].append(k)
        for idx in members.values():
            if len({round(rewards[k], 9) for k in idx}) == 1:
                equal_groups += 1
                for k in idx:
                    actions[k] = "drop"
    seen = Counter(o for o in outcomes if o != "ok")
    counts: dict[str, float] = {f"filter/{o}": float(seen.get(o, 0)) for o in OUTCOMES if o != "ok"}
    counts["filter/equal_reward_groups"] = float(equal_groups)
    for name in ("masked", "dropped", "kept"):
        counts[f"filter/{name}"] = float(
            sum(1 for a in actions if a == {"masked": "mask", "dropped": "drop", "kept": "keep"}[name])
        )
    return FilterResult(list(outcomes), actions, counts)
