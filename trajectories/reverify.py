"""Re-score stored trajectories with the current environments and reward functions.

For each trajectory: build its environment by name (with the collection's environment options),
``reset`` it with the stored seed, and replay the stored actions: each step's stored model text is
parsed again with the environment's parser (black-box chat turns with structured tool calls are
rebuilt from the stored calls) and passed to ``step``. The rewards the environment gives now are
compared with the stored ``step_reward`` values, the total ``reward`` and ``terminated``.

A trajectory is *changed* when any of those differ (beyond ``tolerance``); a *replay error* when
the environment raised or ended the episode earlier than the stored one did. Observations that
differ are counted but do not make a change by themselves (tools may print timings or addresses).

Streaming: at most ``concurrency`` trajectories are held and replayed at once; the changes are
handed to ``on_change`` as they are found (the CLI writes them to a JSONL file), and the report
keeps the first ``keep`` of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.registry import Registry
from toolgym.core.trajectory import Status, Step, Trajectory
from toolgym.core.types import Action, ActionKind, ToolCall


@dataclass
class Change:
    """How one trajectory scores now compared with what was stored."""

    trajectory_id: str
    env: str
    stored_reward: float
    new_reward: float
    step_changes: list[dict[str, Any]] = field(default_factory=list)
    """``{"index", "stored", "new"}`` for each step whose reward differs."""
    stored_terminated: bool = False
    new_terminated: bool = False
    error: str | None = None
    """Why the replay could not finish (the environment raised, or ended early)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "trajectory_id",
                "env",
                "stored_reward",
                "new_reward",
                "step_changes",
                "stored_terminated",
                "new_terminated",
                "error",
            )
        }


