"""Tool-call parsers of the model families people train with RL, beside ``hermes`` (Qwen2.5/Qwen3).

Each parser reads the format its family's chat template writes (toolgym's templates in
``core/llm/templates`` render a message's ``tool_calls`` exactly so, and property tests check
that every rendered call parses back to itself). Names follow vLLM's tool parsers:

| parser | families | a call looks like |
|---|---|---|
| ``llama3_json`` | Llama 3.1 / 3.2 | ``{"name": "f", "parameters": {...}}`` (optionally after ``<|python_tag|>``; several joined by ``;``) |
| ``mistral`` | Mistral (Nemo, Small, Large) | ``[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcdefghi"}]``, or ``[TOOL_CALLS]f[ARGS]{...}`` |
| ``qwen3_coder`` | Qwen3-Coder | ``<tool_call>\\n<function=f>\\n<parameter=k>\\nvalue\\n</parameter>\\n</function>\\n</tool_call>`` |
| ``pythonic`` | Llama 4 (and Llama 3.2's pythonic mode) | ``[f(k="v", n=3), g()]`` (optionally in ``<|python_start|>…<|python_end|>``) |
| ``kimi_k2`` | Kimi-K2 | ``<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`` |
| ``harmony`` | gpt-oss | ``<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>`` (reasoning on the ``analysis`` channel, the answer on ``final``) |
| ``glm45`` | GLM-4.5 | ``<tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>`` |
| ``deepseek_v31`` | DeepSeek-V3.1 | ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`` |

Like every toolgym parser they never raise on model output: malformed calls become ``INVALID``
actions whose error the model can read; text with no call is a final answer.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from .parsers import ToolParser, check_call, split_thought
from .tools import Tool
from .types import Action, ActionKind, ToolCall, tool_call_id


def _calls_action(text: str, calls: list[ToolCall], tools: Mapping[str, Tool] | None, thought: str | None) -> Action:
    for call in calls:
        if (error := check_call(call, tools)) is not None:
            return Action(text, ActionKind.INVALID, error=error, thought=thought)
    return Action(text, ActionKind.TOOL_CALLS, tool_calls=calls, thought=thought)


def _invalid(text: str, error: str, thought: str | None) -> Action:
    return Action(text, ActionKind.INVALID, error=error, thought=thought)


def _json_objects(body: str, separator: str) -> tuple[list[tuple[Any, str]], str | None]:
    """Consecutive JSON values in ``body``, separated by ``separator`` (and whitespace):
    [(value, raw text)], or an error sentence."""
    decoder = json.JSONDecoder()
    out: list[tuple[Any, str]] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        try:
            value, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as exc:
            return out, f"tool call is not valid JSON ({exc.msg} at position {exc.pos})"
        except (RecursionError, ValueError):
            return out, "tool call is nested too deeply to parse; give flat JSON arguments"
        out.append((value, body[pos:end]))
        pos = end
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return out, None
        if not body.startswith(separator, pos):
            return out, f"unexpected text after a tool call: {body[pos:pos + 20]!r}"
        pos += len(separator)


def _call_from_object(obj: Any, raw: str, index: int, args_keys: tuple[str, ...]) -> tuple[ToolCall | None, str | None]:
    if not isinstance(obj, dict):
        return None, 'a tool call must be a JSON object with "name" and its arguments'
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None, 'tool call is missing "name"'
    args: Any = {}
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError, ValueError):
            return None, f"the arguments of {name} are a string that is not valid JSON"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"the arguments of {name} must be a JSON object"
    given = obj.get("id")
    call_id = given if isinstance(given, str) and given else tool_call_id(raw, index)
    return ToolCall(name=name, arguments=args, id=call_id, raw=raw), None


class Llama3JsonParser(ToolParser):
    """Llama 3.1/3.2 JSON calls: the whole reply is ``{"name": ..., "parameters": {...}}`` (after an
    optional ``<|python_tag|>``); several calls are joined by ``;``. A reply that does not start with
    ``{`` is a final answer; one that does but is not a call is invalid."""

    name = "llama3_json"
    markers = ("<|start_header_id|>", "ipython")
    function_calls = True
    TAG = "<|python_tag|>"

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        body = body.strip()
        if body.startswith(self.TAG):
            body = body[len(self.TAG):].strip()
        if not body.startswith("{"):
            return Action(text, ActionKind.ANSWER, answer=body, thought=thought)
        objects, error = _json_objects(body, ";")
        if error is not None:
            return _invalid(text, error, thought)
        calls = []
        for index, (obj, raw) in enumerate(objects):
            call, error = _call_from_object(obj, raw, index, ("parameters", "arguments"))
            if error is not None or call is None:
                return _invalid(text, error or "bad call", thought)
            calls.append(call)
        return _calls_action(text, calls, tools, thought)


class MistralParser(ToolParser):
    """Mistral calls after ``[TOOL_CALLS]``: a JSON list of ``{"name", "arguments", "id"}`` objects
    (v3 tokenizers), or ``NAME[ARGS]{json}`` per call (v11+ tokenizers, one ``[TOOL_CALLS]`` each).
    Text before the first ``[TOOL_CALLS]`` is reasoning; a reply without it is a final answer."""

    name = "mistral"
    markers = ("[TOOL_CALLS]",)
    function_calls = True
    TAG, ARGS = "[TOOL_CALLS]", "[ARGS]"

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        start = body.find(self.TAG)
        if start == -1:
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        before = body[:start].strip()
        thought = "\n".join(t for t in (thought, before) if t) or None
        parts = [p.strip() for p in body[start:].split(self.TAG)[1:]]
        calls: list[ToolCall] = []
        for part in parts:
            if not part:
                return _invalid(text, f"empty {self.TAG}: follow it with the calls", thought)
            if part.startswith("["):
                objects, error = _json_objects(part, ",")
                if error is None and (len(objects) != 1 or not isinstance(objects[0][0], list)):
                    error = f"{self.TAG} must be followed by one JSON list of calls"
                if error is not None:
                    return _invalid(text, error, thought)
                for obj in objects[0][0]:
                    raw = json.dumps(obj, ensure_ascii=False)
                    call, error = _call_from_object(obj, raw, len(calls), ("arguments", "parameters"))
                    if error is not None or call is None:
                        return _invalid(text, error or "bad call", thought)
                    calls.append(call)
            elif self.ARGS in part:
                name, _, args_text = part.partition(self.ARGS)
                objects, error = _json_objects(args_text, ",")
                if error is None and len(objects) != 1:
                    error = f"{self.ARGS} must be followed by one JSON object"
                if error is not None:
                    return _invalid(text, error, thought)
                call, error = _call_from_object({"name": name.strip(), "arguments": objects[0][0]}, part, len(calls), ("arguments",))
                if error is not None or call is None:
                    return _invalid(text, error or "bad call", thought)
                calls.append(call)
            else:
                return _invalid(text, f'{self.TAG} must be followed by a JSON list [{{"name": ..., "arguments": {{...}}}}]', thought)
        if not calls:
            return _invalid(text, f"{self.TAG} with an empty list of calls", thought)
        return _calls_action(text, calls, tools, thought)


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
                return _invalid(text, "a <tool_call> must hold a <function=NAME> block", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        if body.count("<function=") != len(_FUNCTION.findall(body)):
            return _invalid(text, "unclosed <function=...>: end each call with </function>", thought)
        if body.count(self.OPEN) != body.count(self.CLOSE):
            return _invalid(text, f"unclosed {self.OPEN}: end each call with {self.CLOSE}", thought)
        calls = []
        for index, m in enumerate(_FUNCTION.finditer(body)):
            name, inner = m.group(1).strip(), m.group(2)
            if not name:
                return _invalid(text, "<function=> needs the function's name", thought)
            if inner.count("<parameter=") != len(_PARAMETER.findall(inner)):
                return _invalid(text, f"unclosed <parameter=...> in {name}: end each with </parameter>", thought)
            schema = _properties(tools, name)
            args: dict[str, Any] = {}
            for p in _PARAMETER.finditer(inner):
                key, value = p.group(1).strip(), p.group(2)
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                args[key] = _typed(value, schema.get(key))
            calls.append(ToolCall(name=name, arguments=args, id=tool_call_id(m.group(0), index), raw=m.group(0)))
        return _calls_action(text, calls, tools, thought)


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
    for branch in (spec.get("anyOf") or spec.get("oneOf") or []):
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
            body = body[len(self.START):]
            body = body[: -len(self.END)] if body.endswith(self.END) else body
            body = body.strip()
        if not (body.startswith("[") and body.endswith("]") and re.match(r"\[\s*[A-Za-z_][\w.]*\s*\(", body)):
            return Action(text, ActionKind.ANSWER, answer=body, thought=thought)
        try:
            tree = ast.parse(body, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return _invalid(text, f"tool calls are not a valid Python list of calls ({exc.__class__.__name__})", thought)
        if not isinstance(tree.body, ast.List):
            return _invalid(text, "write tool calls as a Python list: [name(key=value, ...)]", thought)
        calls = []
        for index, node in enumerate(tree.body.elts):
            if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
                return _invalid(text, "each element of the list must be a call: name(key=value, ...)", thought)
            if node.args:
                return _invalid(text, "give arguments by keyword: name(key=value)", thought)
            name = ast.unparse(node.func)
            args: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:
                    return _invalid(text, "**kwargs is not allowed in a tool call; give each argument by name", thought)
                try:
                    args[kw.arg] = _literal(kw.value)
                except ValueError as exc:
                    return _invalid(text, f"argument {kw.arg!r} of {name}: {exc}", thought)
            raw = ast.get_source_segment(body, node) or name
            calls.append(ToolCall(name=name, arguments=args, id=tool_call_id(raw, index), raw=raw))
        if not calls:
            return Action(text, ActionKind.ANSWER, answer=body, thought=thought)
        return _calls_action(text, calls, tools, thought)


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and not isinstance(node.value, (bytes, complex)) and node.value is not Ellipsis:
        return node.value
    if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
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


class DeepSeekV31Parser(ToolParser):
    """DeepSeek-V3.1 calls: ``<｜tool▁calls▁begin｜>`` then, per call,
    ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``, then ``<｜tool▁calls▁end｜>``.
    Text before the calls is reasoning; a reply without them is a final answer."""

    name = "deepseek_v31"
    CALLS, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    CALL, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
    markers = (CALLS, SEP)
    function_calls = True

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        start = body.find(self.CALLS)
        if start == -1:
            if self.CALL in body:
                return _invalid(text, f"a call must sit inside {self.CALLS}…{self.CALLS_END}", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        thought = "\n".join(t for t in (thought, body[:start].strip()) if t) or None
        end = body.find(self.CALLS_END, start)
        if end == -1:
            return _invalid(text, f"unclosed {self.CALLS}: end the calls with {self.CALLS_END}", thought)
        inner = body[start + len(self.CALLS):end]
        calls: list[ToolCall] = []
        pos = 0
        while (begin := inner.find(self.CALL, pos)) != -1:
            if inner[pos:begin].strip():
                return _invalid(text, f"unexpected text between calls: {inner[pos:begin][:20]!r}", thought)
            stop = inner.find(self.CALL_END, begin)
            if stop == -1:
                return _invalid(text, f"unclosed {self.CALL}: end each call with {self.CALL_END}", thought)
            raw = inner[begin + len(self.CALL):stop]
            name, sep, args_text = raw.partition(self.SEP)
            if not sep:
                return _invalid(text, f"a call is NAME{self.SEP}{{json arguments}}", thought)
            objects, error = _json_objects(args_text, ",")
            if error is None and len(objects) != 1:
                error = "the arguments must be one JSON object"
            if error is not None:
                return _invalid(text, error, thought)
            call, error = _call_from_object({"name": name.strip(), "arguments": objects[0][0]}, raw, len(calls), ("arguments",))
            if error is not None or call is None:
                return _invalid(text, error or "bad call", thought)
            calls.append(call)
            pos = stop + len(self.CALL_END)
        if inner[pos:].strip() or not calls:
            return _invalid(text, f"{self.CALLS} must hold one or more {self.CALL}…{self.CALL_END} calls and nothing else", thought)
        return _calls_action(text, calls, tools, thought)


_KIMI_CALL = re.compile(r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.DOTALL)


class KimiK2Parser(ToolParser):
    """Kimi-K2 calls: ``<|tool_calls_section_begin|>`` then, per call, ``<|tool_call_begin|>`` and the
    call id ``functions.NAME:INDEX``, ``<|tool_call_argument_begin|>{json}<|tool_call_end|>``, then
    ``<|tool_calls_section_end|>``. The id names the function and is kept as the call's id (the
    result's turn quotes it). Text before the section is reasoning; without it, a final answer."""

    name = "kimi_k2"
    SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    markers = (SECTION, "<|tool_call_argument_begin|>")
    function_calls = True

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        thought, body = split_thought(text)
        start = body.find(self.SECTION)
        if start == -1:
            if "<|tool_call_begin|>" in body:
                return _invalid(text, f"calls must sit inside {self.SECTION}…{self.SECTION_END}", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        thought = "\n".join(t for t in (thought, body[:start].strip()) if t) or None
        end = body.find(self.SECTION_END, start)
        if end == -1:
            return _invalid(text, f"unclosed {self.SECTION}: end the calls with {self.SECTION_END}", thought)
        inner = body[start + len(self.SECTION):end]
        matches = list(_KIMI_CALL.finditer(inner))
        if not matches or _KIMI_CALL.sub("", inner).strip():
            return _invalid(text, "write each call as <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|>", thought)
        calls: list[ToolCall] = []
        for m in matches:
            call_id = m.group(1).strip()
            name = call_id.split(":", 1)[0]
            name = name[len("functions."):] if name.startswith("functions.") else name
            objects, error = _json_objects(m.group(2), ",")
            if error is None and len(objects) != 1:
                error = "the arguments must be one JSON object"
            if error is not None:
                return _invalid(text, error, thought)
            call, error = _call_from_object({"name": name, "arguments": objects[0][0], "id": call_id}, m.group(0), len(calls), ("arguments",))
            if error is not None or call is None:
                return _invalid(text, error or "bad call", thought)
            calls.append(call)
        return _calls_action(text, calls, tools, thought)


_HARMONY_ENDS = ("<|end|>", "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


class HarmonyParser(ToolParser):
    """gpt-oss (harmony) output: messages ``[<|start|>assistant]<|channel|>C[ to=functions.NAME]
    [<|constrain|>json]<|message|>BODY`` ended by ``<|end|>``, ``<|call|>`` or ``<|return|>``. Messages
    addressed ``to=functions.NAME`` are calls (the body is the JSON arguments); otherwise the
    ``final`` channel's body is the answer; ``analysis`` bodies are reasoning. Text with no harmony
    message at all is taken as the answer. Sampling stops at ``<|call|>`` (vLLM calls this parser
    ``openai``)."""

    name = "harmony"
    markers = ("<|channel|>", "<|message|>", "<|call|>")
    function_calls = True

    def stop_strings(self, tools: Mapping[str, Tool] | None = None) -> tuple[str, ...]:
        return ("<|call|>",)

    def parse(self, text: str, tools: Mapping[str, Tool] | None = None) -> Action:
        messages = _harmony_messages(text)
        if not messages:
            return Action(text, ActionKind.ANSWER, answer=text.strip())
        thought = "\n".join(body for header, body in messages if _channel(header) == "analysis") or None
        calls: list[ToolCall] = []
        finals: list[str] = []
        for header, body in messages:
            if (m := _RECIPIENT.search(header)) is not None:
                objects, error = _json_objects(body, ",") if body.strip() else ([({}, "")], None)
                if error is None and len(objects) != 1:
                    error = "the arguments must be one JSON object"
                if error is not None:
                    return _invalid(text, error, thought)
                call, error = _call_from_object({"name": m.group(1), "arguments": objects[0][0]}, header + body, len(calls), ("arguments",))
                if error is not None or call is None:
                    return _invalid(text, error or "bad call", thought)
                calls.append(call)
            elif _channel(header) == "final":
                finals.append(body)
        if calls:
            return _calls_action(text, calls, tools, thought)
        if finals:
            return Action(text, ActionKind.ANSWER, answer=finals[-1].strip(), thought=thought)
        return _invalid(text, "no final answer and no tool call: end with a <|channel|>final message or call a function", thought)


def _channel(header: str) -> str | None:
    m = _CHANNEL.search(header)
    return m.group(1) if m else None


def _harmony_messages(text: str) -> list[tuple[str, str]]:
    """(header, body) of each harmony message in ``text``; the header is what precedes
    ``<|message|>`` since the previous message's end (less any ``<|start|>ROLE``)."""
    out: list[tuple[str, str]] = []
    pos = 0
    while (mark := text.find("<|message|>", pos)) != -1:
        header = text[pos:mark]
        if "<|start|>" in header:
            header = header.rsplit("<|start|>", 1)[1]
        start = mark + len("<|message|>")
        ends = [(i, tok) for tok in _HARMONY_ENDS if (i := text.find(tok, start)) != -1]
        end, tok = min(ends) if ends else (len(text), "")
        out.append((header, text[start:end]))
        pos = end + len(tok)
    return out


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
                return _invalid(text, "found </tool_call> without a matching <tool_call>", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        if body.count("<tool_call>") != body.count("</tool_call>"):
            return _invalid(text, "unclosed <tool_call>: end each call with </tool_call>", thought)
        calls = []
        for index, m in enumerate(_GLM_CALL.finditer(body)):
            inner = m.group(1)
            name = inner.split("<arg_key>", 1)[0].strip()
            if not name or "\n" in name:
                return _invalid(text, "a call starts with the function's name: <tool_call>NAME", thought)
            rest = inner[inner.find("<arg_key>"):] if "<arg_key>" in inner else ""
            if _GLM_ARG.sub("", rest).strip():
                return _invalid(text, f"the arguments of {name} must be <arg_key>KEY</arg_key><arg_value>VALUE</arg_value> pairs", thought)
            schema = _properties(tools, name)
            args = {k.strip(): _typed(v, schema.get(k.strip())) for k, v in _GLM_ARG.findall(rest)}
            calls.append(ToolCall(name=name, arguments=args, id=tool_call_id(m.group(0), index), raw=m.group(0)))
        return _calls_action(text, calls, tools, thought)


def family_parsers() -> list[ToolParser]:
    return [Llama3JsonParser(), MistralParser(), Qwen3CoderParser(), PythonicParser(), DeepSeekV31Parser(), KimiK2Parser(), HarmonyParser(),
            Glm45Parser()]
