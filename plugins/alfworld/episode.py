"""What the built-in ALFWorld and the real-engine adapter share: the episode loop around a text engine.

A subclass supplies the engine (``_start``, ``_act``, ``_oracle``, ``_state``); this class turns it
into a toolgym ``Env``: prompt formats (plain or verl-agent, see ``prompts``), the history window,
command normalisation, rewards, limits, anchors and the scripted action.

Contract of a step: the model's command (lower-cased, spaces collapsed) goes to the engine; if it
was not among the admissible commands the engine answers "Nothing happens.", nothing changes, and
the step is marked invalid (``StepResult.valid=False``). Reward is ``success_reward`` (1 by
default) on the step that achieves the goal (ALFWorld's ``won``), which also terminates the
episode, and 0 otherwise. After ``max_steps`` steps without success the episode is truncated.
Anchors (GiGPO): ``"observation"`` (default, as verl-agent) digests the text of the latest
observation, so states that read the same share an anchor; ``"state"`` digests the full world
state instead, so only truly equal states do.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym import Action, ActionKind, ConfigError, Env, Message, StepResult, digest

from ..prompt_format import PromptFormat, prompt_format_named
from . import text
from .prompts import VerlPrompt, plain_system_prompt, with_admissible
from .text import Dialect

ANCHORS = ("observation", "state")


def as_bool(value: bool | str | int, name: str) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def as_int(value: int | str, name: str, minimum: int = 0) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if out < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {out}")
    return out


EPISODE_ARGS = (
    "prompt",
    "history_length",
    "show_admissible",
    "anchor",
    "max_steps",
    "success_reward",
    "accept_both_dialects",
    "template",
    "first_template",
)


def check_arguments(env: str, episode: Mapping[str, Any], own: tuple[str, ...]) -> None:
    """Reject unknown ``--env-arg`` keys with the list of known ones."""
    unknown = sorted(set(episode) - set(EPISODE_ARGS))
    if unknown:
        raise ConfigError(
            f"unknown argument(s) {', '.join(unknown)} for {env}; known: {', '.join([*own, *EPISODE_ARGS])}"
        )


def read_template(value: str | None) -> str | None:
    """A prompt template given inline, or as ``@path`` to a file holding it."""
    if value is None or not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"template file {path} does not exist; give the template text or @PATH to a file holding it"
        )
    return path.read_text()


def normalize(command: str) -> str:
    """Lower-case and collapse whitespace (verl-agent lower-cases actions too)."""
    return " ".join(command.lower().split())


def other_dialect_forms(command: str) -> list[str]:
    """``put X in/on Y`` ↔ ``move X to Y`` (also ``put X in Y`` / ``put X on Y``)."""
    if command.startswith("move ") and " to " in command:
        obj, _, recep = command[5:].rpartition(" to ")
        return [f"put {obj} in/on {recep}"]
    if command.startswith("put "):
        for sep in (" in/on ", " into ", " in ", " on "):
            if sep in command:
                obj, _, recep = command[4:].partition(sep)
                return [f"move {obj} to {recep}", f"put {obj} in/on {recep}"]
    return []


class AlfworldEpisodeEnv(Env):
    """Base of the ALFWorld environments. Subclasses implement the engine hooks below."""

    parser = "env_action"
    max_turns = 50
    """ALFWorld's usual limit (its configs' ``max_nb_steps_per_episode``)."""

    def warmstart_expert(self) -> Any:
        """The warm start's expert for this episode (:class:`toolgym.plugins.alfworld.expert.AlfworldExpert`)."""
        from .expert import AlfworldExpert

        return AlfworldExpert(self)

    def __init__(
        self,
        *,
        prompt: str = "plain",
        history_length: int | str = 2,
        show_admissible: bool | str = False,
        anchor: str = "observation",
        max_steps: int | str = 50,
        success_reward: float | str = 1.0,
        accept_both_dialects: bool | str = False,
        template: str | None = None,
        first_template: str | None = None,
    ) -> None:
        self.format: PromptFormat = prompt_format_named(prompt, option="prompt")
        if anchor not in ANCHORS:
            raise ConfigError(f"anchor must be one of {', '.join(ANCHORS)}, got {anchor!r}")
        self.prompt = prompt
        self.parser = self.format.parser
        self.verl = VerlPrompt(
            as_int(history_length, "history_length"),
            template=read_template(template),
            first_template=read_template(first_template),
        )
        self.show_admissible = as_bool(show_admissible, "show_admissible")
        self.anchor_mode = anchor
        self.max_steps = as_int(max_steps, "max_steps", minimum=1)
        self.max_turns = self.max_steps
        try:
            self.success_reward = float(success_reward)
        except ValueError:
            raise ConfigError(f"success_reward must be a number, got {success_reward!r}") from None
        self.accept_both_dialects = as_bool(accept_both_dialects, "accept_both_dialects")
        self.task = ""
        self.admissible: list[str] = []
        self.last_observation = ""
        self.history: list[tuple[str, str]] = []
        self.steps = 0
        self.won = False
        self._started = False

    # -- engine hooks --------------------------------------------------------------------------

    @abstractmethod
    async def _start(self, seed: int, options: Mapping[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
        """Begin an episode: (intro observation, admissible commands, info)."""

    @abstractmethod
    async def _act(self, command: str) -> tuple[str, list[str], bool]:
        """Apply a command: (feedback, admissible commands now, won)."""

    @abstractmethod
    def _oracle(self) -> tuple[str, str] | None:
        """(command, reason) that solves the task from here; None when none is known."""

    @abstractmethod
    def _state(self) -> str:
        """Text that differs exactly when states differ (for ``anchor="state"``)."""

    def dialect_hint(self) -> Dialect:
        """The command dialect in play (json_2.1.2 games list ``help``; json_2.1.1 games do not)."""
        return "move" if "help" in self.admissible else "put"

    # -- Env -----------------------------------------------------------------------------------

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        intro, admissible, info = await self._start(seed, options or {})
        self.task = text.task_from_observation(intro) or ""
        self.admissible, self.last_observation = admissible, intro
        self.history, self.steps, self.won, self._started = [], 0, False, True
        info = {**info, "task": self.task}
        return self.format.first_messages(
            system=lambda: plain_system_prompt(self.dialect_hint()),
            observation=lambda: with_admissible(intro, admissible) if self.show_admissible else intro,
            rebuilt=lambda: self.verl.render(
                task=self.task, observation=intro, admissible=admissible, history=[]
            ),
        ), info

    async def step(self, action: Action) -> StepResult:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        if self.won:
            return StepResult(
                observation=self._message(text.NOTHING_HAPPENS),
                terminated=True,
                valid=False,
                info={"won": True},
            )
        command = normalize(action.command) if action.kind is ActionKind.COMMAND and action.command else None
        if command is not None and self.accept_both_dialects and command not in self.admissible:
            command = next((c for c in other_dialect_forms(command) if c in self.admissible), command)
        admissible_before = command is not None and command in self.admissible
        if command is None:
            feedback, admissible, won = text.NOTHING_HAPPENS, self.admissible, False
        else:
            feedback, admissible, won = await self._act(command)
        self.history.append((self.last_observation, command or normalize(action.text)[-30:]))
        self.last_observation, self.admissible = feedback, admissible
        self.steps += 1
        self.won = won
        truncated = not won and self.steps >= self.max_steps
        info: dict[str, Any] = {"won": won, "admissible": admissible_before}
        if truncated:
            info["truncation_reason"] = f"step limit ({self.max_steps}) reached"
        return StepResult(
            observation=self._message(feedback),
            reward=self.success_reward if won else 0.0,
            terminated=won,
            truncated=truncated,
            info=info,
            valid=admissible_before and action.valid,
        )

    def _message(self, feedback: str) -> list[Message]:
        if not self.format.rebuilt and self.show_admissible:
            feedback = with_admissible(feedback, self.admissible)
        return [{"role": "user", "content": feedback}]

    def step_prompt(self) -> list[Message] | None:
        return self.format.step_prompt(
            lambda: self.verl.render(
                task=self.task,
                observation=self.last_observation,
                admissible=self.admissible,
                history=self.history,
            )
        )

    def anchor(self) -> str:
        if not self._started:
            return ""
        if self.anchor_mode == "state":
            return digest("alfworld-state", self._state())
        return digest("alfworld-obs", self.last_observation)

    async def scripted_action(self) -> str | None:
        step = self._oracle()
        if step is None:
            return None
        command, reason = step
        return self.format.scripted_reply(command, reason)
