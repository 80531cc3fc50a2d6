"""Tool-call parsers of the families whose calls are XML-like or Python: Qwen3-Coder (``qwen3_coder``),
GLM-4.5 (``glm45``), Llama 4 (``pythonic``). See :mod:`toolgym.core.parsing.families` for the table of
formats; the shared helpers live there too.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from toolgym.core.parsing.base import ToolParser
from toolgym.core.parsing.common import calls_action, invalid_action, split_thought
from toolgym.core.tools import Tool
from toolgym.core.types import Action, ActionKind, ToolCall, tool_call_id

_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)


class Qwen3CoderParser(ToolParser):
    """Qwen3-Coder XML calls: ``<tool_call><function=NAME><parameter=KEY>value</parameter>…
    </function></tool_call>``. A parameter's value is its text less one leading and one trailing
    newline; it is converted by the tool's JSON schema (strings stay as written, numbers, booleans,
    objects and arrays are read as JSON). Without the tool's schema values stay strings."""

    name = "qwen3_coder"
    markers = ("<tool_call>", "<function=", "<parameter=")
    function_calls = True
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        if "<function=" not in body:
            if self.OPEN in body or self.CLOSE in body:
                return invalid_action(text, "a <tool_call> must hold a <function=NAME> block", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        if body.count("<function=") != len(_FUNCTION.findall(body)):
            return invalid_action(text, "unclosed <function=...>: end each call with </function>", thought)
        if body.count(self.OPEN) != body.count(self.CLOSE):
            return invalid_action(text, f"unclosed {self.OPEN}: end each call with {self.CLOSE}", thought)
        calls = []
        for index, m in enumerate(_FUNCTION.finditer(body)):
            name, inner = m.group(1).strip(), m.group(2)
            if not name:
                return invalid_action(text, "<function=> needs the function's name", thought)
            if inner.count("<parameter=") != len(_PARAMETER.findall(inner)):
                return invalid_action(
                    text, f"unclosed <parameter=...> in {name}: end each with </parameter>", thought
                )
            schema = _properties(tools, name)
            args: dict[str, Any] = {}
            for p in _PARAMETER.finditer(inner):
                key, value = p.group(1).strip(), p.group(2)
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                args[key] = _typed(value, schema.get(key))
            calls.append(
                ToolCall(name=name, arguments=args, id=tool_call_id(m.group(0), index), raw=m.group(0))
            )
        return calls_action(text, calls, tools, thought)


def _properties(tools: Mapping[str, Tool] | None, name: str) -> dict[str, Any]:
    tool = (tools or {}).get(name)
    if tool is None:
        return {}
    props = tool.parameters.get("properties") or {}
    return props if isinstance(props, dict) else {}


def _types(spec: Any) -> set[str]:
    """The JSON types a property's schema admits (``type``, or the branches of ``anyOf``/``oneOf``)."""
    if not isinstance(spec, dict):
        return set()
    kind = spec.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    out: set[str] = set()
    for branch in spec.get("anyOf") or spec.get("oneOf") or []:
        out |= _types(branch)
    return out


def _typed(value: str, spec: Any) -> Any:
    kinds = _types(spec) - {"null"}
    if not kinds or kinds == {"string"}:
        return value
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return value  # the tool's argument check reports the wrong type to the model
    if "string" in kinds and isinstance(parsed, str):
        return value  # a string that happens to be JSON-quoted stays as written
    return parsed


_LITERAL_NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


class PythonicParser(ToolParser):
    """Pythonic calls (Llama 4, Llama 3.2's pythonic mode): the reply is a Python list of calls with
    keyword arguments, ``[f(a=1, b="x"), g()]``, optionally inside ``<|python_start|>…<|python_end|>``.
    Values must be literals (strings, numbers, lists, dicts, True/False/None or true/false/null);
    nothing is evaluated. A reply that is not a bracketed list is a final answer."""

    name = "pythonic"
    markers = ("<|header_start|>", "ipython")
    function_calls = True
    START, END = "<|python_start|>", "<|python_end|>"

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        body = body.strip()
        if body.startswith(self.START):
            body = body[len(self.START) :]
            body = body[: -len(self.END)] if body.endswith(self.END) else body
            body = body.strip()
        if not (body.startswith("[") and body.endswith("]") and re.match(r"\[\s*[A-Za-z_][\w.]*\s*\(", body)):
            return Action(text, ActionKind.ANSWER, answer=body, thought=thought)
        try:
            tree = ast.parse(body, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return invalid_action(
                text, f"tool calls are not a valid Python list of calls ({exc.__class__.__name__})", thought
            )
        if not isinstance(tree.body, ast.List):
            return invalid_action(text, "write tool calls as a Python list: [name(key=value, ...)]", thought)
        calls = []
        for index, node in enumerate(tree.body.elts):
            if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
                return invalid_action(
                    text, "each element of the list must be a call: name(key=value, ...)", thought
                )
            if node.args:
                return invalid_action(text, "give arguments by keyword: name(key=value)", thought)
            name = ast.unparse(node.func)
            args: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:
                    return invalid_action(
                        text, "**kwargs is not allowed in a tool call; give each argument by name", thought
                    )
                try:
                    args[kw.arg] = _literal(kw.value)
                except ValueError as exc:
                    return invalid_action(text, f"argument {kw.arg!r} of {name}: {exc}", thought)
            raw = ast.get_source_segment(body, node) or name
            calls.append(ToolCall(name=name, arguments=args, id=tool_call_id(raw, index), raw=raw))
        if not calls:
            return Action(text, ActionKind.ANSWER, answer=body, thought=thought)
        return calls_action(text, calls, tools, thought)


def _literal(node: ast.AST) -> Any:
    if (
        isinstance(node, ast.Constant)
        and not isinstance(node.value, (bytes, complex))
        and node.value is not Ellipsis
    ):
        return node.value
    if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id]
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                raise ValueError("** inside a dict is not a literal")
            key = _literal(k)
            if not isinstance(key, str):
                raise ValueError("dict keys must be strings")
            out[key] = _literal(v)
        return out
    raise ValueError(f"only literal values are allowed, not {ast.unparse(node)[:40]!r}")


_GLM_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_GLM_ROLES = ("<|observation|>", "<|user|>")


class Glm45Parser(ToolParser):
    """GLM-4.5 calls: ``<tool_call>NAME`` then per argument ``<arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>``, then ``</tool_call>``; values are typed by the tool's schema as
    in ``qwen3_coder``. The model ends its turn with the next role token (``<|observation|>`` after
    calls, ``<|user|>`` otherwise), which sampling stops at; it is not part of the answer."""

    name = "glm45"
    markers = ("<tool_call>", "<arg_key>", "<arg_value>")
    function_calls = True

    def stop_strings(self, tools: Mapping[str, Tool] | None = None) -> tuple[str, ...]:
        return _GLM_ROLES

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        for role in _GLM_ROLES:
            body = body[: -len(role)] if body.rstrip().endswith(role) else body
            body = body.rstrip() if body.rstrip().endswith(role) else body
        if "<tool_call>" not in body:
            if "</tool_call>" in body:
                return invalid_action(text, "found </tool_call> without a matching <tool_call>", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        if body.count("<tool_call>") != body.count("</tool_call>"):
            return invalid_action(text, "unclosed <tool_call>: end each call with </tool_call>", thought)
        calls = []
        for index, m in enumerate(_GLM_CALL.finditer(body)):
            inner = m.group(1)
            name = inner.split("<arg_key>", 1)[0].strip()
            if not name or "\n" in name:
                return invalid_action(
                    text, "a call starts with the function's name: <tool_call>NAME", thought
                )
            rest = inner[inner.find("<arg_key>") :] if "<arg_key>" in inner else ""
            if _GLM_ARG.sub("", rest).strip():
                return invalid_action(
                    text,
                    f"the arguments of {name} must be <arg_key>KEY</arg_key><arg_value>VALUE</arg_value> pairs",
                    thought,
                )
            schema = _properties(tools, name)
            args = {k.strip(): _typed(v, schema.get(k.strip())) for k, v in _GLM_ARG.findall(rest)}
            calls.append(
                ToolCall(name=name, arguments=args, id=tool_call_id(m.group(0), index), raw=m.group(0))
            )
        return calls_action(text, calls, tools, thought)
