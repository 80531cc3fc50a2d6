"""Prompts: the plain chat format, and the verl-agent format (one user message rebuilt each turn).

The verl-agent format follows verl-agent's WebShop setup field by field: the task (the
instruction), the current page as the texts after the instruction, each in single quotes and
joined by `` [SEP] ``, the admissible actions (``search[<your query>]`` where a search bar is
shown, then ``click[...]`` for every clickable, one per line as ``'action',``), the last
``history_length`` (page, action) pairs as ``[Observation n: '...', Action n: '...']``, and the
request to reason inside ``<think>`` and answer inside ``<action>``. A prompt longer than 13,000
characters drops its history, as verl-agent does. The wording is ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..prompt_format import history_window

PLAIN_SYSTEM = (
    "You are shopping on WebShop, an online store. The page shows an instruction; find the product "
    "that fits it best, choose the options it asks for and buy it.\n"
    "Each turn, answer with exactly one action and nothing else:\n"
    "- search[keywords] searches the store (from any page);\n"
    "- click[text] clicks a button, a product ID or an option value shown on the page.\n"
    "Click[Buy Now] on a product page buys it and ends the task."
)

VERL_INTRO = (
    "You are an expert shopping agent working in the WebShop online store.\nYour task is to: {task}.\n"
)
VERL_FIRST = "Your current observation is: {observation}.\n"
VERL_HISTORY = (
    "Before this step you already took {step_count} step(s). Here are the last {history_length} observations "
    "and the action you took after each: {history}\n"
    "You are now at step {current_step} and your current observation is: {observation}.\n"
)
VERL_ACTIONS = (
    "The admissible actions in the current situation are:\n[\n{actions}\n].\n\n"
    "Now choose one action for this step.\n"
    "First think step by step about the situation and about which admissible action brings you closest to the "
    "shopping goal, and write that reasoning inside <think> </think> tags.\n"
    "Then write the chosen admissible action inside <action> </action> tags."
)
MAX_PROMPT_CHARS = 13000


def admissible_actions(available: dict[str, Any]) -> list[str]:
    """verl-agent's list: a search template where a search bar is shown, then every click."""
    actions = ["search[<your query>]"] if available["has_search_bar"] else []
    actions += [f"click[{c}]" for c in available["clickables"]]
    return actions


def page_after_instruction(text: str, instruction: str) -> str:
    """The page's texts after the instruction, each quoted: ``'Back to Search' [SEP] 'Page 1 ...'``."""
    parts = text.split(" [SEP] ")
    try:
        index = parts.index(instruction)
    except ValueError:
        return text
    return " [SEP] ".join(f"'{p}'" for p in parts[index + 1 :])


@dataclass(frozen=True, slots=True)
class Turn:
    observation: str
    action: str


def verl_prompt(
    task: str, observation: str, actions: Sequence[str], history: Sequence[Turn], history_length: int
) -> str:
    """The whole user message for one verl-agent-format turn (``history``: every earlier turn)."""
    listed = "\n".join(f"'{a}'," for a in actions)
    tail = VERL_ACTIONS.format(actions=listed)
    first = VERL_INTRO.format(task=task) + VERL_FIRST.format(observation=observation) + tail
    if not history or history_length <= 0:
        return first
    lines, shown = history_window([(t.observation, t.action) for t in history], history_length)
    prompt = (
        VERL_INTRO.format(task=task)
        + VERL_HISTORY.format(
            step_count=len(history),
            history_length=shown,
            history=lines,
            current_step=len(history) + 1,
            observation=observation,
        )
        + tail
    )
    return first if len(prompt) > MAX_PROMPT_CHARS else prompt


def plain_observation(observation: str, actions: Sequence[str] | None = None) -> str:
    """The user message of the plain format: the page, then optionally the admissible actions."""
    if not actions:
        return observation
    return f"{observation}\n\nAvailable actions: {', '.join(actions)}"
