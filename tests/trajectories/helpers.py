"""Test plugins and data for the dataset tests.

- ``adder``: a tool task solved with an in-process ``add`` tool (Hermes tool calls, no sandbox);
  each call also saves a small PNG "screenshot" beside the dataset, as GUI tools do.
- ``echo-dup``: a one-turn task whose prompt repeats every 3 task instances (for prompt dedup).
- ``synthetic_trajectory``: a realistic token-faithful trajectory built without an engine.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym import Action, ActionKind, Env, EnvSpec, StepResult, hookimpl, tool
from toolgym.core.env.tool_task import Task, ToolTaskEnv
from toolgym.core.registry import Registry
from toolgym.core.tools import ToolOutput
from toolgym.core.trajectory import LLMCall, Segment, Step, Timings, ToolCallRecord, Trajectory, prompt_digest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = "tests.core.helpers:TestPlugin,tests.trajectories.helpers:DatasetPlugin"
"""``TOOLGYM_PLUGINS`` for subprocesses that need these environments."""


def png(width: int = 48, height: int = 24, rgb: tuple[int, int, int] = (40, 120, 200)) -> bytes:
    """A solid-colour PNG (no imaging library needed)."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


@tool
async def add(a: int, b: int, *, ctx: Any = None) -> ToolOutput:
    """Add two integers and return the sum."""
    files = []
    if ctx is not None and ctx.artifacts_dir:
        shots = Path(ctx.artifacts_dir) / ctx.episode_id
        shots.mkdir(parents=True, exist_ok=True)
        (shots / "screen.png").write_bytes(png())
        files.append(f"artifacts/{ctx.episode_id}/screen.png")  # relative to the dataset directory
    return ToolOutput(str(a + b), files=files)


class AdderEnv(ToolTaskEnv):
    """What is a + b? The scripted policy calls ``add`` once, then answers with its result."""

    system_prompt = "Use the add tool, then give the sum."
    tools = (add,)
    max_turns = 4

    def load_task(self, seed: int) -> Task:
        a, b = 3 + seed % 7, 10 + seed % 5
        return Task(
            id=f"adder-{seed}", question=f"What is {a} + {b}?", answer=str(a + b), metadata={"a": a, "b": b}
        )

    async def scripted_action(self) -> str | None:
        assert self.task is not None
        if not self._history:
            call = {"name": "add", "arguments": {"a": self.task.metadata["a"], "b": self.task.metadata["b"]}}
            return f"Let me add.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return self._history[-1].rsplit(":", 1)[-1]


class EchoDupEnv(Env):
    """Say the word: the prompt depends on ``seed % 3`` only, so task instances repeat."""

    parser = "env_action"

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.word = ["alpha", "beta", "gamma"][seed % 3]
        return [{"role": "user", "content": f"Say {self.word}."}], {}

    async def step(self, action: Action) -> StepResult:
        ok = action.kind is ActionKind.COMMAND and action.command == self.word
        return StepResult(observation=[], reward=float(ok), terminated=True)

    async def scripted_action(self) -> str | None:
        return self.word


class DatasetPlugin:
    @hookimpl
    def toolgym_tools(self) -> list[Any]:
        return [add]

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("adder", AdderEnv), EnvSpec("echo-dup", EchoDupEnv)]


def dataset_registry() -> Registry:
    """Built-in parsers plus the counter environment and these test environments."""
    from tests.core.helpers import TestPlugin
    from toolgym.core.builtin import parsers as builtin

    return Registry.load(
        entry_points=False,
        plugins=[("parsers", builtin), ("test", TestPlugin()), ("dataset", DatasetPlugin())],
    )


def synthetic_trajectory(
    i: int, *, turns: int = 3, tokens_per_turn: int = 40, prompt_tokens: int = 60, env: str = "synthetic"
) -> Trajectory:
    """A token-faithful trajectory with ``turns`` model calls, each followed by a tool result;
    rewards and latencies vary with ``i`` (about one in three succeeds)."""
    segments = [
        Segment(
            role="prompt",
            token_ids=[(i + k) % 1000 for k in range(prompt_tokens)],
            loss_mask=[0] * prompt_tokens,
            text=f"prompt {i}",
        )
    ]
    steps = []
    seq_len = prompt_tokens
    for t in range(turns):
        ids = [(i * 7 + t * 13 + k) % 5000 for k in range(tokens_per_turn)]
        call = LLMCall(
            prompt_len=seq_len,
            prompt_sha256=prompt_digest([tid for s in segments for tid in s.token_ids]),
            segment=len(segments),
            completion_tokens=tokens_per_turn,
            latency_s=0.01 * (1 + t),
        )
        segments.append(
            Segment(
                role="assistant",
                token_ids=ids,
                loss_mask=[1] * tokens_per_turn,
                logprobs=[-0.5] * tokens_per_turn,
                text=f"call {t}",
            )
        )
        seq_len += tokens_per_turn
        obs = [9000 + k for k in range(12)]
        segments.append(Segment(role="tool", token_ids=obs, loss_mask=[0] * len(obs), text=f"result {t}"))
        seq_len += len(obs)
        record = ToolCallRecord(
            name="python",
            arguments={"code": f"print({i}+{t})"},
            output=str(i + t),
            duration_s=0.001 * (1 + (i + t) % 50),
        )
        steps.append(
            Step(
                index=t,
                action=f'<tool_call>{{"name": "python", "arguments": {{"code": "print({i}+{t})"}}}}</tool_call>',
                action_kind="tool_calls",
                observation=str(i + t),
                tool_calls=[record],
                llm=call,
                anchor=f"a{t}",
            )
        )
    reward = 1.0 if i % 3 == 0 else 0.0
    steps[-1].step_reward = reward
    return Trajectory(
        trajectory_id=f"syn{i:07d}",
        group_id=f"{env}/{i // 2}/{i // 2}",
        task=env,
        env=env,
        task_index=i // 2,
        sample_index=i % 2,
        seed=i // 2,
        model="synthetic",
        prompt=[{"role": "user", "content": f"task {i // 2}"}],
        segments=segments,
        steps=steps,
        reward=reward,
        terminated=True,
        timings=Timings(total_s=0.1, llm_s=0.05, tool_s=0.01),
        created_at=1.7e9,
        metadata={"policy": "model"},
    )


DatasetPlugin.__test__ = False  # type: ignore[attr-defined]
