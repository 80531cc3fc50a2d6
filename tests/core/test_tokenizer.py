"""The light tokenizer gives exactly the ids, text and renders of transformers' fast tokenizer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.tokenizer import LightTokenizer, load_tokenizer


@pytest.fixture(scope="module", params=["qwen", "llama"])
def pair(request: pytest.FixtureRequest) -> tuple[Any, LightTokenizer]:
    from transformers import AutoTokenizer

    path = ensure_tiny_model(request.param, with_weights=False)
    return AutoTokenizer.from_pretrained(str(path)), LightTokenizer(path)


def test_special_tokens_and_template(pair: tuple[Any, LightTokenizer]) -> None:
    hf, light = pair
    for key in ("bos_token", "eos_token", "pad_token", "eos_token_id", "pad_token_id", "bos_token_id"):
        assert getattr(light, key) == getattr(hf, key), key
    assert len(light) == len(hf) and light.chat_template == hf.chat_template
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "2+2?"}]
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    assert light.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False
    ) == hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(max_size=60)
    | st.sampled_from(["<|im_start|>user\nhi<|im_end|>", "<tool_call>{}</tool_call>", "<|eot_id|>x"])
)
def test_same_ids_and_text(pair: tuple[Any, LightTokenizer], text: str) -> None:
    hf, light = pair
    ids = light.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert ChatFormat(light).decode(ids) == ChatFormat(hf).decode(ids)


def test_load_tokenizer_errors(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"no tokenizer\.json"):
        LightTokenizer(tmp_path)
