"""What every tool-call parser shares: the leading thought, the check of a call against the tools,
and the two actions a parse ends in. Parsers import this module and the base, never each other."""

from __future__ import annotations

import re
from collections.abc import Mapping

from toolgym.core.errors import ToolArgumentError
from toolgym.core.tools import Tool
from toolgym.core.types import Action, ActionKind, ToolCall

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def split_thought(text: str) -> tuple[str | None, str]:
    """Pull a leading ``<think>…</think>`` block out of the text: (thought, rest)."""
    m = _THINK.search(text)
    if not m:
        return None, text
    return m.group(1).strip(), (text[: m.start()] + text[m.end() :]).strip()


def check_call(call: ToolCall, tools: Mapping[str, Tool] | None) -> str | None:
    """Why ``call`` fails ``tools`` (an unknown name, arguments its schema refuses), or None."""
    if tools is None:
        return None
    tool = tools.get(call.name)
    if tool is None:
        names = ", ".join(sorted(tools)) or "none"
        return f"unknown tool {call.name!r}; available tools: {names}"
    try:
        tool.validate(call.arguments)
    except ToolArgumentError as exc:
        return str(exc)
    return None


def calls_action(
    text: str, calls: list[ToolCall], tools: Mapping[str, Tool] | None, thought: str | None
) -> Action:
    """The action of parsed ``calls``: ``TOOL_CALLS``, or ``INVALID`` naming the first call that fails its tool's check."""
    for call in calls:
        if (error := check_call(call, tools)) is not None:
            return Action(text, ActionKind.INVALID, error=error, thought=thought)
    return Action(text, ActionKind.TOOL_CALLS, tool_calls=calls, thought=thought)


def invalid_action(text: str, error: str, thought: str | None) -> Action:
    """An ``INVALID`` action whose ``error`` the model reads."""
    return Action(text, ActionKind.INVALID, error=error, thought=thought)
