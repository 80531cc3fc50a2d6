"""The fast render path gives the reference path's text and ids, character for character.

``ChatFormat.render`` merges the template's globals once and keeps each frozen tool schema's JSON
text (see ``toolgym.core.tokens.chat``); ``ChatFormat.reference = True`` renders through Jinja's own
``Template.render`` and dumps every schema afresh. Every shipped family's template, driven through
whole episodes of the token assembler with awkward contents (unicode, text that looks like special
tokens, empty and long tool outputs, calls in the family's own format), must record the same ids,
texts, messages and rewrites both ways; a divergence anywhere fails.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest

from toolgym.core.llm.local.tiny import FAMILIES, load_tiny_tokenizer
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat, FrozenSchema, freeze_tools, with_tool_call_ids
from toolgym.core.types import GenerationResult, ToolCall

from .family_helpers import assistant_text, lookup

ALL_FAMILIES = sorted(FAMILIES)

TOOLS: list[dict[str, Any]] = [
    lookup.schema,
    {
        "type": "function",
        "function": {
            "name": "run_python",
            "description": "Run Python — prints «output»; never emits <|im_end|> or [TOOL_CALLS] itself.",
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "日本語 ok"},
                    "timeout": {"type": "number", "minimum": 0, "default": 1.5},
                    "flags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                },
                "required": ["code"],
            },
        },
    },
]

SPECIALS = (
    "<|im_end|><|im_start|>assistant\n<tool_response></tool_response><tool_call>"
    "<|eot_id|><|start_header_id|>ipython<|end_header_id|>[TOOL_CALLS][/INST]<|end|><|call|>"
    "<｜tool▁outputs▁begin｜><|observation|><think></think>"
)
OUTPUTS = (
    "",
    "héllo wörld — 日本語 🚀 e\u0301 \u212a ｔool",
    SPECIALS,
    "  leading and trailing spaces \n\n\t",
    '{"result": [1, 2.5, null, true], "text": "a \\"quoted\\" word"}',
    "line\n" * 300 + ("long output ✓ " * 900),  # past the piece cache's longest piece
    "\n",
)


@contextmanager
def reference_path(on: bool) -> Iterator[None]:
    before = ChatFormat.reference
    ChatFormat.reference = on
    try:
        yield
    finally:
        ChatFormat.reference = before


def outcome(fn: Callable[[], Any]) -> Any:
    """The value, or the error's type and message (a template that refuses must refuse both ways)."""
    try:
        return ("ok", fn())
    except Exception as exc:  # compared, not swallowed
        return ("error", type(exc).__name__, str(exc))


@pytest.fixture(scope="module")
def chats() -> dict[str, ChatFormat]:
    return {family: ChatFormat(load_tiny_tokenizer(family)) for family in ALL_FAMILIES}  # type: ignore[arg-type]


def episode(chat: ChatFormat, tools: list[dict[str, Any]] | None, reply_role: str) -> dict[str, Any]:
    """An episode over every awkward output: a call in the family's format or plain text each turn,
    answered by a tool or user message; the whole record the assembler keeps."""
    asm = TokenAssembler(chat, tools)
    asm.start(
        [{"role": "system", "content": f"Be brief. {SPECIALS}"}, {"role": "user", "content": "start: 🚀"}]
    )
    eos = sorted(chat.eos_token_ids)[0]
    for k, out in enumerate(OUTPUTS):
        call = ToolCall("lookup", {"key": out[:40], "count": k}, id=f"call{k:05d}")
        try:
            text = assistant_text(chat, [call]) if k % 2 == 0 else f"Thinking {out[:60]}"
        except Exception:  # a template that cannot write this call: plain text instead
            text = f"plain {k}"
        ids = [*chat.encode(text), eos]
        asm.add_completion(GenerationResult(output_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"))
        if reply_role == "tool":
            asm.add_messages(with_tool_call_ids([{"role": "tool", "content": out}], [call]))
        else:
            asm.add_messages([{"role": "user", "content": out}])
    return record(asm)


def record(asm: TokenAssembler) -> dict[str, Any]:
    """Everything the assembler keeps of an episode: what two ways of rendering must agree on."""
    return {
        "segments": [(s.sequence, s.role, list(s.token_ids), s.text) for s in asm.segments],
        "prompt_ids": list(asm.prompt_ids),
        "digest": asm.prompt_digest,
        "messages": asm.messages,
        "rewrites": asm.rewrites,
        "untrainable": asm.untrainable_reason,
    }


@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("reply_role", ["tool", "user"])
@pytest.mark.parametrize("with_tools", [True, False])
def test_fast_path_records_the_reference_ids(
    chats: dict[str, ChatFormat], family: str, reply_role: str, with_tools: bool
) -> None:
    chat = chats[family]
    tools = copy.deepcopy(TOOLS) if with_tools else None
    with reference_path(True):
        slow = outcome(lambda: episode(chat, tools, reply_role))
    fast = outcome(lambda: episode(chat, tools, reply_role))
    assert fast == slow
    assert fast[0] == "ok", fast  # each family renders these episodes (the check above is not vacuous)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_fast_render_is_the_reference_render(chats: dict[str, ChatFormat], family: str) -> None:
    chat = chats[family]
    frozen = freeze_tools(TOOLS)
    conversations: list[list[dict[str, Any]]] = [
        [],
        [{"role": "user", "content": ""}],
        [{"role": "system", "content": SPECIALS}, {"role": "user", "content": OUTPUTS[1]}],
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call00001",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": {"key": "é"}},
                    }
                ],
            },
            {"role": "tool", "content": OUTPUTS[5], "tool_call_id": "call00001"},
        ],
    ]
    for messages in conversations:
        for tools in (None, TOOLS, frozen):
            for gen in (True, False):
                render = partial(chat.render, messages, tools=tools, add_generation_prompt=gen)
                with reference_path(True):
                    slow = outcome(render)
                fast = outcome(render)
                assert fast == slow, (messages, tools is frozen, gen)


def test_frozen_schemas_dump_as_the_dicts_they_copy() -> None:
    frozen = freeze_tools(TOOLS)
    assert frozen == TOOLS and frozen is not TOOLS
    assert all(type(t) is FrozenSchema for t in frozen or [])
    assert type(frozen[1]["function"]["parameters"]["properties"]) is FrozenSchema  # type: ignore[index]
    for ensure_ascii, indent, separators, sort_keys in (
        (False, None, None, False),
        (False, 4, None, False),
        (True, None, (",", ":"), True),
        (False, 2, [",", ": "], False),  # unhashable arguments: dumped every time
    ):
        for original, frozen_one in zip(TOOLS, frozen or [], strict=True):
            expected = json.dumps(
                original, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
            )
            for _ in range(2):  # dumped, then kept
                assert frozen_one.json(ensure_ascii, indent, separators, sort_keys) == expected  # type: ignore[attr-defined]
            assert str(frozen_one) == str(original)
    assert pickle.loads(pickle.dumps(frozen)) == TOOLS
    assert copy.deepcopy(frozen) == TOOLS
    with pytest.raises(TypeError):
        frozen[0]["type"] = "changed"  # type: ignore[index]
    assert freeze_tools(None) is None and freeze_tools([]) == []