@dataclass
class ReverifyReport:
    checked: int = 0
    changed: int = 0
    """Trajectories whose rewards or termination differ now."""
    replay_errors: int = 0
    skipped: int = 0
    """Errored episodes (no complete record to replay)."""
    observation_mismatches: int = 0
    """Trajectories with at least one observation different from the stored one."""
    parse_mismatches: int = 0
    """Steps whose action parses to another kind than was stored (the parser changed)."""
    stored_reward_sum: float = 0.0
    new_reward_sum: float = 0.0
    by_env: dict[str, dict[str, int]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    """The first ``keep`` changes (all are passed to ``on_change``)."""

    @property
    def unchanged(self) -> int:
        return self.checked - self.changed - self.replay_errors


def _action(step: Step, parser: Any, tools: dict[str, Any], *, structured: bool) -> Action:
    """The step's action, parsed again from its text; for black-box chat turns (``structured``)
    whose calls came as structure rather than text, rebuilt from the stored calls."""
    action: Action = parser.parse(step.action, tools)
    if (
        structured
        and step.action_kind == ActionKind.TOOL_CALLS.value
        and not action.tool_calls
        and step.tool_calls
    ):
        calls = [
            ToolCall(
                name=r.name, arguments=r.arguments if isinstance(r.arguments, dict) else {}, id=f"call_{j}"
            )
            for j, r in enumerate(step.tool_calls)
        ]
        return Action(step.action, ActionKind.TOOL_CALLS, tool_calls=calls)  # a chat API's structured calls
    return action


def _obs_text(observation: Any) -> str:
    return (
        observation
        if isinstance(observation, str)
        else "\n".join(str(m.get("content", "")) for m in observation)
    )


async def replay(
    traj: Trajectory,
    registry: Registry,
    *,
    env_kwargs: dict[str, Any] | None = None,
    sandbox_backend: Any = None,
    step_timeout_s: float = 300.0,
    tolerance: float = 1e-9,
) -> tuple[Change | None, bool, int]:
    """Replay one trajectory; returns (the change or None, observations differ, parse mismatches)."""
    ctx = EpisodeContext(
        episode_id=f"reverify-{traj.trajectory_id}", sandbox_backend=sandbox_backend, registry=registry
    )
    new_rewards: list[float] = []
    obs_differs, parse_mismatches, terminated, error = False, 0, False, None
    env = None
    try:
        env = registry.env(traj.env or traj.task).make(**(env_kwargs or {}))
        env.bind(ctx)
        async with asyncio.timeout(step_timeout_s):
            await env.reset(seed=traj.seed)
        parser = registry.parser(env.parser)
        tools = {t.name: t for t in env.tools}
        for i, step in enumerate(traj.steps):
            action = _action(step, parser, tools, structured=not traj.token_faithful)
            parse_mismatches += action.kind.value != step.action_kind
            async with asyncio.timeout(step_timeout_s):
                result = await env.step(action)
            new_rewards.append(float(result.reward))
            obs_differs |= _obs_text(result.observation) != step.observation
            if result.terminated or result.truncated:
                terminated = result.terminated
                if i + 1 < len(traj.steps):
                    error = f"the environment ends the episode at step {i}, the stored one went on to step {len(traj.steps) - 1}"
                break
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                await env.close()
        await ctx.aclose()
    stored_terminated = traj.terminated
    step_changes = [
        {"index": i, "stored": s.step_reward, "new": new}
        for i, (s, new) in enumerate(zip(traj.steps, new_rewards, strict=False))
        if not math.isclose(s.step_reward, new, rel_tol=0.0, abs_tol=tolerance)
    ]
    new_reward = sum(new_rewards)
    differs = (
        bool(step_changes)
        or not math.isclose(traj.reward, new_reward, rel_tol=0.0, abs_tol=tolerance)
        or (error is None and terminated != stored_terminated)
    )
    if error is None and not differs:
        return None, obs_differs, parse_mismatches
    return (
        Change(
            traj.trajectory_id,
            traj.env or traj.task,
            traj.reward,
            new_reward,
            step_changes,
            stored_terminated,
            terminated,
            error,
        ),
        obs_differs,
        parse_mismatches,
    )


async def reverify(
    trajectories: Iterable[Trajectory],
    registry: Registry,
    *,
    env_kwargs: dict[str, Any] | None = None,
    sandbox_backend: Any = None,
    concurrency: int = 8,
    tolerance: float = 1e-9,
    step_timeout_s: float = 300.0,
    keep: int = 1000,
    on_change: Callable[[Change], None] | None = None,
    on_progress: Callable[[ReverifyReport], None] | None = None,
) -> ReverifyReport:
    """Replay every trajectory (see the module docstring), ``concurrency`` at a time."""
    report = ReverifyReport()
    slots = asyncio.Semaphore(max(1, concurrency))
    running: set[asyncio.Task[None]] = set()

    async def one(traj: Trajectory) -> None:
        try:
            change, obs_differs, parse_mismatches = await replay(
                traj,
                registry,
                env_kwargs=env_kwargs,
                sandbox_backend=sandbox_backend,
                step_timeout_s=step_timeout_s,
                tolerance=tolerance,
            )
        finally:
            slots.release()
        env = traj.env or traj.task
        counts = report.by_env.setdefault(env, {"checked": 0, "changed": 0, "replay_errors": 0})
        report.checked += 1
        counts["checked"] += 1
        report.stored_reward_sum += traj.reward
        report.observation_mismatches += obs_differs
        report.parse_mismatches += parse_mismatches
        if change is None:
            report.new_reward_sum += traj.reward
        else:
            report.new_reward_sum += change.new_reward
            kind = "replay_errors" if change.error else "changed"
            setattr(report, kind, getattr(report, kind) + 1)
            counts[kind] += 1
            if len(report.changes) < keep:
                report.changes.append(change)
            if on_change is not None:
                on_change(change)
        if on_progress is not None:
            on_progress(report)

    try:
        for traj in trajectories:
            if traj.status is Status.ERROR:
                report.skipped += 1
                continue
            await slots.acquire()
            task = asyncio.create_task(one(traj))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)
    finally:
        for task in running:
            task.cancel()
    return report
