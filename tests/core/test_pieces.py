"""Piece-by-piece tokenization with a cache gives exactly the ids of tokenizing the whole text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.pieces import PieceEncoder


@pytest.fixture(scope="module", params=["qwen", "llama"])
def fast(request: pytest.FixtureRequest) -> Tokenizer:
    return Tokenizer.from_file(str(ensure_tiny_model(request.param, with_weights=False) / "tokenizer.json"))


def _whole(fast: Tokenizer, text: str) -> list[int]:
    return list(fast.encode(text, add_special_tokens=False).ids)


def _added(fast: Tokenizer) -> list[str]:
    return [t.content for t in fast.get_added_tokens_decoder().values()]


_CHUNKS = [
    *'ab xyz\n\t<>|/_{}":,.0129',
    "é",
    "e\u0301",
    "日本",
    "\u212a",
    "ｔ",
    "  ",
    "\n\n",
    "tool",
    "call",
    "_id|",
]
_TEXT = st.lists(st.sampled_from(_CHUNKS), max_size=20).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_pieces_add_up_to_the_whole(fast: Tokenizer, data: st.DataObject) -> None:
    pieces = PieceEncoder.for_tokenizer(fast)
    assert pieces is not None
    parts = data.draw(st.lists(st.one_of(_TEXT, st.sampled_from(_added(fast))), max_size=12))
    text = "".join(parts)
    assert pieces.encode(text) == _whole(fast, text)
    assert pieces.encode(text) == _whole(fast, text)  # again, from the cache


def test_a_chat_render_is_mostly_cache_hits(fast: Tokenizer) -> None:
    from toolgym.core.tokens.tokenizer import LightTokenizer

    family = "qwen" if "<|im_start|>" in _added(fast) else "llama"
    chat = ChatFormat(LightTokenizer(ensure_tiny_model(family, with_weights=False)))
    assert chat._pieces is not None
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look up.",
                "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
            },
        }
    ]
    for i in range(20):
        messages = [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": f"Question number {i}?"},
        ]
        text = chat.render(messages, tools=tools, add_generation_prompt=True)
        assert chat.encode(text) == _whole(fast, text)
    info = chat._pieces.cache_info()
    assert info.hits > info.misses  # the system prompt and role headers are tokenized once


def _variant(fast: Tokenizer, change: Any) -> Tokenizer:
    spec = json.loads(fast.to_str())
    change(spec)
    return Tokenizer.from_str(json.dumps(spec))


def _lstrip_first(spec: dict[str, Any]) -> None:
    spec["added_tokens"][1]["lstrip"] = True


def _lowercase_normalizer(spec: dict[str, Any]) -> None:
    spec["added_tokens"][-1]["normalized"] = True
    spec["normalizer"] = {"type": "Lowercase"}


def _metaspace_first(spec: dict[str, Any]) -> None:
    spec["pre_tokenizer"] = {
        "type": "Metaspace",
        "replacement": "▁",
        "prepend_scheme": "first",
        "split": True,
    }


@pytest.mark.parametrize("change", [_lstrip_first, _lowercase_normalizer, _metaspace_first])
def test_tokenizers_where_pieces_would_not_add_up_encode_whole_texts(fast: Tokenizer, change: Any) -> None:
    variant = _variant(fast, change)
    assert PieceEncoder.for_tokenizer(variant) is None
    chat_text = f"a {_added(variant)[1]} b"
    naive = PieceEncoder(lambda t: _whole(variant, t), {c: variant.token_to_id(c) for c in _added(variant)})
    if change is _lstrip_first:  # the guard matters: naive splitting gets this one wrong
        assert naive.encode(chat_text) != _whole(variant, chat_text)
