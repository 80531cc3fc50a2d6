"""Test doubles for the verl bridge tests: environments, a config writer, verl's TransferQueue
worker as a plain class, and an in-memory TransferQueue. Imported after ``importorskip("verl")``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from tensordict import NonTensorStack, TensorDict

from toolgym import Env, EnvSpec, StepResult, hookimpl
from toolgym.core.trajectory import ToolCallRecord, Trajectory
from toolgym.core.types import Action, ActionKind


class WalkEnv(Env):
    """A walk on a line: the action's length mod 3 moves right, left or not at all; an action the
    parser rejects is invalid. Anchors are positions, so states recur across and within episodes;
    the step reward grows with the action's length mod 5, plus 1 for reaching position 2. Three
    steps per episode, so any tiny-model babble makes a usable episode."""

    parser = "env_action"
    max_turns = 3

    def __init__(self) -> None:
        self.pos = 0
        self.n = 0

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.pos, self.n = 0, 0
        return [{"role": "user", "content": f"Walk. Seed {seed}."}], {}

    def anchor(self) -> str:
        return f"pos={self.pos}"

    async def step(self, action: Action) -> StepResult:
        self.n += 1
        text = (action.command or action.text).strip()
        self.pos += 1 if len(text) % 3 == 0 else -1 if len(text) % 3 == 1 else 0
        reward = (len(text) % 5) / 4 + (1.0 if self.pos == 2 else 0.0)
        obs = [{"role": "user", "content": f"You are at {self.pos}."}]
        return StepResult(
            observation=obs,
            reward=reward,
            terminated=self.n >= 3,
            valid=action.kind is not ActionKind.INVALID,
        )


class WindowEnv(WalkEnv):
    """``WalkEnv`` that rebuilds its prompt every turn (a history window): one token sequence per step."""

    def step_prompt(self) -> list[dict[str, Any]] | None:
        return [{"role": "user", "content": f"Walk. You are at {self.pos} after {self.n} steps."}]


class ProbeWalkEnv(WalkEnv):
    """``WalkEnv`` whose every step goes through a (recorded) tool call, so ARPO branches after it."""

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        result.tool_calls = [ToolCallRecord(name="probe", arguments={}, output=f"at {self.pos}")]
        return result


class TestPlugin:
    def __init__(self) -> None:
        self.trajectories: list[Trajectory] = []

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [
            EnvSpec("walk", WalkEnv),
            EnvSpec("walk-window", WindowEnv),
            EnvSpec("probe-walk", ProbeWalkEnv),
        ]

    @hookimpl
    def toolgym_trajectory_done(self, trajectory: Trajectory) -> None:
        self.trajectories.append(trajectory)


TestPlugin.__test__ = False  # type: ignore[attr-defined]


def write_config(
    directory: Path,
    model: Path,
    *,
    env: str = "walk",
    layout: str = "trajectory",
    estimator: str = "gigpo",
    options: dict[str, Any] | None = None,
    group_size: int = 4,
    arpo: dict[str, Any] | None = None,
) -> Path:
    """A small ``toolgym train`` config on the tiny model (CPU-sized lengths)."""
    path = directory / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "toolgym": {
                    "env": env,
                    "layout": layout,
                    "group_size": group_size,
                    "sandbox_backend": "none",
                    "advantage": {"estimator": estimator, "options": options or {}},
                    "engine": {"max_turns": 3, "max_tokens_per_turn": 8},
                    "train": {"num_tasks": 2},
                    "val": {"num_tasks": 2, "first_task": 100},
                    **({"arpo": arpo} if arpo else {}),
                },
                "verl": {
                    "data": {"train_batch_size": 2, "max_prompt_length": 256, "max_response_length": 128},
                    "actor_rollout_ref": {
                        "model": {"path": str(model)},
                        "rollout": {"name": "vllm"},
                        "actor": {"ppo_mini_batch_size": 2},
                    },
                    "trainer": {"n_gpus_per_node": 1, "device": "cpu"},
                },
            }
        )
    )
    return path


def tq_worker_class() -> type:
    """verl's TransferQueue agent-loop worker as a plain class (its Ray actor wrapper removed)."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    return AgentLoopWorkerTQ.__ray_metadata__.modified_class  # type: ignore[attr-defined,no-any-return]


