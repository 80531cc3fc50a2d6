"""The two prompt formats of the built-in text environments (WebShop, ALFWorld), in one place.

``plain``: one growing conversation. A system message explains the commands, then one user
message per observation; the model answers with a bare command (parser ``env_action``).

``verl``: verl-agent's layout (Feng et al., 2025). Each turn is one fresh user message that the
environment rebuilds (task, a window of recent (observation, action) pairs, the current
observation, the admissible actions); the model reasons in ``<think>`` and answers in
``<action>`` (parser ``think_action``). The window is written the same way in every environment
(``history_window``); the rest of the wording belongs to each environment's ``prompts`` module.

An environment keeps one ``PromptFormat`` and asks it for what differs between the two: its
parser, the first messages, the per-turn prompt, and how a scripted (command, reason) is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toolgym import ConfigError, Message


@dataclass(frozen=True, slots=True)
class PromptFormat:
    """One prompt format (see the module docstring); ``PLAIN`` and ``VERL`` are the two."""

    name: str
    parser: str
    """The tool-call parser its replies need."""
    rebuilt: bool
    """Whether every turn is one fresh user message built by the environment (``step_prompt``)."""

    def first_messages(
        self, *, system: Callable[[], str], observation: Callable[[], str], rebuilt: Callable[[], str]
    ) -> list[Message]:
        """The episode's opening messages: ``[system, observation]`` (plain) or ``[rebuilt]`` (verl)."""
        if self.rebuilt:
            return [{"role": "user", "content": rebuilt()}]
        return [{"role": "system", "content": system()}, {"role": "user", "content": observation()}]

    def step_prompt(self, rebuilt: Callable[[], str]) -> list[Message] | None:
        """The prompt that replaces the conversation this turn (verl); None: the conversation goes on."""
        return [{"role": "user", "content": rebuilt()}] if self.rebuilt else None

    def scripted_reply(self, command: str, reason: str) -> str:
        """What the model would write for ``command``: the command itself, or think + action tags."""
        return f"<think>{reason}</think>\n<action>{command}</action>" if self.rebuilt else command


PLAIN = PromptFormat("plain", "env_action", rebuilt=False)
VERL = PromptFormat("verl", "think_action", rebuilt=True)
FORMATS = {f.name: f for f in (PLAIN, VERL)}


def prompt_format_named(name: str, *, option: str = "prompt_format") -> PromptFormat:
    """The format called ``name``; a ``ConfigError`` naming ``option`` (the environment's keyword) otherwise."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"{option} must be one of {', '.join(FORMATS)}, got {name!r}") from None


def history_window(history: Sequence[tuple[str, str]], window: int) -> tuple[str, int]:
    """The last ``window`` (observation, action) pairs as verl-agent writes them, one per line,
    ``[Observation k: '...', Action k: '...']`` numbered from the episode's start; and how many."""
    recent = list(history)[-window:] if window > 0 else []
    first = len(history) - len(recent) + 1
    text = "\n".join(
        f"[Observation {first + k}: '{obs}', Action {first + k}: '{act}']"
        for k, (obs, act) in enumerate(recent)
    )
    return text, len(recent)
