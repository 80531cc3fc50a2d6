"""What toolgym reads from a server it did not start: the context limit (the engine's budget is
capped to it, so a long episode truncates instead of failing on HTTP 400) and the logprob
convention (temperature-scaled or not). The real vLLM checks are in ``test_vllm_engine.py``;
here the toolgym model server stands in for vLLM's ``/v1/models`` and SGLang's protocol."""

from __future__ import annotations

import asyncio

import pytest
import torch

from toolgym import EngineConfig
from toolgym.core.errors import ConfigError
from toolgym.core.llm.clients.openai import OpenAICompletionsBackend
from toolgym.core.llm.clients.server_info import (
    LogprobsCheck,
    classify_logprobs_mode,
    context_limit,
    fit_context_budget,
)
from toolgym.core.llm.clients.sglang import SGLangBackend
from toolgym.core.llm.serving.server import ServerThread
from toolgym.core.types import GenerationRequest, SamplingParams


def test_fit_context_budget_only_ever_lowers_the_budget() -> None:
    class Backend:
        max_context_len: int | None = 1024

    class Policy:
        backend = Backend()

    config = EngineConfig(max_tokens_per_trajectory=8192)
    assert fit_context_budget(config, Policy()).max_tokens_per_trajectory == 1024
    small = EngineConfig(max_tokens_per_trajectory=512)
    assert fit_context_budget(small, Policy()) is small
    Backend.max_context_len = None
    assert fit_context_budget(config, Policy()) is config


def test_context_limit_reads_vllm_and_sglang_answers() -> None:
    assert (
        context_limit({"object": "list", "data": [{"id": "m", "max_model_len": 1024}]}) == 1024
    )  # vLLM and SGLang /v1/models
    assert (
        context_limit({"context_length": 4096, "max_req_input_len": 4090}) == 4096
    )  # SGLang /get_server_info
    assert context_limit({"context_length": None}, None, {"data": []}) is None
    assert context_limit({"max_model_len": True}) is None


def _tops(logits: torch.Tensor, temperature: float, scaled: bool, k: int = 8) -> dict[int, float]:
    logp = torch.log_softmax(logits / (temperature if scaled else 1.0), dim=-1)
    values, ids = logp.topk(k)
    return dict(zip(ids.tolist(), values.tolist(), strict=True))


@pytest.mark.parametrize("temperature", [0.3, 0.7, 1.3, 2.0])
@pytest.mark.parametrize("spread", [0.05, 1.0, 8.0])
def test_the_probe_tells_scaled_from_unscaled_logprobs(temperature: float, spread: float) -> None:
    gen = torch.Generator().manual_seed(int(temperature * 100 + spread * 10))
    logits = torch.randn(500, generator=gen, dtype=torch.float64) * spread
    at_one = _tops(logits, 1.0, True)
    assert classify_logprobs_mode(at_one, _tops(logits, temperature, True), temperature) == "processed"
    assert classify_logprobs_mode(at_one, _tops(logits, temperature, False), temperature) == "raw"


def test_the_probe_does_not_guess() -> None:
    flat = {1: -2.0, 2: -2.0, 3: -2.0}
    assert classify_logprobs_mode(flat, flat, 0.7) == "unknown"  # no gap to measure
    assert classify_logprobs_mode({1: -0.1}, {1: -0.05}, 0.7) == "unknown"  # one common token
    assert (
        classify_logprobs_mode({1: -0.1, 2: -3.0}, {1: -0.01, 2: -5.0}, 1.0) == "unknown"
    )  # T = 1: both agree


def test_a_declared_raw_server_is_refused_at_other_temperatures_only() -> None:
    check = LogprobsCheck("raw", server="http://x", hint="restart it")

    async def never(t: float) -> dict[int, float]:
        raise AssertionError("a declared mode is not probed")

    assert asyncio.run(check.check(1.0, never)) == "processed"
    assert asyncio.run(check.check(0.0, never)) == "processed"
    with pytest.raises(
        Exception, match=r"unscaled distribution, not of the temperature-0\.7 one.*restart it"
    ):
        asyncio.run(check.check(0.7, never))
    with pytest.raises(ConfigError, match="logprobs_mode 'scaled' is not one of auto, processed, raw"):
        LogprobsCheck("scaled", server="http://x", hint="")


@pytest.mark.parametrize("client_cls", [OpenAICompletionsBackend, SGLangBackend])
def test_toolgyms_server_is_probed_once_per_temperature_and_found_scaled(
    server: ServerThread, client_cls: type
) -> None:
    client = client_cls(server.url)
    before = server.faults.requests

    async def run() -> list:
        sp = SamplingParams(max_new_tokens=4, temperature=0.6, seed=3)
        try:
            return [await client.generate(GenerationRequest([1, 2, 3, 4], sp)) for _ in range(3)]
        finally:
            await client.aclose()

    results = asyncio.run(run())
    assert client.logprobs.modes == {0.6: "processed"}
    assert all(r.meta["logprobs_mode"] == "processed" for r in results)
    assert server.faults.requests - before == 2 + 3  # two probe tokens, then the three calls