class MemoryTransferQueue:
    """The part of TransferQueue's KV interface verl's agent loop and trainer use, in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.tags: dict[str, dict[str, Any]] = {}

    def _store(self, keys: list[str], fields: TensorDict | None, tags: list[dict[str, Any]] | None) -> None:
        for i, key in enumerate(keys):
            row = self.rows.setdefault(key, {})
            for name in fields.keys() if fields is not None else []:
                value = fields[name]
                if isinstance(value, torch.Tensor):
                    row[name] = value.unbind()[i] if value.is_nested else value[i]
                else:  # a NonTensorStack reads back as tensordict's LinkedList
                    row[name] = (value.tolist() if hasattr(value, "tolist") else list(value))[i]
            if tags is not None:
                self.tags[key] = dict(tags[i])

    async def async_kv_batch_put(
        self,
        keys: list[str],
        fields: TensorDict | None = None,
        tags: list[dict[str, Any]] | None = None,
        partition_id: str = "train",
    ) -> None:
        self._store(list(keys), fields, tags)

    async def async_kv_put(
        self, key: str, partition_id: str = "train", fields: Any = None, tag: dict[str, Any] | None = None
    ) -> None:
        self.tags.setdefault(key, {}).update(tag or {})

    def kv_batch_put(
        self,
        keys: list[str],
        partition_id: str = "train",
        fields: TensorDict | None = None,
        tags: list[dict[str, Any]] | None = None,
    ) -> Any:
        from transfer_queue import KVBatchMeta

        self._store(list(keys), fields, tags)
        return KVBatchMeta(
            keys=list(keys), tags=[self.tags.get(k, {}) for k in keys], partition_id=partition_id
        )

    def kv_batch_get(
        self, keys: list[str], partition_id: str = "train", select_fields: list[str] | str | None = None
    ) -> TensorDict:
        names = (
            [select_fields]
            if isinstance(select_fields, str)
            else list(select_fields or self.rows[keys[0]].keys())
        )
        names = [n for n in names if all(n in self.rows[k] for k in keys)]
        out: dict[str, Any] = {}
        for name in names:
            values = [self.rows[k][name] for k in keys]
            if all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in values):
                out[name] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
            elif all(isinstance(v, torch.Tensor) for v in values):
                out[name] = torch.stack(values)
            else:
                out[name] = NonTensorStack(*values)
        return TensorDict(out, batch_size=[len(keys)])


def synthetic_trajectory(
    tid: str,
    group: str,
    steps: list[tuple[str, float, bool]],
    *,
    window: bool = False,
    parent: Trajectory | None = None,
    share_steps: int = 0,
    seed: int = 0,
) -> Trajectory:
    """A trajectory built by hand: one (anchor, step reward, valid) per step, reward = their sum.

    ``window=False``: one token sequence (prompt, then assistant and tool segments in turn, the
    episode ending on an assistant segment). ``window=True``: one sequence per step (a fresh
    prompt and the step's sampled ids), as a history-window environment records it. With
    ``parent``, the first ``share_steps`` steps (and their tool results) are the parent's tokens,
    and ``branch_point`` is their length: an ARPO branch.
    """
    import random

    from toolgym.core.trajectory import LLMCall, Segment, Step

    rng = random.Random(f"{tid}/{seed}")
    segments: list[Segment] = []
    records: list[Step] = []
    lengths: dict[int, int] = {}

    def add(seq: int, role: str, ids: list[int]) -> int:
        mask = [1 if role == "assistant" else 0] * len(ids)
        logprobs = [round(-rng.uniform(0.01, 3.0), 4) for _ in ids] if role == "assistant" else None
        segments.append(Segment(sequence=seq, role=role, token_ids=ids, loss_mask=mask, logprobs=logprobs))  # type: ignore[arg-type]
        lengths[seq] = lengths.get(seq, 0) + len(ids)
        return len(segments) - 1

    def fresh(n: int) -> list[int]:
        return [rng.randrange(5, 2000) for _ in range(n)]

    if parent is not None:
        shared = 1 + 2 * share_steps  # prompt, then (assistant, tool) per shared step
        for seg in parent.segments[:shared]:
            segments.append(seg.model_copy(deep=True))
            lengths[0] = lengths.get(0, 0) + len(seg.token_ids)
        for i in range(share_steps):
            records.append(parent.steps[i].model_copy(deep=True))
    elif not window:
        add(0, "prompt", fresh(5))
    for i in range(len(records), len(steps)):
        anchor, reward, valid = steps[i]
        seq = i if window else 0
        if window:
            add(seq, "prompt", fresh(4 + i))
        prompt_len = lengths.get(seq, 0)
        k = add(seq, "assistant", fresh(rng.randrange(2, 6)))
        llm = LLMCall(
            sequence=seq, prompt_len=prompt_len, segment=k, completion_tokens=len(segments[k].token_ids)
        )
        records.append(Step(index=i, action=f"a{i}", anchor=anchor, step_reward=reward, valid=valid, llm=llm))
        if not window and i < len(steps) - 1:
            add(seq, "tool", fresh(rng.randrange(1, 4)))
    for i, (anchor, reward, valid) in enumerate(steps):  # shared steps keep their own records
        if i < share_steps and parent is not None:
            continue
        records[i].anchor, records[i].step_reward, records[i].valid = anchor, reward, valid
    branch_point = (
        sum(len(s.token_ids) for s in segments[: 1 + 2 * share_steps]) if parent is not None else None
    )
    return Trajectory(
        trajectory_id=tid,
        group_id=group,
        task="synthetic",
        reward=float(sum(r for _, r, _ in steps)),
        segments=segments,
        steps=records,
        parent_id=parent.trajectory_id if parent is not None else None,
        branch_point=branch_point,
        terminated=True,
    )
