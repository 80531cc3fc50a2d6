"""The tool-use task on top of the environment contract: ``Task`` and ``ToolTaskEnv``, a set of
tasks answered with tools, ended by an answer without a call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.env.context import EpisodeContext
from toolgym.core.env.contract import Env, StepResult
from toolgym.core.env.digest import RunningDigest
from toolgym.core.env.draw import split_position
from toolgym.core.errors import ConfigError
from toolgym.core.tools import Tool, ToolOutput
from toolgym.core.trajectory import ToolCallRecord
from toolgym.core.types import Action, ActionKind, Message


@dataclass(slots=True)
class Task:
    """One tool-use task instance: a question, the gold answer, anything the reward needs."""

    id: str
    question: str
    answer: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


class ToolTaskEnv(Env):
    """A set of tasks answered with tools: the episode ends when the model answers without a call.

    Subclasses provide ``tasks`` (or override ``load_task``), ``tools``, ``system_prompt`` and
    ``reward``. Tool calls run one after another in the episode's sandboxes; malformed calls
    become error observations and invalid steps, never exceptions.
    """

    system_prompt: str = (
        "You are a helpful assistant. Use the tools when they help, then give the final answer."
    )
    tasks: Sequence[Task] = ()
    tool_names: Sequence[str] = ()
    """Tools of other plugins, looked up by name in the registry when the episode starts."""
    invalid_observation_role: str = "tool"

    def __init__(self) -> None:
        self.task: Task | None = None
        self._history: list[str] = []
        """Every tool call with its output (``name:arguments:output``) and every invalid action so far."""
        self._state = RunningDigest()
        """Digest of the task and of ``_history``, kept up to date: the GiGPO anchor."""

    def bind(self, ctx: EpisodeContext) -> None:
        super().bind(ctx)
        if self.tool_names:
            if ctx.registry is None:
                raise ConfigError(
                    f"{type(self).__name__} needs the tools {list(self.tool_names)} but no registry was given"
                )
            own = [t for t in self.tools if t.name not in self.tool_names]
            self.tools = [*own, *(ctx.registry.tool(name) for name in self.tool_names)]

    @property
    def num_tasks(self) -> int | None:
        return len(self.tasks) or None

    def load_task(self, seed: int) -> Task:
        if not self.tasks:
            raise ConfigError(f"{type(self).__name__} has no tasks; set `tasks` or override `load_task`")
        return self.tasks[split_position(seed, len(self.tasks))]

    def user_prompt(self, task: Task) -> str:
        return task.question

    def reward(self, task: Task, answer: str) -> float:
        """Score a final answer in [0, 1]. Default: exact string match after stripping."""
        return float(str(answer).strip() == str(task.answer).strip())

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.task = self.load_task(seed)
        self._history = []
        self._state = RunningDigest(self.task.id)
        messages: list[Message] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": self.user_prompt(self.task)})
        return messages, {"task_id": self.task.id}

    def anchor(self) -> str:
        assert self.task is not None
        return self._state.hexdigest()

    def _record(self, event: str) -> None:
        self._history.append(event)
        self._state.add(event)

    async def step(self, action: Action) -> StepResult:
        assert self.task is not None, "reset() first"
        if action.kind is ActionKind.ANSWER:
            answer = action.answer if action.answer is not None else action.text
            reward = self.reward(self.task, answer)
            return StepResult(observation=[], reward=reward, terminated=True, info={"answer": answer})
        if action.kind is ActionKind.INVALID or not action.tool_calls:
            error = action.error or "no tool call and no answer found"
            self._record(f"invalid:{error}")
            return StepResult(
                observation=[{"role": self.invalid_observation_role, "content": f"Error: {error}"}],
                valid=False,
            )
        by_name = {t.name: t for t in self.tools}
        messages: list[Message] = []
        records: list[ToolCallRecord] = []
        for call in action.tool_calls:
            tool = by_name.get(call.name)
            if tool is None:
                out = ToolOutput(
                    f"Error: unknown tool {call.name!r}; available: {', '.join(by_name)}", error=True
                )
            else:
                out = await self.call_tool(tool, call.arguments)
            records.append(
                ToolCallRecord(
                    name=call.name,
                    arguments=call.arguments,
                    output=out.text,
                    error=out.error,
                    duration_s=out.duration_s,
                    files=out.files,
                )
            )
            messages.append({"role": "tool", "name": call.name, "content": out.text})
            self._record(f"{call.name}:{call.arguments}:{out.text}")
        return StepResult(observation=messages, tool_calls=records, valid=all(not r.error for r in records))

    async def call_tool(self, tool: Tool, arguments: dict[str, Any]) -> ToolOutput:
        sandbox = None
        if tool.sandbox is not None:
            sandbox = await self.ctx.sandbox(tool.sandbox)
        return await tool.call(arguments, sandbox=sandbox, ctx=self.ctx)
