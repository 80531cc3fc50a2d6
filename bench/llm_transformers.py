"""Tokens per second of the in-process transformers backend on the tiny model (CPU).

Compares, in the same run, the backend at batch 1 and batch 16 (16 concurrent requests, continuous
batching) with two baselines: a naive loop of ``model.generate`` one request at a time (what
"just call transformers" gives), and one left-padded ``model.generate`` call over all 16 prompts.

    .venv/bin/python bench/llm_transformers.py [--new-tokens 64] [--family qwen] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import torch

from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.types import GenerationRequest, SamplingParams

PROMPT = "You are a helpful assistant. What is 17 * 23? Think step by step, then answer. "


async def backend_rate(backend: TransformersBackend, prompt: list[int], batch: int, new: int) -> float:
    sp = SamplingParams(max_new_tokens=new, temperature=1.0)
    start = time.perf_counter()
    results = await asyncio.gather(
        *(backend.generate(GenerationRequest(prompt, sp.replace(seed=i))) for i in range(batch))
    )
    return sum(len(r.output_ids) for r in results) / (time.perf_counter() - start)


def naive_rate(model: torch.nn.Module, prompt: list[int], batch: int, new: int, pad: int) -> float:
    ids = torch.tensor([prompt])
    start = time.perf_counter()
    tokens = 0
    with torch.inference_mode():
        for _ in range(batch):
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=True,
                pad_token_id=pad,
            )
            tokens += out.shape[1] - ids.shape[1]
    return tokens / (time.perf_counter() - start)


def hf_batched_rate(model: torch.nn.Module, prompt: list[int], batch: int, new: int, pad: int) -> float:
    ids = torch.tensor([prompt] * batch)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            pad_token_id=pad,
        )
    return (out.shape[1] - ids.shape[1]) * batch / (time.perf_counter() - start)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--family", default="qwen", choices=["qwen", "llama"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    backend = TransformersBackend(ensure_tiny_model(args.family), max_batch_size=16)
    prompt = backend.tokenizer.encode(PROMPT, add_special_tokens=False)
    pad = backend.pad_token_id
    await backend_rate(backend, prompt, 2, 8)  # warm up
    print(
        f"tiny-{args.family}, prompt {len(prompt)} tokens, {args.new_tokens} new tokens per request, torch threads {torch.get_num_threads()}"
    )
    print(f"{'batch':>5}  {'toolgym backend':>16}  {'naive generate loop':>20}  {'HF batched generate':>20}")
    for batch in (1, 16):
        ours, naive, hf = [], [], []
        for _ in range(args.repeats):
            ours.append(await backend_rate(backend, prompt, batch, args.new_tokens))
            naive.append(naive_rate(backend.model, prompt, batch, args.new_tokens, pad))
            hf.append(hf_batched_rate(backend.model, prompt, batch, args.new_tokens, pad))
        med = statistics.median
        print(
            f"{batch:>5}  {med(ours):>12.0f} t/s  {med(naive):>16.0f} t/s  {med(hf):>16.0f} t/s   "
            f"(×{med(ours) / med(naive):.1f} vs naive)"
        )
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
