"""Piece-by-piece tokenization with a cache gives exactly the ids of tokenizing the whole text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from toolgym.core.llm.local.tiny import FAMILIES, ensure_tiny_model
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


# -- the word level: uncached ASCII pieces by pre-token, through a cache of words ---------------------

_ASCII_CHUNKS = [
    *"abcXYZ019 \n\t!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "'s",
    "'LL",
    "'re",
    "  ",
    "   ",
    "\n\n",
    " \n",
    "\t\t",
    "1234",
    "hello",
    " world",
    "\r",  # left to the tokenizer by the word path
    "\x0b",
    "\x1c",
    "\x7f",
]
_ASCII_TEXT = st.lists(st.sampled_from(_ASCII_CHUNKS), max_size=40).map("".join)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_fast(request: pytest.FixtureRequest) -> Tokenizer:
    return Tokenizer.from_file(str(ensure_tiny_model(request.param, with_weights=False) / "tokenizer.json"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_ASCII_TEXT)
def test_words_give_the_tokenizers_ids(family_fast: Tokenizer, text: str) -> None:
    pieces = PieceEncoder.for_tokenizer(family_fast)
    assert pieces is not None and pieces.words is not None  # every shipped family has the word level
    assert pieces.words.encode(text) == _whole(family_fast, text)
    assert pieces.words.encode(text) == _whole(family_fast, text)  # again, from the word cache
    assert pieces.encode(text) == pieces.encode(text, words=False) == _whole(family_fast, text)


def test_words_on_long_and_awkward_ascii(family_fast: Tokenizer) -> None:
    pieces = PieceEncoder.for_tokenizer(family_fast)
    assert pieces is not None and pieces.words is not None
    texts = [
        "",
        " " * 200 + "x",
        "a" * 300,  # longer than a cached word
        "line\n" * 500 + "\tend   ",
        json.dumps({"rows": [[i, f"name {i}", i * 0.5] for i in range(200)]}),
        'Traceback (most recent call last):\n  File "<stdin>", line 1, in <module>\nZeroDivisionError: x\n',
        "It's THEY'RE we'VE I'M you'D 's's",
    ]
    for text in texts:
        assert pieces.encode(text) == _whole(family_fast, text), text[:60]


def _other_split(spec: dict[str, Any]) -> None:
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"


def _dropout(spec: dict[str, Any]) -> None:
    spec["model"]["dropout"] = 0.1


def _lowercase(spec: dict[str, Any]) -> None:
    spec["normalizer"] = {"type": "Lowercase"}


@pytest.mark.parametrize("change", [_other_split, _dropout, _lowercase])
def test_no_word_level_where_it_would_not_be_the_tokenizers(fast: Tokenizer, change: Any) -> None:
    variant = _variant(fast, change)
    pieces = PieceEncoder.for_tokenizer(variant)
    assert pieces is None or pieces.words is None
