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
    return checked_call(call, tools)[1]


def checked_call(call: ToolCall, tools: Mapping[str, Tool] | None) -> tuple[ToolCall, str | None]:
    """``check_call``, also giving the call to act on: ``call`` itself, or, once its tool accepted
    the arguments, the same call with arguments that carry their validated values
    (:meth:`~toolgym.core.tools.Tool.check`), so that the tool does not validate them again."""
    if tools is None:
        return call, None
    tool = tools.get(call.name)
    if tool is None:
        names = ", ".join(sorted(tools)) or "none"
        return call, f"unknown tool {call.name!r}; available tools: {names}"
    try:
        arguments = tool.check(call.arguments)
    except ToolArgumentError as exc:
        return call, str(exc)
    if arguments is not call.arguments:
        call = ToolCall(call.name, arguments, call.id, call.raw)
    return call, None


def calls_action(
    text: str, calls: list[ToolCall], tools: Mapping[str, Tool] | None, thought: str | None
) -> Action:
    """The action of parsed ``calls``: ``TOOL_CALLS``, or ``INVALID`` naming the first call that fails its tool's check."""
    checked = []
    for call in calls:
        call, error = checked_call(call, tools)
        if error is not None:
            return Action(text, ActionKind.INVALID, error=error, thought=thought)
        checked.append(call)
    return Action(text, ActionKind.TOOL_CALLS, tool_calls=checked, thought=thought)


def invalid_action(text: str, error: str, thought: str | None) -> Action:
    """An ``INVALID`` action whose ``error`` the model reads."""
    return Action(text, ActionKind.INVALID, error=error, thought=thought)
