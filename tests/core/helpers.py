"""Test plugins: a subprocess ``python`` tool, toy environments, a counting sandbox backend."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any

from toolgym import Action, ActionKind, Env, EnvSpec, StepResult, hookimpl, tool
from toolgym.core.registry import Registry
from toolgym.core.types import ExecResult


@tool(timeout_s=20)
async def python(code: str) -> str:
    """Run Python code in a subprocess and return what it prints."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    return out.decode()


class CountingSandbox:
    def __init__(self, kind: str, n: int) -> None:
        self.id = f"sb{n}"
        self.kind = kind

    async def run(self, cmd: Any, **kw: Any) -> ExecResult:
        return ExecResult(0, "ok", "")


class CountingBackend:
    """Records acquires and releases, to prove every sandbox is given back."""

    name = "counting"

    def __init__(self) -> None:
        self.acquired = 0
        self.released = 0
        self.live = 0
        self.max_live = 0

    async def acquire(self, kind: str, *, episode_id: str = "", labels: Any = None) -> CountingSandbox:
        self.acquired += 1
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        await asyncio.sleep(0)
        return CountingSandbox(kind, self.acquired)

    async def release(self, sandbox: Any, *, broken: bool = False) -> None:
        self.released += 1
        self.live -= 1

    async def aclose(self) -> None:
        pass


class CounterEnv(Env):
    """Counts to a target: the model must answer ``count[N]`` with the next number each turn.

    ``fail_at`` makes step raise (to test error handling); ``needs_sandbox`` takes a sandbox.
    """

    parser = "env_action"
    live = 0
    max_live = 0
    closed = 0

    def __init__(
        self,
        target: int = 3,
        fail_at: int | None = None,
        needs_sandbox: bool = False,
        step_delay: float = 0.0,
    ) -> None:
        self.target, self.fail_at, self.needs_sandbox, self.step_delay = (
            target,
            fail_at,
            needs_sandbox,
            step_delay,
        )
        self.n = 0

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.n = 0
        CounterEnv.live += 1
        CounterEnv.max_live = max(CounterEnv.max_live, CounterEnv.live)
        if self.needs_sandbox:
            await self.ctx.sandbox("python")
        return [
            {"role": "user", "content": f"Count to {self.target}, one count[N] per turn. Seed {seed}."}
        ], {"seed": seed}

    def anchor(self) -> str:
        return f"n={self.n}"

    async def step(self, action: Action) -> StepResult:
        if self.step_delay:
            await asyncio.sleep(self.step_delay)
        if self.fail_at is not None and self.n == self.fail_at:
            raise RuntimeError("environment exploded")
        if action.kind is not ActionKind.COMMAND or action.command != f"count[{self.n + 1}]":
            return StepResult(observation=[{"role": "user", "content": "Nothing happens."}], valid=False)
        self.n += 1
        done = self.n >= self.target
        return StepResult(
            observation=[{"role": "user", "content": f"Now at {self.n}."}],
            reward=1.0 if done else 0.0,
            terminated=done,
        )

    async def scripted_action(self) -> str | None:
        return f"count[{self.n + 1}]"

    async def close(self) -> None:
        CounterEnv.live -= 1
        CounterEnv.closed += 1


class TestPlugin:
    @hookimpl
    def toolgym_tools(self) -> list[Any]:
        return [python]

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("counter", CounterEnv)]


def test_registry() -> Registry:
    """Built-in parsers and QA tasks plus the test plugin; no other installed plugin."""
    from toolgym.core.builtin import parsers as builtin
    from toolgym.plugins.qa import plugin as qa

    return Registry.load(
        entry_points=False, plugins=[("parsers", builtin), ("qa", qa), ("test", TestPlugin())]
    )


test_registry.__test__ = False  # type: ignore[attr-defined]
TestPlugin.__test__ = False  # type: ignore[attr-defined]
