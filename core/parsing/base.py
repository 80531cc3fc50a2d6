"""Tool-call parsers: model text → ``Action``. They never raise on model output.

Every parsed call has an id (``ToolCall.id``): the model's own when it wrote one (an ``"id"`` key
in the call's JSON, as Mistral's format has), else :func:`~toolgym.core.types.tool_call_id`. The engine copies it onto
the tool message that answers the call (``tool_call_id``, as in the OpenAI format).

Malformed output (bad JSON, an unknown tool, wrong argument types, an unclosed tag, several calls
where one is allowed) becomes an ``Action`` of kind ``INVALID`` whose ``error`` is written for the
model to read; the environment turns it into an error observation and an invalid step.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from toolgym.core.parsing.common import checked_call, split_thought
from toolgym.core.tools import Tool
from toolgym.core.types import Action, ActionKind, ToolCall, tool_call_id


class ToolParser(ABC):
    """Turns one model output into an Action. Register instances via ``toolgym_tool_parsers``."""

    name: str = ""
    plugin: str = ""
    markers: tuple[str, ...] = ()
    """Strings a chat template of this parser's format contains (all of them): ``--parser auto``
    picks the registered parser whose markers all occur in the model's template, the one with the
    most marker text when several do (see :func:`toolgym.core.parsing.auto.detect_parser`)."""
    function_calls: bool = False
    """Whether the format is a model family's function-calling format (``--parser auto`` replaces
    only such parsers; environment-specific formats such as ``xml`` tags are kept)."""

    @abstractmethod
    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        """Parse ``text``; ``tools`` (name → Tool) enables name and argument checks."""

    def stop_strings(self, tools: Mapping[str, Tool] | None = None) -> tuple[str, ...]:
        """Stop strings sampling should use with this format (none by default)."""
        return ()


class HermesParser(ToolParser):
    """Hermes/Qwen format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks.

    Text without any block is a final answer.
    """

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    markers = ("<tool_call>", "</tool_call>")
    function_calls = True

    def __init__(self, max_calls: int | None = None) -> None:
        self.max_calls = max_calls

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        if self.OPEN not in body:
            if self.CLOSE in body:
                return Action(
                    text,
                    ActionKind.INVALID,
                    error=f"found {self.CLOSE} without a matching {self.OPEN}",
                    thought=thought,
                )
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        calls: list[ToolCall] = []
        pos = 0
        while (start := body.find(self.OPEN, pos)) != -1:
            end = body.find(self.CLOSE, start)
            if end == -1:
                return Action(
                    text,
                    ActionKind.INVALID,
                    error=f"unclosed {self.OPEN}: end each call with {self.CLOSE}",
                    thought=thought,
                )
            raw = body[start + len(self.OPEN) : end]
            call, error = self._parse_one(raw.strip(), len(calls))
            if error is None and call is not None:
                call, error = checked_call(call, tools)
            if error is not None:
                return Action(text, ActionKind.INVALID, error=error, thought=thought)
            assert call is not None
            calls.append(call)
            pos = end + len(self.CLOSE)
        if self.max_calls is not None and len(calls) > self.max_calls:
            return Action(
                text,
                ActionKind.INVALID,
                error=f"{len(calls)} tool calls in one turn; at most {self.max_calls} allowed",
                thought=thought,
            )
        return Action(text, ActionKind.TOOL_CALLS, tool_calls=calls, thought=thought)

    @staticmethod
    def _parse_one(raw: str, index: int) -> tuple[ToolCall | None, str | None]:
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            return None, f"tool call is not valid JSON ({exc.msg} at position {exc.pos})"
        except (RecursionError, ValueError):  # nesting past the interpreter's limit
            return None, "tool call is nested too deeply to parse; give flat JSON arguments"
        if not isinstance(obj, dict):
            return None, 'a tool call must be a JSON object: {"name": ..., "arguments": {...}}'
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, 'tool call is missing "name"'
        args: Any = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return None, f'"arguments" of {name} is a string that is not valid JSON'
            except (RecursionError, ValueError):
                return None, f'"arguments" of {name} are nested too deeply to parse; give flat JSON arguments'
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None, f'"arguments" of {name} must be a JSON object'
        given = obj.get("id")
        call_id = given if isinstance(given, str) and given else tool_call_id(raw, index)
        return ToolCall(name=name, arguments=args, id=call_id, raw=raw), None


class XMLTagParser(ToolParser):
    """Tag actions: ``<python>code</python>``, ``<search>query</search>``, ``<answer>text</answer>``.

    Each tool is called with the tag's body as its one required string argument. One action per
    turn; text outside tags is reasoning.
    """

    name = "xml"

    def __init__(self, answer_tag: str = "answer") -> None:
        self.answer_tag = answer_tag

    def _tags(self, tools: Mapping[str, Tool] | None) -> list[str]:
        return [*(tools or {}), self.answer_tag]

    def stop_strings(self, tools: Mapping[str, Tool] | None = None) -> tuple[str, ...]:
        return tuple(f"</{t}>" for t in self._tags(tools))

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        found: list[tuple[int, str, str]] = []
        for tag in self._tags(tools):
            open_tag, close_tag = f"<{tag}>", f"</{tag}>"
            pos = 0
            while (start := body.find(open_tag, pos)) != -1:
                end = body.find(close_tag, start + len(open_tag))
                if end == -1:
                    return Action(
                        text,
                        ActionKind.INVALID,
                        error=f"unclosed <{tag}>: end it with </{tag}>",
                        thought=thought,
                    )
                found.append((start, tag, body[start + len(open_tag) : end]))
                pos = end + len(close_tag)
        if not found:
            tags = ", ".join(f"<{t}>" for t in self._tags(tools))
            return Action(
                text, ActionKind.INVALID, error=f"no action found: use one of {tags}", thought=thought
            )
        if len(found) > 1:
            return Action(
                text,
                ActionKind.INVALID,
                error=f"{len(found)} actions in one turn; give exactly one",
                thought=thought,
            )
        _, tag, content = found[0]
        if tag == self.answer_tag:
            return Action(text, ActionKind.ANSWER, answer=content.strip(), thought=thought)
        assert tools is not None
        tool = tools[tag]
        required = tool.parameters.get("required") or list(tool.parameters.get("properties", {}))
        if not required:
            args: dict[str, Any] = {}
        else:
            args = {required[0]: content.strip("\n")}
        call = ToolCall(name=tag, arguments=args, id=tool_call_id(f"<{tag}>{content}", 0), raw=content)
        call, error = checked_call(call, tools)
        if error is not None:
            return Action(text, ActionKind.INVALID, error=error, thought=thought)
        return Action(text, ActionKind.TOOL_CALLS, tool_calls=[call], thought=thought)


class EnvActionParser(ToolParser):
    """Environment commands: ``search[red shoes]``, ``click[Buy Now]``, ``go to desk 1``.

    With ``require_tags`` (verl-agent format) the command must sit in ``<action>…</action>``,
    after optional ``<think>…</think>`` reasoning.
    """

    name = "env_action"

    def __init__(self, require_tags: bool = False, max_len: int = 512) -> None:
        self.require_tags = require_tags
        self.max_len = max_len
        if require_tags:
            self.name = "think_action"

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        starts = [m.start() for m in re.finditer(r"<action>", body)]
        if starts:
            if len(starts) > 1:
                return Action(
                    text,
                    ActionKind.INVALID,
                    error="several <action> blocks; give exactly one",
                    thought=thought,
                )
            end = body.find("</action>", starts[0])
            if end == -1:
                return Action(
                    text,
                    ActionKind.INVALID,
                    error="unclosed <action>: end it with </action>",
                    thought=thought,
                )
            command = body[starts[0] + len("<action>") : end].strip()
        elif self.require_tags:
            return Action(text, ActionKind.INVALID, error="no <action>...</action> found", thought=thought)
        else:
            lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip()]
            command = lines[0] if lines else ""
        if not command:
            return Action(text, ActionKind.INVALID, error="empty action", thought=thought)
        if len(command) > self.max_len:
            return Action(
                text,
                ActionKind.INVALID,
                error=f"action longer than {self.max_len} characters",
                thought=thought,
            )
        return Action(text, ActionKind.COMMAND, command=command, thought=thought)
