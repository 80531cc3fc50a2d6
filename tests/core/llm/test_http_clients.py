"""The SGLang and OpenAI clients over real HTTP, against the model server over the tiny model."""

from __future__ import annotations

import socket
import time

import pytest

from toolgym.core.errors import LLMError
from toolgym.core.llm.clients.openai import OpenAIChatBackend, OpenAICompletionsBackend
from toolgym.core.llm.clients.sglang import SGLangBackend
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.llm.serving.server import ServerThread
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.types import GenerationRequest, SamplingParams, ToolCall

from .conftest import HELLO_TEXT, WEATHER_TOOL

CLIENTS = {"sglang": SGLangBackend, "openai": OpenAICompletionsBackend}


@pytest.fixture(params=sorted(CLIENTS))
def client_cls(request: pytest.FixtureRequest) -> type:
    return CLIENTS[request.param]


def prompt(backend: object, text: str = "what is 2 + 2? the answer is") -> list[int]:
    return backend.tokenizer.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]


async def test_ids_and_logprobs_equal_the_in_process_backend(
    server: ServerThread, local: TransformersBackend, client_cls: type
) -> None:
    client = client_cls(server.url)
    try:
        ids = prompt(client)
        for sp in (
            SamplingParams(max_new_tokens=10, temperature=0.8, top_k=50, top_p=0.95, seed=5, top_logprobs=3),
            SamplingParams(max_new_tokens=6, temperature=0.0, top_logprobs=2),
        ):
            remote = await client.generate(GenerationRequest(ids, sp, "r1"))
            here = await local.generate(GenerationRequest(ids, sp))
            assert remote.output_ids == here.output_ids
            assert remote.logprobs == pytest.approx(here.logprobs, abs=1e-5)
            assert remote.top_logprobs is not None and here.top_logprobs is not None
            assert [[t for t, _ in pos] for pos in remote.top_logprobs] == [
                [t for t, _ in pos] for pos in here.top_logprobs
            ]
            assert all(len(pos) == sp.top_logprobs for pos in remote.top_logprobs)
            assert remote.finish_reason == "length" and remote.prompt_tokens == len(ids)
            assert remote.weight_version == "0" and remote.meta["request_id"] == "r1"
    finally:
        await client.aclose()


async def test_finish_reasons_and_stops(
    server: ServerThread, local: TransformersBackend, client_cls: type
) -> None:
    client = client_cls(server.url)
    try:
        ids = prompt(client, "hello")
        greedy = SamplingParams(max_new_tokens=12, temperature=0)
        full = await local.generate(GenerationRequest(ids, greedy))
        target = full.output_ids[3]
        r = await client.generate(GenerationRequest(ids, greedy.replace(stop_token_ids=(target,))))
        assert r.finish_reason == "stop" and r.output_ids[-1] == target and r.meta["matched_stop"] == target
        text = client.tokenizer.decode(full.output_ids)
        stop = text[len(client.tokenizer.decode(full.output_ids[:6])) :][:2]
        r = await client.generate(GenerationRequest(ids, greedy.replace(stop=(stop,))))
        assert r.finish_reason == "stop" and r.meta["matched_stop"] == stop
        assert r.output_ids == full.output_ids[: len(r.output_ids)] and stop in client.tokenizer.decode(
            r.output_ids
        )
        assert (
            r.logprobs is not None
            and len(r.logprobs) == len(r.output_ids)
            and all(lp <= 0 for lp in r.logprobs)
        )
    finally:
        await client.aclose()


async def test_injected_503_is_transient_and_retried(server: ServerThread, client_cls: type) -> None:
    client = client_cls(server.url)
    try:
        ids = prompt(client)
        sp = SamplingParams(max_new_tokens=3, seed=1)
        server.faults.fail(1, status=503)
        with pytest.raises(LLMError) as info:
            await client.generate(GenerationRequest(ids, sp))
        assert info.value.transient and info.value.status == 503 and "503" in str(info.value)
        # The engine's policy backs off and retries a transient error.
        server.faults.fail(2, status=503)
        policy = ModelPolicy(client, EngineConfig(llm_retries=3, retry_backoff_s=0.01))
        result, attempts = await policy.generate(ids, sp, "x")
        assert attempts == 3 and len(result.output_ids) == 3
    finally:
        await client.aclose()


