"""Parsing of real servers' answer shapes (vLLM, SGLang), request payloads, and --model resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgym.core.errors import ConfigError, LLMError
from toolgym.core.llm.clients.openai import (
    OpenAIChatBackend,
    OpenAICompletionsBackend,
    completions_payload,
    parse_completion,
    wire_messages,
)
from toolgym.core.llm.clients.sglang import SGLangBackend, generate_payload, parse_generate_response
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.llm.resolve import load_tokenizer, make_backend
from toolgym.core.llm.serving.server import ServerThread
from toolgym.core.types import SamplingParams


def test_sglang_payload_and_answer() -> None:
    body = generate_payload(
        [1, 2],
        SamplingParams(max_new_tokens=5, temperature=0.5, top_k=0, seed=3, stop=("</a>",), top_logprobs=2),
    )
    assert body["input_ids"] == [1, 2] and body["return_logprob"] is True and body["top_logprobs_num"] == 2
    assert body["sampling_params"] | {} == {
        "max_new_tokens": 5,
        "temperature": 0.5,
        "top_p": 1.0,
        "top_k": -1,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "stop": ["</a>"],
        "sampling_seed": 3,
    }
    answer = {
        "text": "hi",
        "output_ids": [7, 8],
        "meta_info": {
            "id": "x",
            "finish_reason": {"type": "stop", "matched": 8},
            "prompt_tokens": 2,
            "weight_version": 4,
            "output_token_logprobs": [[-0.5, 7, None], [-1.5, 8, None]],
            "output_top_logprobs": [[[-0.5, 7, None], [-2.0, 9, None]], [[-1.0, 3, None], [-1.5, 8, None]]],
        },
    }
    r = parse_generate_response(answer, 2)
    assert (r.output_ids, r.logprobs, r.finish_reason, r.weight_version) == (
        [7, 8],
        [-0.5, -1.5],
        "stop",
        "4",
    )
    assert r.top_logprobs == [[(7, -0.5), (9, -2.0)], [(3, -1.0), (8, -1.5)]] and r.meta["matched_stop"] == 8
    answer["meta_info"]["output_token_logprobs"] = [[-0.5, 7, None], [-1.5, 99, None]]
    with pytest.raises(LLMError, match="not token-faithful"):
        parse_generate_response(answer, 2)


def test_sglang_aborts_are_errors() -> None:
    def abort(status: int | None) -> dict:
        return {
            "output_ids": [],
            "meta_info": {"finish_reason": {"type": "abort", "message": "busy", "status_code": status}},
        }

    with pytest.raises(LLMError) as info:
        parse_generate_response(abort(None))
    assert info.value.transient
    with pytest.raises(LLMError) as info:
        parse_generate_response(abort(400))
    assert not info.value.transient


def test_completions_payload_and_vllm_answer_without_token_ids() -> None:
    body = completions_payload(
        "m", [5, 6], SamplingParams(max_new_tokens=3, top_k=4, seed=1, stop_token_ids=(2,))
    )
    assert (
        body["prompt"] == [5, 6]
        and body["logprobs"] == 1
        and body["top_k"] == 4
        and body["stop_token_ids"] == [2]
    )
    assert body["return_token_ids"] and body["return_tokens_as_token_ids"]
    vllm = {
        "id": "c",
        "choices": [
            {
                "text": "..",
                "finish_reason": "stop",
                "stop_reason": None,
                "logprobs": {
                    "tokens": ["token_id:11", "token_id:2"],
                    "token_logprobs": [-0.1, -0.2],
                    "top_logprobs": [
                        {"token_id:11": -0.1, "token_id:12": -3.0},
                        {"token_id:2": -0.2, "token_id:4": -1.9, "token_id:5": -2.5},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 2},
    }
    r = parse_completion(vllm, 2, prompt_ids=[5, 6])
    assert r.output_ids == [11, 2] and r.logprobs == [-0.1, -0.2] and r.finish_reason == "stop"
    assert r.top_logprobs == [[(11, -0.1), (12, -3.0)], [(2, -0.2), (4, -1.9)]]
    vllm["choices"][0]["logprobs"]["tokens"] = ["hello", "!"]
    with pytest.raises(LLMError, match="no token ids"):
        parse_completion(vllm)
    with pytest.raises(LLMError, match="re-tokenized"):
        parse_completion(
            {"choices": [{"token_ids": [1], "prompt_token_ids": [9, 9], "logprobs": None}]}, prompt_ids=[5, 6]
        )


def test_chat_wire_messages() -> None:
    wire = wire_messages(
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            {"role": "tool", "name": "f", "content": "r", "extra": 1},
        ]
    )
    call = wire[1]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"a": 1}' and call["id"]
    assert wire[2] == {"role": "tool", "content": "r", "tool_call_id": call["id"]}


def test_make_backend_resolves_models_and_servers(server: ServerThread, tiny_dir: Path) -> None:
    local = make_backend("tiny", max_batch_size=2)
    assert (
        isinstance(local, TransformersBackend)
        and local.max_batch_size == 2
        and local.model_path == str(tiny_dir)
    )
    assert isinstance(make_backend(str(tiny_dir)), TransformersBackend)
    sg = make_backend(server.url)
    assert isinstance(sg, SGLangBackend) and sg.tokenizer.name_or_path == str(tiny_dir)
    oa = make_backend(server.url + "/v1", "openai")
    assert isinstance(oa, OpenAICompletionsBackend) and oa.model_name == "tiny"
    assert isinstance(make_backend(server.url, "openai-chat", served_model="tiny"), OpenAIChatBackend)
    assert isinstance(make_backend(server.url, tokenizer="tiny"), SGLangBackend)


def test_make_backend_errors_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing is downloaded"):
        make_backend("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ConfigError, match=r"no config\.json"):
        make_backend(str(tmp_path))
    with pytest.raises(ConfigError, match="talks to a server"):
        make_backend("tiny", "sglang")
    with pytest.raises(Exception, match="unknown LLM backend 'nope'"):
        make_backend("http://127.0.0.1:1", "nope")
    with pytest.raises(ConfigError, match="no tokenizer"):
        load_tokenizer(tmp_path)
    assert load_tokenizer("tiny-llama").bos_token == "<|begin_of_text|>"
