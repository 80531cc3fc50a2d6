"""Tool-call parsers of the model families people train with RL, beside ``hermes`` (Qwen2.5/Qwen3).

Each parser reads the format its family's chat template writes (toolgym's templates in
``core/llm/local/templates`` render a message's ``tool_calls`` exactly so, and property tests check
that every rendered call parses back to itself). Names follow vLLM's tool parsers:

| parser | families | a call looks like |
|---|---|---|
| ``llama3_json`` | Llama 3.1 / 3.2 | ``{"name": "f", "parameters": {...}}`` (optionally after ``<|python_tag|>``; several joined by ``;``) |
| ``mistral`` | Mistral (Nemo, Small, Large) | ``[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcdefghi"}]``, or ``[TOOL_CALLS]f[ARGS]{...}`` |
| ``qwen3_coder`` | Qwen3-Coder | ``<tool_call>\\n<function=f>\\n<parameter=k>\\nvalue\\n</parameter>\\n</function>\\n</tool_call>`` |
| ``pythonic`` | Llama 4 (and Llama 3.2's pythonic mode) | ``[f(k="v", n=3), g()]`` (optionally in ``<|python_start|>…<|python_end|>``) |
| ``kimi_k2`` | Kimi-K2 | ``<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`` |
| ``harmony`` | gpt-oss | ``<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>`` (reasoning on the ``analysis`` channel, the answer on ``final``) |
| ``glm45`` | GLM-4.5 | ``<tool_call>f\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>`` |
| ``deepseek_v31`` | DeepSeek-V3.1 | ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`` |

Like every toolgym parser they never raise on model output: malformed calls become ``INVALID``
actions whose error the model can read; text with no call is a final answer. ``qwen3_coder``,
``glm45`` and ``pythonic`` live in :mod:`toolgym.core.parsing.xml`; the helpers they share, here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from toolgym.core.parsing.base import ToolParser
from toolgym.core.parsing.common import calls_action, invalid_action, split_thought
from toolgym.core.tools import Tool
from toolgym.core.types import Action, ActionKind, ToolCall, tool_call_id


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
            return out, f"unexpected text after a tool call: {body[pos : pos + 20]!r}"
        pos += len(separator)


def _call_from_object(
    obj: Any, raw: str, index: int, args_keys: tuple[str, ...]
) -> tuple[ToolCall | None, str | None]:
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
            body = body[len(self.TAG) :].strip()
        if not body.startswith("{"):
            return Action(text, ActionKind.ANSWER, answer=body, thought=thought)
        objects, error = _json_objects(body, ";")
        if error is not None:
            return invalid_action(text, error, thought)
        calls = []
        for index, (obj, raw) in enumerate(objects):
            call, error = _call_from_object(obj, raw, index, ("parameters", "arguments"))
            if error is not None or call is None:
                return invalid_action(text, error or "bad call", thought)
            calls.append(call)
        return calls_action(text, calls, tools, thought)


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
                return invalid_action(text, f"empty {self.TAG}: follow it with the calls", thought)
            if part.startswith("["):
                objects, error = _json_objects(part, ",")
                if error is None and (len(objects) != 1 or not isinstance(objects[0][0], list)):
                    error = f"{self.TAG} must be followed by one JSON list of calls"
                if error is not None:
                    return invalid_action(text, error, thought)
                for obj in objects[0][0]:
                    raw = json.dumps(obj, ensure_ascii=False)
                    call, error = _call_from_object(obj, raw, len(calls), ("arguments", "parameters"))
                    if error is not None or call is None:
                        return invalid_action(text, error or "bad call", thought)
                    calls.append(call)
            elif self.ARGS in part:
                name, _, args_text = part.partition(self.ARGS)
                objects, error = _json_objects(args_text, ",")
                if error is None and len(objects) != 1:
                    error = f"{self.ARGS} must be followed by one JSON object"
                if error is not None:
                    return invalid_action(text, error, thought)
                call, error = _call_from_object(
                    {"name": name.strip(), "arguments": objects[0][0]}, part, len(calls), ("arguments",)
                )
                if error is not None or call is None:
                    return invalid_action(text, error or "bad call", thought)
                calls.append(call)
            else:
                return invalid_action(
                    text,
                    f'{self.TAG} must be followed by a JSON list [{{"name": ..., "arguments": {{...}}}}]',
                    thought,
                )
        if not calls:
            return invalid_action(text, f"{self.TAG} with an empty list of calls", thought)
        return calls_action(text, calls, tools, thought)


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
                return invalid_action(text, f"a call must sit inside {self.CALLS}…{self.CALLS_END}", thought)
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        thought = "\n".join(t for t in (thought, body[:start].strip()) if t) or None
        end = body.find(self.CALLS_END, start)
        if end == -1:
            return invalid_action(
                text, f"unclosed {self.CALLS}: end the calls with {self.CALLS_END}", thought
            )
        inner = body[start + len(self.CALLS) : end]
        calls: list[ToolCall] = []
        pos = 0
        while (begin := inner.find(self.CALL, pos)) != -1:
            if inner[pos:begin].strip():
                return invalid_action(
                    text, f"unexpected text between calls: {inner[pos:begin][:20]!r}", thought
                )
            stop = inner.find(self.CALL_END, begin)
            if stop == -1:
                return invalid_action(
                    text, f"unclosed {self.CALL}: end each call with {self.CALL_END}", thought
                )
            raw = inner[begin + len(self.CALL) : stop]
            name, sep, args_text = raw.partition(self.SEP)
            if not sep:
                return invalid_action(text, f"a call is NAME{self.SEP}{{json arguments}}", thought)
            objects, error = _json_objects(args_text, ",")
            if error is None and len(objects) != 1:
                error = "the arguments must be one JSON object"
            if error is not None:
                return invalid_action(text, error, thought)
            call, error = _call_from_object(
                {"name": name.strip(), "arguments": objects[0][0]}, raw, len(calls), ("arguments",)
            )
            if error is not None or call is None:
                return invalid_action(text, error or "bad call", thought)
            calls.append(call)
            pos = stop + len(self.CALL_END)
        if inner[pos:].strip() or not calls:
            return invalid_action(
                text,
                f"{self.CALLS} must hold one or more {self.CALL}…{self.CALL_END} calls and nothing else",
                thought,
            )
        return calls_action(text, calls, tools, thought)


_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.DOTALL
)


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
                return invalid_action(
                    text, f"calls must sit inside {self.SECTION}…{self.SECTION_END}", thought
                )
            return Action(text, ActionKind.ANSWER, answer=body.strip(), thought=thought)
        thought = "\n".join(t for t in (thought, body[:start].strip()) if t) or None
        end = body.find(self.SECTION_END, start)
        if end == -1:
            return invalid_action(
                text, f"unclosed {self.SECTION}: end the calls with {self.SECTION_END}", thought
            )
        inner = body[start + len(self.SECTION) : end]
        matches = list(_KIMI_CALL.finditer(inner))
        if not matches or _KIMI_CALL.sub("", inner).strip():
            return invalid_action(
                text,
                "write each call as <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|>",
                thought,
            )
        calls: list[ToolCall] = []
        for m in matches:
            call_id = m.group(1).strip()
            name = call_id.split(":", 1)[0]
            name = name[len("functions.") :] if name.startswith("functions.") else name
            objects, error = _json_objects(m.group(2), ",")
            if error is None and len(objects) != 1:
                error = "the arguments must be one JSON object"
            if error is not None:
                return invalid_action(text, error, thought)
            call, error = _call_from_object(
                {"name": name, "arguments": objects[0][0], "id": call_id},
                m.group(0),
                len(calls),
                ("arguments",),
            )
            if error is not None or call is None:
                return invalid_action(text, error or "bad call", thought)
            calls.append(call)
        return calls_action(text, calls, tools, thought)


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
                    return invalid_action(text, error, thought)
                call, error = _call_from_object(
                    {"name": m.group(1), "arguments": objects[0][0]},
                    header + body,
                    len(calls),
                    ("arguments",),
                )
                if error is not None or call is None:
                    return invalid_action(text, error or "bad call", thought)
                calls.append(call)
            elif _channel(header) == "final":
                finals.append(body)
        if calls:
            return calls_action(text, calls, tools, thought)
        if finals:
            return Action(text, ActionKind.ANSWER, answer=finals[-1].strip(), thought=thought)
        return invalid_action(
            text,
            "no final answer and no tool call: end with a <|channel|>final message or call a function",
            thought,
        )


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
