"""The environment contract (one page, Gymnasium-shaped) and the tool-use task on top of it.

An episode: ``reset(seed)`` → the first messages; then, each turn, the engine samples the model,
parses its output into an ``Action`` and calls ``step(action)`` → ``StepResult`` (observation,
reward, terminated, truncated, info). ``terminated`` means the task ended (an answer, a purchase,
a goal reached); ``truncated`` means a limit stopped it. Environments are async because their
steps call sandboxes and servers; a step must never block the event loop for long.

What the engine hands an environment for one episode (sandboxes, ids, resources) is the
``EpisodeContext`` of :mod:`toolgym.core.context`, importable from here too.
"""

from __future__ import annotations

import hashlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .context import EpisodeContext
from .errors import ConfigError
from .sandbox import ImageNeed
from .tools import Tool, ToolOutput
from .trajectory import ToolCallRecord
from .types import Action, ActionKind, Message


@dataclass(slots=True)
class StepResult:
    """What the environment answers to one action."""

    observation: list[Message] | str
    """Messages rendered through the chat template (tool results, user turns), or a string appended
    verbatim inside the model's turn (Search-R1-style ``<information>`` blocks)."""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    valid: bool = True
    """False when the action was malformed or not admissible (GiGPO's invalid-action penalty)."""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)


class Env(ABC):
    """Base class of every environment. Subclasses set ``tools`` and ``parser`` as they need."""

    tools: Sequence[Tool] = ()
    """Tools shown to the model (their schemas go into the chat template)."""
    parser: str = "hermes"
    """Name of the tool-call parser that turns model text into an ``Action``."""
    max_turns: int = 16
    """The environment's own turn limit; the engine's limit, if lower, wins."""
    stop: tuple[str, ...] = ()
    """Extra stop strings for sampling (for XML-tag actions such as ``</python>``)."""

    ctx: EpisodeContext

    def bind(self, ctx: EpisodeContext) -> None:
        """Called by the engine before ``reset``."""
        self.ctx = ctx

    @abstractmethod
    async def reset(self, *, seed: int, options: Mapping[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; return the first messages (system and user) and an info dict.

        Equal seeds give equal episodes: that is what makes a GRPO/GiGPO group.
        """

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Apply the model's action."""

    def anchor(self) -> str:
        """Digest of the current state for GiGPO step grouping. Default: the last observation text."""
        return ""

    def step_prompt(self) -> list[Message] | None:
        """For environments that rebuild the prompt each turn (a history window): the full
        messages for the next model call, which then starts a new token sequence. Default: None,
        one growing conversation."""
        return None

    async def scripted_action(self) -> str | None:
        """A solving action for the current state, as model text (for ``--model scripted``)."""
        return None

    def sandbox_images(self, seeds: Sequence[int]) -> list[ImageNeed]:
        """Container images the episodes of ``seeds`` run in, beyond the sandbox kinds' own (per-task
        images, as SWE-bench's). The engine has the sandbox backend warm them before a batch starts,
        so that a missing one stops the batch with one error instead of failing every episode.
        Must be cheap (no sandbox, no I/O beyond what the constructor loaded). Default: none."""
        return []

    @property
    def num_tasks(self) -> int | None:
        """How many distinct task instances there are (None: unbounded, generated from the seed)."""
        return None

    async def close(self) -> None:
        """Free what ``reset`` took. Sandboxes are released by the engine, not here."""


@dataclass(slots=True)
class EnvSpec:
    """How a plugin registers an environment: a name and a ``"module:Class"`` (or a class/factory)."""

    name: str
    entry: str | type[Env] | Callable[..., Env]
    description: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    plugin: str = ""

    def make(self, **overrides: Any) -> Env:
        factory = self.entry
        if isinstance(factory, str):
            factory = load_object(factory)
        env = factory(**{**self.kwargs, **overrides})
        if not isinstance(env, Env):
            raise ConfigError(f"environment {self.name!r}: {self.entry!r} made a {type(env).__name__}, not an Env")
        return env


def parse_flag(value: bool | str | int | None, name: str, default: bool = True) -> bool:
    """A boolean option given as a bool or as text (``--env-arg sql_sandbox=false``); None or empty → ``default``."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def load_object(path: str) -> Any:
    """Import ``"package.module:Attr"``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{path!r} is not of the form 'package.module:Name'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def digest(*parts: Any) -> str:
    """A short stable digest of text parts, for anchors."""
    return RunningDigest(*parts).hexdigest()


class RunningDigest:
    """``digest(*parts)`` built up part by part: appending costs only the new part."""

    def __init__(self, *parts: Any) -> None:
        self._h = hashlib.blake2b(digest_size=12)
        for part in parts:
            self.add(part)

    def add(self, part: Any) -> None:
        self._h.update(str(part).encode("utf-8", "surrogatepass"))
        self._h.update(b"\x1f")

    def hexdigest(self) -> str:
        return self._h.hexdigest()


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

    system_prompt: str = "You are a helpful assistant. Use the tools when they help, then give the final answer."
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
                raise ConfigError(f"{type(self).__name__} needs the tools {list(self.tool_names)} but no registry was given")
            own = [t for t in self.tools if t.name not in self.tool_names]
            self.tools = [*own, *(ctx.registry.tool(name) for name in self.tool_names)]

    @property
    def num_tasks(self) -> int | None:
        return len(self.tasks) or None

    def load_task(self, seed: int) -> Task:
        if not self.tasks:
            raise ConfigError(f"{type(self).__name__} has no tasks; set `tasks` or override `load_task`")
        return self.tasks[seed % len(self.tasks)]

    def user_prompt(self, task: Task) -> str:
        return task.question

    def reward(self, task: Task, answer: str) -> float:
        """Score a final answer in [0, 1]. Default: exact string match after stripping."""
        return float(str(answer).strip() == str(task.answer).strip())

    async def reset(self, *, seed: int, options: Mapping[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
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
                observation=[{"role": self.invalid_observation_role, "content": f"Error: {error}"}], valid=False
            )
        by_name = {t.name: t for t in self.tools}
        messages: list[Message] = []
        records: list[ToolCallRecord] = []
        for call in action.tool_calls:
            tool = by_name.get(call.name)
            if tool is None:
                out = ToolOutput(f"Error: unknown tool {call.name!r}; available: {', '.join(by_name)}", error=True)
            else:
                out = await self.call_tool(tool, call.arguments)
            records.append(
                ToolCallRecord(
                    name=call.name, arguments=call.arguments, output=out.text, error=out.error,
                    duration_s=out.duration_s, files=out.files,
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
