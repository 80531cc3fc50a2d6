"""Token faithfulness of the assembler, as property tests over random multi-turn episodes.

For every model call: the prompt ids it was given are exactly a prefix of the final sequence; the
ids it sampled follow that prefix verbatim; the loss mask is 1 on exactly those ids. Run with a
Qwen-style and a Llama-3-style template, with random token ids (any id a model might sample,
partial UTF-8 included) and with realistic text (tool calls, unicode).
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import GenerationResult

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_python",
            "description": "Run Python code.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    },
]

text_st = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
tool_call_st = st.builds(
    lambda code: (
        "<tool_call>\n" + json.dumps({"name": "run_python", "arguments": {"code": code}}) + "\n</tool_call>"
    ),
    text_st,
)
observation_st = st.one_of(
    st.lists(st.builds(lambda c: {"role": "tool", "content": c}, text_st), min_size=1, max_size=3),
    st.builds(lambda c: [{"role": "user", "content": c}], text_st),
)


@st.composite
def turn_st(draw: Any, vocab_size: int) -> dict[str, Any]:
    mode = draw(st.sampled_from(["ids", "text", "tool_call"]))
    if mode == "ids":
        ids = draw(st.lists(st.integers(0, vocab_size - 1), min_size=0, max_size=12))
        payload: Any = ids
    else:
        payload = draw(tool_call_st if mode == "tool_call" else text_st)
    return {
        "mode": mode,
        "payload": payload,
        "finish": draw(st.sampled_from(["eos", "length"])),
        "observation": draw(observation_st),
    }


def _episode(
    chat: ChatFormat, turns: list[dict[str, Any]], system: str, user: str
) -> tuple[TokenAssembler, list[tuple[list[int], list[int], int]]]:
    """Play turns through the assembler; return it and, per call, (prompt, sampled, sequence)."""
    asm = TokenAssembler(chat, TOOLS)
    asm.start([{"role": "system", "content": system}, {"role": "user", "content": user}])
    eos = sorted(chat.eos_token_ids)[0]
    calls = []
    for turn in turns:
        prompt = list(asm.prompt_ids)
        ids = list(turn["payload"]) if turn["mode"] == "ids" else chat.encode(turn["payload"])
        ids = [i for i in ids if i not in chat.eos_token_ids]
        if turn["finish"] == "eos":
            ids.append(eos)
        result = GenerationResult(
            output_ids=ids,
            logprobs=[-0.1 * (k + 1) for k in range(len(ids))],
            finish_reason="stop" if turn["finish"] == "eos" else "length",
        )
        completion = asm.add_completion(result)
        calls.append((prompt, ids, completion.sequence))
        asm.add_messages(turn["observation"])
    return asm, calls


def _check_invariants(asm: TokenAssembler, calls: list[tuple[list[int], list[int], int]]) -> None:
    segments = asm.to_segments()
    sequences: dict[int, list[int]] = {}
    masks: dict[int, list[int]] = {}
    for seg in segments:
        assert len(seg.token_ids) == len(seg.loss_mask)
        sequences.setdefault(seg.sequence, []).extend(seg.token_ids)
        masks.setdefault(seg.sequence, []).extend(seg.loss_mask)
        if seg.role == "assistant":
            assert seg.logprobs is not None and len(seg.logprobs) == len(seg.token_ids)
            assert all(not math.isnan(x) for x in seg.logprobs)
    sampled_positions: dict[int, set[int]] = {}
    for prompt, sampled, seq in calls:
        full = sequences[seq]
        assert full[: len(prompt)] == prompt, "prompt is not a prefix of the final sequence"
        assert full[len(prompt) : len(prompt) + len(sampled)] == sampled, (
            "sampled ids not verbatim after the prompt"
        )
        sampled_positions.setdefault(seq, set()).update(range(len(prompt), len(prompt) + len(sampled)))
    for seq, mask in masks.items():
        ones = {i for i, m in enumerate(mask) if m == 1}
        assert ones == sampled_positions.get(seq, set()), "loss mask is not 1 on exactly the sampled ids"


@pytest.mark.parametrize("family", ["qwen", "llama"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_prefix_and_mask_invariants(
    family: str, data: st.DataObject, qwen_chat: ChatFormat, llama_chat: ChatFormat
) -> None:
    chat = qwen_chat if family == "qwen" else llama_chat
    vocab = len(chat.tokenizer)
    turns = data.draw(st.lists(turn_st(vocab), min_size=1, max_size=5))
    system, user = data.draw(text_st), data.draw(text_st)
    asm, calls = _episode(chat, turns, system, user)
    _check_invariants(asm, calls)
    # our templates reproduce history byte for byte: one sequence, no rewrites
    assert asm.rewrites == [] and asm.sequence == 0


@pytest.mark.parametrize("family", ["qwen", "llama"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(
        st.fixed_dictionaries(
            {
                "mode": st.just("text"),
                "payload": st.one_of(text_st, tool_call_st),
                "finish": st.just("eos"),
                "observation": observation_st,
            }
        ),
        min_size=1,
        max_size=4,
    )
)
def test_prompt_text_equals_template_render(
    family: str, turns: list[dict[str, Any]], qwen_chat: ChatFormat, llama_chat: ChatFormat
) -> None:
    """Each prompt decodes to the template's own render, up to NFC (the Qwen tokenizer normalizes to
    NFC, as the published one does, so text NFC changes does not round-trip through ids)."""
    chat = qwen_chat if family == "qwen" else llama_chat
    asm = TokenAssembler(chat, TOOLS)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    asm.start(messages)
    for turn in turns:
        assert _nfc(chat.decode(asm.prompt_ids)) == _nfc(
            chat.render(asm.messages, tools=TOOLS, add_generation_prompt=True)
        )
        ids = chat.encode(turn["payload"]) + [sorted(chat.eos_token_ids)[0]]
        asm.add_completion(GenerationResult(output_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop"))
        asm.add_messages(turn["observation"])
    assert _nfc(chat.decode(asm.prompt_ids)) == _nfc(
        chat.render(asm.messages, tools=TOOLS, add_generation_prompt=True)
    )


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


# A Qwen3-like template that drops reasoning from earlier assistant turns: it rewrites history.
REWRITING_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and not loop.last and '</think>' in m.content -%}"
    "<|im_start|>assistant\n{{ m.content.split('</think>')[-1].lstrip() }}<|im_end|>\n"
    "{%- else -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)


def _rewriting_episode(
    tokenizer: Any, on_rewrite: str
) -> tuple[TokenAssembler, list[tuple[list[int], list[int], int]]]:
    chat = ChatFormat(tokenizer, template=REWRITING_TEMPLATE)
    asm = TokenAssembler(chat, None, on_rewrite=on_rewrite)  # type: ignore[arg-type]
    asm.start([{"role": "user", "content": "question"}])
    eos = sorted(chat.eos_token_ids)[0]
    calls = []
    for text in ["<think>let me think</think>call the tool", "<think>more</think>done"]:
        prompt = list(asm.prompt_ids)
        ids = chat.encode(text) + [eos]
        c = asm.add_completion(
            GenerationResult(output_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")
        )
        calls.append((prompt, ids, c.sequence))
        asm.add_messages([{"role": "user", "content": "tool says 4"}])
    return asm, calls


def test_history_rewrite_starts_new_sequence(qwen_tokenizer: Any) -> None:
    asm, calls = _rewriting_episode(qwen_tokenizer, "new_sequence")
    assert asm.rewrites, "the rewrite must be detected"
    assert asm.sequence >= 1
    assert asm.untrainable_reason is None
    _check_invariants(asm, calls)
    # the new sequence is the template's fresh render, with the earlier reasoning dropped
    fresh = next(s for s in asm.to_segments() if s.sequence == 1)
    assert fresh.role == "prompt" and "let me think" not in fresh.text


def test_history_rewrite_can_mark_untrainable(qwen_tokenizer: Any) -> None:
    asm, calls = _rewriting_episode(qwen_tokenizer, "untrainable")
    assert asm.untrainable_reason is not None and "rewrote history" in asm.untrainable_reason
    _check_invariants(asm, calls)


def test_inline_observation_continues_the_turn(qwen_chat: ChatFormat) -> None:
    """Search-R1 style: the model stops at </search>, the result is appended inside its turn."""
    asm = TokenAssembler(qwen_chat, None)
    asm.start([{"role": "user", "content": "q"}])
    first = qwen_chat.encode("<search>capital of France</search>")
    first_prompt = list(asm.prompt_ids)
    asm.add_completion(GenerationResult(output_ids=first, logprobs=[0.0] * len(first), finish_reason="stop"))
    asm.add_inline("\n<information>Paris</information>\n")
    prompt = list(asm.prompt_ids)
    second = qwen_chat.encode("<answer>Paris</answer>") + [sorted(qwen_chat.eos_token_ids)[0]]
    asm.add_completion(
        GenerationResult(output_ids=second, logprobs=[0.0] * len(second), finish_reason="stop")
    )
    assert len([m for m in asm.messages if m["role"] == "assistant"]) == 1
    assert asm.messages[-1]["content"].endswith("<answer>Paris</answer>")
    roles = [s.role for s in asm.to_segments()]
    assert roles == ["prompt", "assistant", "inline", "assistant"]
    _check_invariants(asm, [(first_prompt, first, 0), (prompt, second, 0)])


def test_length_finish_closes_the_turn(qwen_chat: ChatFormat) -> None:
    """A turn cut by the token limit is closed by the template's end-of-turn text (mask 0)."""
    asm = TokenAssembler(qwen_chat, None)
    asm.start([{"role": "user", "content": "q"}])
    ids = qwen_chat.encode("an unfinished thou")
    asm.add_completion(GenerationResult(output_ids=ids, logprobs=[0.0] * len(ids), finish_reason="length"))
    asm.add_messages([{"role": "user", "content": "go on"}])
    delta = asm.to_segments()[-1]
    assert delta.text.startswith("<|im_end|>\n<|im_start|>user\ngo on")
    assert set(delta.loss_mask) == {0}