async def test_client_side_retries_and_rejections(server: ServerThread, client_cls: type) -> None:
    client = client_cls(server.url, retries=2, backoff_s=0.01)
    try:
        before = server.faults.requests
        server.faults.fail(2, status=429)
        r = await client.generate(GenerationRequest(prompt(client), SamplingParams(max_new_tokens=2)))
        assert len(r.output_ids) == 2 and server.faults.requests - before == 3
        with pytest.raises(LLMError) as info:  # a token id outside the vocabulary: 400, not retried
            await client.generate(GenerationRequest([10**6], SamplingParams(max_new_tokens=2)))
        assert not info.value.transient and info.value.status == 400 and "vocabulary" in str(info.value)
        assert server.faults.requests - before == 4
    finally:
        await client.aclose()


async def test_timeouts_and_unreachable_servers_are_transient(server: ServerThread, client_cls: type) -> None:
    client = client_cls(server.url, timeout_s=0.2)
    try:
        server.faults.latency_s = (
            3.0  # the answer comes 3 s late; giving up on it (0.2 s) must not wait for it
        )
        start = time.perf_counter()
        with pytest.raises(LLMError) as info:
            await client.generate(GenerationRequest(prompt(client), SamplingParams(max_new_tokens=2)))
        assert (
            info.value.transient and "did not answer" in str(info.value) and time.perf_counter() - start < 2.0
        )
    finally:
        server.faults.latency_s = 0.0
        await client.aclose()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    kwargs = {"tokenizer": server.backend.tokenizer} | (
        {"served_model": "tiny"} if client_cls is OpenAICompletionsBackend else {}
    )
    offline = client_cls(dead, **kwargs)
    with pytest.raises(LLMError) as info:
        await offline.generate(GenerationRequest([1, 2], SamplingParams(max_new_tokens=2)))
    assert info.value.transient and "cannot reach" in str(info.value)
    await offline.aclose()


async def test_chat_parses_tool_calls_and_answers(taught_server: ServerThread) -> None:
    chat = OpenAIChatBackend(taught_server.url + "/v1", api_key="test-key")
    try:
        greedy = SamplingParams(max_new_tokens=60, temperature=0)
        r = await chat.chat(
            [{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER_TOOL],
            sampling=greedy,
        )
        assert [(c.name, c.arguments) for c in r.tool_calls] == [("get_weather", {"city": "Paris"})]
        assert r.text == "" and r.finish_reason == "stop" and chat.model_name == "taught"
        assert r.usage["completion_tokens"] > 0 and not chat.token_faithful
        r = await chat.chat([{"role": "user", "content": "Say hello."}], tools=None, sampling=greedy)
        assert r.text == HELLO_TEXT and r.tool_calls == [] and r.finish_reason == "stop"
        # An engine-style history (arguments as a dict, tool results) is accepted on the wire.
        history = [
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "c0",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "name": "get_weather", "content": "sunny"},
        ]
        r = await chat.chat(history, tools=[WEATHER_TOOL], sampling=greedy.replace(max_new_tokens=4))
        assert r.finish_reason == "length"
    finally:
        await chat.aclose()


async def test_completions_on_the_taught_model_stop_at_eos(taught_server: ServerThread) -> None:
    from toolgym.core.tokens.chat import ChatFormat

    client = OpenAICompletionsBackend(taught_server.url)
    try:
        chat = ChatFormat(client.tokenizer)
        ids = chat.encode(
            chat.render([{"role": "user", "content": "Say hello."}], add_generation_prompt=True)
        )
        r = await client.generate(GenerationRequest(ids, SamplingParams(max_new_tokens=40, temperature=0)))
        assert r.finish_reason == "stop" and r.output_ids[-1] == client.tokenizer.eos_token_id
        assert chat.decode(r.output_ids[:-1]) == HELLO_TEXT
    finally:
        await client.aclose()


def test_tool_call_with_broken_arguments_is_left_for_the_parser() -> None:
    from toolgym.core.llm.clients.openai import parse_chat_completion

    data = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1'}}
                    ],
                },
            }
        ]
    }
    r = parse_chat_completion(data)
    assert r.tool_calls == [] and '"arguments": {"x": 1' in r.text
    ok = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
                    ],
                },
            }
        ]
    }
    assert parse_chat_completion(ok).tool_calls == [ToolCall("f", {"x": 1}, "a", '{"x": 1}')]
