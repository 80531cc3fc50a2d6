"""How an ALFWorld episode is shown to a model: a plain chat, or verl-agent's prompt format.

``plain``: one growing conversation. A system message explains the commands, the first user
message is the intro observation, each later user message is the environment's answer; the model
replies with one command per turn (parser ``env_action``).

``verl``: the layout of verl-agent's ALFWorld prompts (Feng et al., 2025, GiGPO). Every turn is
one fresh user message (the environment rebuilds the prompt, so each turn is its own token
sequence) carrying the task, how many steps were taken, a window of the most recent
``history_length`` (observation, action) pairs written ``[Observation k: '...', Action k: '...']``,
the current observation, and the admissible actions as ``'cmd'`` items joined by a newline and a
space (without ``help``). The model reasons in ``<think>…</think>`` and answers in
``<action>…</action>`` (parser ``think_action``). The first turn, or every turn when
``history_length`` is 0, uses the short form without task and history. The wording here is
toolgym's; a run that must match a verl-agent checkpoint's prompt byte for byte passes verl-agent's
own template strings as ``template`` / ``first_template`` (same placeholder names).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..prompt_format import history_window
from .text import Dialect, put_command

VERL_FIRST_TEMPLATE = (
    "You are an expert household agent in ALFWorld, the text version of the ALFRED embodied environment.\n"
    "Your current observation is: {current_observation}\n"
    "Your admissible actions in the current situation are: [{admissible_actions}].\n\n"
    "Now it is your turn to act.\n"
    "First think step by step about the current situation, inside <think> </think> tags.\n"
    "Then choose one admissible action for this step and write it inside <action> </action> tags.\n"
)

VERL_TEMPLATE = (
    "You are an expert household agent in ALFWorld, the text version of the ALFRED embodied environment. "
    "Your task is to: {task_description}\n"
    "You have already taken {step_count} step(s). Your most recent {history_length} observations and the "
    "actions you took after them are: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n"
    "Your admissible actions in the current situation are: [{admissible_actions}].\n\n"
    "Now it is your turn to act.\n"
    "First think step by step about the current situation, inside <think> </think> tags.\n"
    "Then choose one admissible action for this step and write it inside <action> </action> tags.\n"
)


def format_admissible(commands: Sequence[str]) -> str:
    """verl-agent's rendering of the admissible list: quoted, one per line, ``help`` left out."""
    return "\n ".join(f"'{c}'" for c in commands if c != "help")


def format_history(history: Sequence[tuple[str, str]], window: int) -> tuple[str, int]:
    """The last ``window`` (observation, action) pairs, numbered from the episode's start
    (``toolgym.plugins.prompt_format.history_window``, shared with WebShop)."""
    return history_window(history, window)


class VerlPrompt:
    """Builds the per-turn user message of the verl-agent format."""

    def __init__(
        self, history_length: int = 2, *, template: str | None = None, first_template: str | None = None
    ) -> None:
        if history_length < 0:
            raise ValueError(f"history_length must be 0 or more, got {history_length}")
        self.history_length = history_length
        self.template = template or VERL_TEMPLATE
        self.first_template = first_template or VERL_FIRST_TEMPLATE

    def render(
        self, *, task: str, observation: str, admissible: Sequence[str], history: Sequence[tuple[str, str]]
    ) -> str:
        actions = format_admissible(admissible)
        if not history or self.history_length <= 0:
            return self.first_template.format(current_observation=observation, admissible_actions=actions)
        past, shown = format_history(history, self.history_length)
        return self.template.format(
            task_description=task,
            step_count=len(history),
            history_length=shown,
            action_history=past,
            current_step=len(history) + 1,
            current_observation=observation,
            admissible_actions=actions,
        )


def plain_system_prompt(dialect: Dialect) -> str:
    """The system message of the plain format: what the commands are and how to answer."""
    put = put_command(dialect, "OBJECT", "RECEPTACLE")
    extra = "\n- help" if dialect == "move" else ""
    return (
        "You are in a household, acting through text commands (ALFWorld). Each turn, reply with exactly one "
        "command on its own line; the environment then tells you what happened.\n"
        "Commands:\n"
        "- go to RECEPTACLE\n- open RECEPTACLE / close RECEPTACLE\n- take OBJECT from RECEPTACLE\n"
        f"- {put}\n"
        "- heat OBJECT with microwave N / cool OBJECT with fridge N / clean OBJECT with sinkbasin N\n"
        "- use OBJECT (switches a lamp on)\n- slice OBJECT with KNIFE\n"
        f"- examine RECEPTACLE_OR_OBJECT\n- inventory\n- look{extra}\n"
        'Name things exactly as the environment does, number included ("cabinet 3", "apple 1"). '
        'A command that cannot be carried out gets "Nothing happens." and changes nothing.'
    )


def with_admissible(observation: str, commands: Sequence[str]) -> str:
    """An observation followed by the list of admissible commands (plain format, when enabled)."""
    return f"{observation}\nAdmissible commands: {', '.join(c for c in commands if c != 'help')}."
