"""The in-process transformers backend: batching correctness, seeds, stops, logprobs, weights."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import torch

from toolgym.core.errors import LLMError
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.types import GenerationRequest, GenerationResult, SamplingParams

from .conftest import HELLO_TEXT

PROMPTS = ["hello world", "What is 12 * 7? print(12 * 7)", "def f(x):\n    return", "search[red shoes]", "a"]


def ids_of(backend: TransformersBackend, text: str) -> list[int]:
    return backend.tokenizer.encode(text, add_special_tokens=False)


async def gen(backend: TransformersBackend, ids: list[int], **sampling: object) -> GenerationResult:
    return await backend.generate(GenerationRequest(ids, SamplingParams(**sampling)))  # type: ignore[arg-type]


async def test_batched_rows_match_the_same_requests_alone(local: TransformersBackend) -> None:
    settings = [
        dict(temperature=1.0, seed=1),
        dict(temperature=0.0),
        dict(temperature=0.7, top_k=20, seed=2),
        dict(temperature=1.2, top_p=0.9, seed=3),
        dict(temperature=1.0, seed=4, top_logprobs=3),
    ]
    prompts = [ids_of(local, p) for p in PROMPTS]
    alone = [await gen(local, p, max_new_tokens=10, **s) for p, s in zip(prompts, settings, strict=True)]
    together = await asyncio.gather(
        *(gen(local, p, max_new_tokens=10, **s) for p, s in zip(prompts, settings, strict=True))
    )
    for a, b in zip(alone, together, strict=True):
        assert a.output_ids == b.output_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert local.max_rows_seen >= 2


async def test_rows_joining_a_running_batch_are_unaffected(local: TransformersBackend) -> None:
    prompts = [ids_of(local, p) for p in PROMPTS]
    alone = [await gen(local, p, max_new_tokens=24, seed=i) for i, p in enumerate(prompts)]

    async def later(i: int, p: list[int]) -> GenerationResult:
        await asyncio.sleep(0.004 * i)  # arrive while the others decode
        return await gen(local, p, max_new_tokens=24, seed=i)

    staggered = await asyncio.gather(*(later(i, p) for i, p in enumerate(prompts)))
    assert [r.output_ids for r in staggered] == [r.output_ids for r in alone]


async def test_stopped_rows_leave_the_cache_in_few_copies_and_change_no_output(
    local: TransformersBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows stopping one step apart: each is delivered when it stops, but the cache (copied whole
    to take a row out) is compacted only when a quarter of its slots are stopped rows; the rows
    still running sample exactly what they would alone."""
    from toolgym.core.llm.local import batching

    compactions: list[tuple[int, int]] = []
    compact = batching.ContinuousBatch._compact

    def counted(self: batching.ContinuousBatch) -> None:
        before = len(self._slots)
        compact(self)
        if len(self._slots) != before:
            compactions.append((before, len(self._slots)))

    monkeypatch.setattr(batching.ContinuousBatch, "_compact", counted)
    prompt = ids_of(local, "the answer is")
    lengths = range(2, 10)  # eight rows; one stops at every step
    alone = [await gen(local, prompt, max_new_tokens=n, seed=n) for n in lengths]
    compactions.clear()
    together = await asyncio.gather(*(gen(local, prompt, max_new_tokens=n, seed=n) for n in lengths))
    assert [r.output_ids for r in together] == [r.output_ids for r in alone]
    assert [len(r.output_ids) for r in together] == list(lengths)
    assert compactions and compactions[0] == (8, 6)  # not 8 -> 7: one stopped row of eight waits
    assert len(compactions) < len(lengths) - 1  # fewer copies than stops (the last stop frees everything)


async def test_same_seed_same_output_and_seeds_differ(local: TransformersBackend) -> None:
    p = ids_of(local, "the answer is")
    a, b = await gen(local, p, max_new_tokens=12, seed=42), await gen(local, p, max_new_tokens=12, seed=42)
    assert a.output_ids == b.output_ids and a.meta["seed"] == 42
    others = {tuple((await gen(local, p, max_new_tokens=12, seed=s)).output_ids) for s in range(5)}
    assert len(others) > 1


async def test_many_coroutines_share_bounded_batches(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_batch_size=4)
    try:
        p = ids_of(backend, "count")
        results = await asyncio.gather(
            *(gen(backend, p, max_new_tokens=5 + i % 4, seed=i) for i in range(24))
        )
        assert [len(r.output_ids) for r in results] == [5 + i % 4 for i in range(24)]
        assert all(r.finish_reason == "length" for r in results)
        assert 1 < backend.max_rows_seen <= 4
    finally:
        await backend.aclose()


