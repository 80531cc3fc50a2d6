"""In-memory backends for tests and benchmarks, shipped so users' own tests can use them too.

``MockLLMBackend`` answers with text chosen by a function of the prompt and records every request;
``SimulatedBackend`` sleeps a given latency and returns canned tokens (for engine benchmarks).
Both speak the real ``LLMBackend`` contract: ids in, ids out, with logprobs.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import LLMError
from ..types import GenerationRequest, GenerationResult, SamplingParams
from .base import LLMBackend

Responder = Callable[[str, int], str]
"""(decoded prompt, call index) → the text the mock model "samples"."""


class MockLLMBackend(LLMBackend):
    """Replies with ``responder(prompt_text, call_index)`` (or the next string of a list),
    encoded with the tokenizer and closed with EOS. Logprobs are drawn from a seeded RNG.

    ``fail_first`` makes the first N calls raise a transient ``LLMError`` (to test retries).
    ``top_logprobs(prompt_text, position)`` supplies the top-k alternatives per output position
    (so a test controls the entropies an ARPO run sees); by default each position lists only the
    sampled token.
    """

    name = "mock"

    def __init__(
        self,
        tokenizer: Any,
        responder: Responder | Sequence[str],
        *,
        fail_first: int = 0,
        delay_s: float = 0.0,
        top_logprobs: Callable[[str, int], list[tuple[int, float]]] | None = None,
        add_eos: bool = True,
    ) -> None:
        from toolgym.core.tokens.chat import ChatFormat

        self.tokenizer = tokenizer
        self.model_name = "mock"
        self.chat = ChatFormat(tokenizer)
        if isinstance(responder, Sequence) and not isinstance(responder, str):
            texts = list(responder)
            self.responder: Responder = lambda _prompt, i: texts[i % len(texts)]
        else:
            self.responder = responder  # type: ignore[assignment]
        self.requests: list[GenerationRequest] = []
        self.fail_first = fail_first
        self.delay_s = delay_s
        self.add_eos = add_eos
        self._top = top_logprobs
        self._eos = sorted(self.chat.eos_token_ids)[:1]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        index = len(self.requests)
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if index < self.fail_first:
            raise LLMError("mock transient failure", transient=True, status=503)
        prompt_text = self.chat.decode(request.input_ids)
        text = self.responder(prompt_text, index)
        ids = self.chat.encode(text)
        finish: Literal["stop", "length"] = "stop"
        if len(ids) > request.sampling.max_new_tokens:
            ids, finish = ids[: request.sampling.max_new_tokens], "length"
        elif self.add_eos:
            ids = ids + self._eos
        rng = random.Random(hash((request.sampling.seed, index)))
        logprobs = [math.log(rng.uniform(0.05, 1.0)) for _ in ids]
        top = None
        if request.sampling.top_logprobs:
            k = request.sampling.top_logprobs
            if self._top is not None:
                top = [self._top(prompt_text, pos)[:k] for pos in range(len(ids))]
            else:
                top = [[(t, lp)] for t, lp in zip(ids, logprobs, strict=True)]
        return GenerationResult(
            output_ids=ids,
            logprobs=logprobs,
            finish_reason=finish,
            top_logprobs=top,
            prompt_tokens=len(request.input_ids),
        )


@dataclass
class SimulatedBackend(LLMBackend):
    """A stand-in for an LLM server: waits ``latency_s`` (or a draw from ``latency_fn``) and returns
    ``text`` tokenized once and cached. Cheap enough that the engine's own overhead dominates."""

    tokenizer: Any = None
    text: str = "ok"
    latency_s: float = 0.05
    latency_fn: Callable[[random.Random], float] | None = None
    seed: int = 0
    name: str = "simulated"
    model_name: str = "simulated"
    calls: int = 0
    _ids: list[int] = field(default_factory=list)
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        from toolgym.core.tokens.chat import ChatFormat

        chat = ChatFormat(self.tokenizer)
        self._ids = chat.encode(self.text) + sorted(chat.eos_token_ids)[:1]
        self._rng = random.Random(self.seed)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.calls += 1
        delay = self.latency_fn(self._rng) if self.latency_fn else self.latency_s
        await asyncio.sleep(delay)
        ids = self._ids[: request.sampling.max_new_tokens]
        return GenerationResult(output_ids=list(ids), logprobs=[-0.5] * len(ids), finish_reason="stop")


def greedy_sampling(max_new_tokens: int = 64) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)


Lesson = tuple[list[dict[str, Any]], str] | tuple[list[dict[str, Any]], str, list[dict[str, Any]] | None]
"""(messages, completion) or (messages, completion, tools): after the rendered ``messages`` (with
the generation prompt), the taught model answers ``completion`` and then EOS."""


def ensure_taught_model(
    lessons: Sequence[Lesson],
    *,
    family: Literal["qwen", "llama"] = "qwen",
    max_steps: int = 400,
    lr: float = 1e-2,
    seed: int = 0,
) -> Any:
    """A copy of the tiny model trained until greedy decoding says each lesson's completion.

    Real weights with known behaviour, for end-to-end tests of backends, servers and the engine
    (a tool call for one prompt, a plain answer for another). Built once and cached next to the
    tiny model (a few seconds on CPU); raises ``RuntimeError`` if the lessons were not learnt.
    Returns the model directory.
    """
    import hashlib
    import json
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from .local.tiny import ensure_tiny_model

    base = ensure_tiny_model(family)
    norm = [(list(les[0]), les[1], les[2] if len(les) > 2 else None) for les in lessons]  # type: ignore[misc]
    key = hashlib.sha256(
        json.dumps([base.name, norm, max_steps, lr, seed], sort_keys=True, default=str).encode()
    ).hexdigest()[:12]
    out = base.parent / f"taught-{family}-{key}"
    if (out / "READY").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=base.parent))
    try:
        _teach(base, norm, tmp, max_steps=max_steps, lr=lr, seed=seed)
        (tmp / "READY").write_text("ok\n")
        try:
            os.replace(tmp, out)
        except OSError:  # another process taught the same lessons first
            if not (out / "READY").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _teach(
    base: Any,
    lessons: list[tuple[list[dict[str, Any]], str, Any]],
    out: Any,
    *,
    max_steps: int,
    lr: float,
    seed: int,
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.core.tokens.chat import ChatFormat

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model: Any = AutoModelForCausalLM.from_pretrained(str(base))
    chat = ChatFormat(tokenizer)
    eos = tokenizer.eos_token_id
    pairs = [
        (chat.encode(chat.render(m, tools=t, add_generation_prompt=True)), [*chat.encode(c), eos])
        for m, c, t in lessons
    ]
    width = max(len(p) + len(c) for p, c in pairs)
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for i, (p, c) in enumerate(pairs):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
        mask[i, : len(p) + len(c)] = 1
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()

    def learnt() -> bool:
        model.eval()
        with torch.no_grad():
            ok = all(
                model.generate(
                    torch.tensor([p]),
                    attention_mask=torch.ones(1, len(p), dtype=torch.long),
                    max_new_tokens=len(c),
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                )[0, len(p) :].tolist()
                == c
                for p, c in pairs
            )
        model.train()
        return ok

    for step in range(max_steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if loss.item() < 0.02 and (step % 10 == 0) and learnt():
            break
    else:
        if not learnt():
            raise RuntimeError(
                f"the tiny model did not learn the lessons in {max_steps} steps; give fewer or shorter ones"
            )
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
