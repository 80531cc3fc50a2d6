"""Rendering only a conversation's tail gives the whole render, character for character.

For the templates in ``LOCAL_TEMPLATES`` the token assembler renders, after each model turn, only the
model's message and the new ones (``ChatFormat.render_tail``) and splices that onto the text so far.
Random episodes (tool and user replies, several at once, text that looks like the template's own
markup, turns cut off before their end-of-turn token, inline text) must record the same ids, texts
and rewrites as whole renders every turn. A template declared local that is not is caught by the
probes and rendered whole.
"""

from __future__ import annotations

import hashlib
import random
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.llm.local.tiny import FAMILIES, load_tiny_tokenizer, template_source
from toolgym.core.tokens import chat as chat_module
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import LOCAL_TEMPLATES, ChatFormat
from toolgym.core.types import GenerationResult

from .test_render_fast_path import OUTPUTS, SPECIALS, TOOLS, record, reference_path

COMPACT = resources.files("toolgym.training.local").joinpath("templates", "compact_qwen.jinja").read_text()
LOCAL = {"qwen": template_source("qwen"), "compact_qwen": COMPACT}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tiny_tokenizer("qwen")


def test_the_shipped_local_templates_are_recognised_and_no_other(tokenizer: Any) -> None:
    assert {sha(source) for source in LOCAL.values()} == set(LOCAL_TEMPLATES)
    for source in LOCAL.values():
        assert ChatFormat(tokenizer, template=source).generation_prompt == "<|im_start|>assistant\n"
    for family in sorted(set(FAMILIES) - {"qwen"}):
        source = template_source(family)
        if sha(source) not in LOCAL_TEMPLATES:
            assert ChatFormat(tokenizer, template=source).generation_prompt is None, family


def random_episode(
    chat: ChatFormat, rng: random.Random, tools: list[dict[str, Any]] | None
) -> dict[str, Any]:
    asm = TokenAssembler(chat, tools)
    first: list[dict[str, Any]] = [{"role": "user", "content": rng.choice(OUTPUTS[:3])}]
    if rng.random() < 0.5:
        first.insert(0, {"role": "system", "content": f"Be brief. {SPECIALS}"})
    asm.start(first)
    eos = sorted(chat.eos_token_ids)[0]
    for _ in range(rng.randint(1, 6)):
        text = rng.choice(['\n<tool_call>\n{"name": "lookup"}\n</tool_call>', "answer", "", SPECIALS])
        ids = chat.encode(text)
        if rng.random() < 0.8:  # else cut off by the length limit: no end-of-turn token
            ids = [*ids, eos]
        asm.add_completion(GenerationResult(output_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"))
        if rng.random() < 0.2 and ids and ids[-1] != eos:
            asm.add_inline("<information>x</information>")
            asm.add_completion(GenerationResult(output_ids=[eos], logprobs=[-0.1], finish_reason="stop"))
        replies = [
            {"role": rng.choice(["tool", "user"]), "content": rng.choice(OUTPUTS)}
            for _ in range(rng.choice([1, 1, 2, 3]))
        ]
        asm.add_messages(replies)
    return record(asm)


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_spliced_episodes_record_what_whole_renders_record(
    tokenizer: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = ChatFormat(tokenizer, template=LOCAL[name])
    tails = []
    render_tail = ChatFormat.render_tail

    def counted(self: ChatFormat, messages: Any) -> str | None:
        out = render_tail(self, messages)
        tails.append(out is not None)
        return out

    monkeypatch.setattr(ChatFormat, "render_tail", counted)
    for seed in range(60):
        tools = TOOLS if seed % 2 else None
        with reference_path(True):  # whole renders every turn
            whole = random_episode(chat, random.Random(seed), tools)
        spliced = random_episode(chat, random.Random(seed), tools)
        assert spliced == whole, seed
    assert tails.count(True) > 100  # the shortcut was taken (the comparison above is not vacuous)


def test_a_template_declared_local_that_is_not_is_rendered_whole(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the probes are what stands between a wrong declaration and wrong token ids
    # the header counts the messages: every render rewrites the first line, so no tail splices
    counting = "{{ messages|length }}\n" + LOCAL["qwen"]
    # a tool reply's piece reads the message two back, beyond the tail's one neighbour
    reaching = LOCAL["qwen"].replace(
        "<tool_response>\n{{ message.content }}",
        "<tool_response>\n{{ messages[loop.index0 - 2].role }} {{ message.content }}",
    )
    assert reaching != LOCAL["qwen"]
    sources = [counting, reaching, template_source("qwen3")]
    declared: dict[str, Any] = {sha(s): lambda messages: None for s in sources}  # Jinja renders the tail
    # the right template with the other template's Python tail (tool replies as `tool` turns)
    declared[sha(LOCAL["qwen"])] = chat_module.LOCAL_TEMPLATES[sha(LOCAL["compact_qwen"])]
    monkeypatch.setattr(chat_module, "LOCAL_TEMPLATES", declared)
    monkeypatch.setattr(chat_module, "_TAIL_RESULTS", {})
    for source in [*sources, LOCAL["qwen"]]:
        chat = ChatFormat(tokenizer, template=source)
        assert chat.generation_prompt is None
        assert chat.render_tail([{"role": "assistant", "content": "x"}]) is None


def test_the_shipped_template_files_are_the_ones_hashed() -> None:
    root = Path(__file__).resolve().parents[2]
    for path in ("core/llm/local/templates/qwen.jinja", "training/local/templates/compact_qwen.jinja"):
        assert sha((root / path).read_text()) in LOCAL_TEMPLATES, path