async def test_logprobs_equal_a_teacher_forced_forward(local: TransformersBackend) -> None:
    p = ids_of(local, "what is 2 + 2?")
    for temperature in (0.0, 0.7):
        r = await gen(local, p, max_new_tokens=8, temperature=temperature, seed=9, top_logprobs=4)
        full = torch.tensor([p + r.output_ids])
        with torch.no_grad():
            logits = local.model(full).logits[0, len(p) - 1 : -1].float()
        scaled = logits / temperature if temperature > 0 else logits
        expected = torch.log_softmax(scaled, -1).gather(-1, torch.tensor(r.output_ids)[:, None]).squeeze(-1)
        assert r.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
        assert r.top_logprobs is not None and len(r.top_logprobs) == len(r.output_ids)
        for pos, (token, lp) in zip(r.top_logprobs, zip(r.output_ids, r.logprobs, strict=True), strict=True):
            assert len(pos) == 4 and [v for _, v in pos] == sorted((v for _, v in pos), reverse=True)
            assert lp <= pos[0][1] + 1e-6
            if temperature == 0:
                assert pos[0][0] == token


async def test_stop_token_ids_and_max_new_tokens(local: TransformersBackend) -> None:
    p = ids_of(local, "hello")
    full = await gen(local, p, max_new_tokens=12, temperature=0)
    assert full.finish_reason == "length" and len(full.output_ids) == 12
    target = full.output_ids[4]
    cut = full.output_ids.index(target) + 1
    stopped = await gen(local, p, max_new_tokens=12, temperature=0, stop_token_ids=(target,))
    assert stopped.output_ids == full.output_ids[:cut]
    assert stopped.finish_reason == "stop" and stopped.meta["matched_stop"] == target


async def test_stop_strings_keep_the_completing_tokens(local: TransformersBackend) -> None:
    p = ids_of(local, "def f(x):")
    full = await gen(local, p, max_new_tokens=16, temperature=0)
    text = local.tokenizer.decode(full.output_ids)
    stop = text[len(local.tokenizer.decode(full.output_ids[:5])) :][:3]
    assert stop
    r = await gen(local, p, max_new_tokens=16, temperature=0, stop=(stop,))
    assert r.finish_reason == "stop" and r.meta["matched_stop"] == stop
    assert r.output_ids == full.output_ids[: len(r.output_ids)]
    assert stop in local.tokenizer.decode(r.output_ids) and stop not in local.tokenizer.decode(
        r.output_ids[:-1]
    )


async def test_eos_ends_a_taught_answer(taught_dir: Path) -> None:
    from toolgym.core.tokens.chat import ChatFormat

    backend = TransformersBackend(taught_dir)
    try:
        chat = ChatFormat(backend.tokenizer)
        prompt = chat.encode(
            chat.render([{"role": "user", "content": "Say hello."}], add_generation_prompt=True)
        )
        r = await gen(backend, prompt, max_new_tokens=40, temperature=0)
        assert r.finish_reason == "stop" and r.output_ids[-1] == backend.tokenizer.eos_token_id
        assert chat.decode(r.output_ids[:-1]) == HELLO_TEXT
    finally:
        await backend.aclose()


async def test_bad_prompts_are_rejected_without_retry(local: TransformersBackend) -> None:
    for ids in ([], [local.vocab_size + 5]):
        with pytest.raises(LLMError) as info:
            await gen(local, ids, max_new_tokens=3)
        assert not info.value.transient


async def test_a_cancelled_request_leaves_the_backend_working(local: TransformersBackend) -> None:
    p = ids_of(local, "long")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(gen(local, p, max_new_tokens=3000, seed=1), 0.05)
    r = await gen(local, p, max_new_tokens=4, seed=1)
    assert len(r.output_ids) == 4


async def test_weight_updates_pause_generation_and_bump_the_version(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir)
    try:
        p = ids_of(backend, "hello")
        before = await gen(backend, p, max_new_tokens=6, temperature=0)
        assert before.weight_version == "0"
        released = threading.Event()

        def trainer() -> None:
            with backend.paused() as model, torch.no_grad():
                released.wait(5)
                for param in model.parameters():
                    param.add_(torch.randn_like(param) * 0.5)
                backend.set_weight_version("1")

        thread = threading.Thread(target=trainer)
        thread.start()
        await asyncio.sleep(0.05)
        task = asyncio.ensure_future(gen(backend, p, max_new_tokens=6, temperature=0))
        await asyncio.sleep(0.2)
        assert not task.done()  # held while the trainer owns the weights
        released.set()
        await asyncio.to_thread(thread.join)
        after = await task
        assert after.output_ids != before.output_ids and after.weight_version == "1"
        state = {k: v.clone() for k, v in backend.model.state_dict().items()}
        await backend.update_weights(state, version=2)
        assert backend.weight_version == "2"
    finally:
        await backend.aclose()
