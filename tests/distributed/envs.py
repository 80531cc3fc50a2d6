"""Environments for the distributed tests, loaded on every Ray actor through the registry factory
``tests.distributed.envs:registry`` (the actors get the repository root on ``PYTHONPATH``).

- ``relay``: every turn the model calls ``lookup``; the episode ends after ``turns`` turns (reward 1).
- ``pyrelay``: the same with ``run_python``, a tool that runs code in the episode's ``python`` sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgym import EnvSpec, StepResult, ToolTaskEnv, hookimpl, tool
from toolgym.core.env.tool_task import Task
from toolgym.core.registry import Registry
from toolgym.core.types import Action, ActionKind

LOOKUP_CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": "capital of France"}}\n</tool_call>'
PYTHON_CALL = '<tool_call>\n{"name": "run_python", "arguments": {"code": "import os; print(6 * 7, os.getuid())"}}\n</tool_call>'


@tool
async def lookup(key: str) -> str:
    """Look a key up in a small table."""
    return f"{key}: Paris"


@tool(sandbox="python")
async def run_python(code: str, *, sandbox: Any) -> str:
    """Run Python code in the episode's sandbox; return what it prints."""
    result = await sandbox.run(["python3", "-c", code], timeout=20)
    return result.stdout + result.stderr


class RelayEnv(ToolTaskEnv):
    """Ends after ``turns`` tool-calling turns with reward 1."""

    tools = [lookup]

    def __init__(self, turns: int = 3) -> None:
        super().__init__()
        self.turns = turns
        self.n = 0

    def load_task(self, seed: int) -> Task:
        return Task(
            id=str(seed), question=f"Relay task {seed}: call the tool {self.turns} times.", answer="done"
        )

    async def reset(self, *, seed: int, options: Mapping[str, Any] | None = None) -> Any:
        self.n = 0
        return await super().reset(seed=seed, options=options)

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        self.n += 1
        if self.n >= self.turns or action.kind is not ActionKind.TOOL_CALLS:
            return StepResult(observation=[], reward=1.0, terminated=True, tool_calls=result.tool_calls)
        return result


class PyRelayEnv(RelayEnv):
    tools = [run_python]


class Plugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("relay", RelayEnv), EnvSpec("pyrelay", PyRelayEnv)]


def registry() -> Registry:
    from toolgym.core.builtin import parsers as builtin
    from toolgym.sandboxes import plugin as sandboxes

    return Registry.load(
        entry_points=False, plugins=[("parsers", builtin), ("sandboxes", sandboxes), ("relay", Plugin())]
    )
