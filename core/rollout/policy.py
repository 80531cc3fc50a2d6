"""Who acts in an episode: a token-level model, a black-box chat model, or a scripted solver.

The engine asks a policy for one turn at a time. ``ModelPolicy`` and ``ScriptedPolicy`` produce
token ids (token-faithful); ``ChatPolicy`` produces text (recorded as not token-faithful).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from toolgym.core.env.contract import Env
from toolgym.core.errors import ConfigError, LLMError
from toolgym.core.llm.base import ChatBackend, LLMBackend
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.vision import VisionInputs
from toolgym.core.types import ChatResult, GenerationRequest, GenerationResult, Message, SamplingParams
from toolgym.core.util.ratelimit import RateLimiter
from toolgym.core.util.retry import backoff_delay

R = TypeVar("R")
log = logging.getLogger("toolgym.rollout")


class TurnFailed(Exception):
    """A model call failed for good (after retries); the episode ends with status error."""


class ModelPolicy:
    """Samples from an ``LLMBackend`` with a semaphore, a timeout per attempt and retries.

    A model without an image processor (a text model) on an environment that shows screenshots
    gets each image as the tokenizer's placeholder text (recorded so, token-faithful) and never its
    pixels; the first such call logs one warning naming the fix (a vision-language model, or
    ``observation=axtree``). Scripted policies read no observation and say nothing."""

    kind = "model"
    token_faithful = True
    limiter: RateLimiter | None = None
    """Optional request/token rate limits applied to every call (set by ``toolgym collect``)."""

    def __init__(self, backend: LLMBackend, config: EngineConfig, *, chat: ChatFormat | None = None) -> None:
        if backend.tokenizer is None:
            raise ConfigError(
                f"backend {backend.name!r} has no tokenizer; give --tokenizer with the model's tokenizer"
            )
        self.backend = backend
        self.config = config
        processor = getattr(backend, "image_processor", None)  # a VLM: prompts carry expanded image tokens
        vision = VisionInputs(processor) if processor is not None else None
        self.chat = chat or ChatFormat(backend.tokenizer, vision=vision)
        self.slots = asyncio.Semaphore(config.max_llm_calls)
        self.name = backend.model_name or backend.name
        self._warned_images = False

    async def generate(
        self, ids: list[int], sampling: SamplingParams, request_id: str, images: list[str] | None = None
    ) -> tuple[GenerationResult, int]:
        """One model call; returns the result and how many attempts it took. ``images`` are the
        prompt's image references in order, sent as pixels when the chat format has a VLM's
        image processor (``ChatFormat(vision=...)``) and ignored otherwise (placeholders as text)."""
        vision = self.chat.vision
        pixels: list[bytes] = []
        if vision is not None and images:  # read off the event loop
            pixels = await asyncio.to_thread(lambda: [vision.load(ref) for ref in images])
        elif images and not self._warned_images:
            self._warned_images = True
            log.warning(
                "model %s has no image processor: the environment's screenshots reach it only as the "
                "placeholder %r; use a vision-language model (e.g. --model tiny-vl) to show them, or "
                "--env-arg observation=axtree for text only",
                self.name,
                self.chat.image_placeholder,
            )
        request = GenerationRequest(ids, sampling, request_id, pixels)
        return await with_retries(
            lambda: self.backend.generate(request),
            self.slots,
            self.config,
            limiter=self.limiter,
            tokens=len(ids) + sampling.max_new_tokens,
            used=lambda r: (r.prompt_tokens or len(ids)) + len(r.output_ids),
        )


NoiseAction = Callable[[Env, random.Random], Awaitable[str | None]]
"""A wrong or exploratory turn for the current state, as model text (None: no noise here)."""


class ScriptedPolicy:
    """Acts with the environment's own solver (``Env.scripted_action``), tokenized once.

    Its ids were written, not sampled: they carry no logprobs, which is what SFT warm-starts use.
    ``latency_s`` makes each turn wait as a model server would (``--model sim:LATENCY`` with
    ``--backend-arg replay=scripted``); with ``noise`` > 0 a turn is, with that probability, the
    ``noise_action``'s instead of the solver's (the solver's plan does not advance), which gives
    groups of scripted rollouts that differ as sampled ones do.
    """

    kind = "scripted"
    token_faithful = True
    name = "scripted"

    def __init__(
        self,
        chat: ChatFormat,
        *,
        latency_s: float = 0.0,
        noise: float = 0.0,
        noise_action: NoiseAction | None = None,
        seed: int = 0,
    ) -> None:
        if not 0.0 <= noise <= 1.0:
            raise ConfigError(f"noise is a probability per turn, between 0 and 1; got {noise}")
        if noise > 0 and noise_action is None:
            raise ConfigError("noise > 0 needs a noise_action that writes the wrong turns")
        if latency_s < 0:
            raise ConfigError(f"latency_s must be 0 or more seconds, got {latency_s}")
        self.chat = chat
        eos = sorted(chat.eos_token_ids)
        self._eos = eos[:1]
        self.latency_s = latency_s
        self.noise = noise
        self.noise_action = noise_action
        self._rng = random.Random(seed)

    async def act(self, env: Env) -> GenerationResult:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = None
        if self.noise and self._rng.random() < self.noise:
            assert self.noise_action is not None
            text = await self.noise_action(env, self._rng)
        if text is None:
            text = await env.scripted_action()
        if text is None:
            raise TurnFailed(f"environment {type(env).__name__} has no scripted policy for this state")
        return GenerationResult(
            output_ids=self.chat.encode(text) + self._eos, logprobs=None, finish_reason="stop"
        )


class ChatPolicy:
    """A black-box chat model: messages in, text out. Not token-faithful."""

    kind = "chat"
    token_faithful = False
    limiter: RateLimiter | None = None
    """Optional request/token rate limits applied to every call (set by ``toolgym collect``)."""

    def __init__(self, backend: ChatBackend, config: EngineConfig) -> None:
        self.backend = backend
        self.config = config
        self.slots = asyncio.Semaphore(config.max_llm_calls)
        self.name = backend.model_name or backend.name

    async def chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None, sampling: SamplingParams
    ) -> tuple[ChatResult, int]:
        if self.limiter is None:
            return await with_retries(
                lambda: self.backend.chat(messages, tools=tools, sampling=sampling), self.slots, self.config
            )
        estimate = estimate_chat_tokens(messages, tools) + sampling.max_new_tokens
        return await with_retries(
            lambda: self.backend.chat(messages, tools=tools, sampling=sampling),
            self.slots,
            self.config,
            limiter=self.limiter,
            tokens=estimate,
            used=lambda r: _chat_usage(r, estimate),
        )


def estimate_chat_tokens(messages: list[Message], tools: list[dict[str, Any]] | None) -> int:
    """A pre-call estimate of a chat prompt's tokens (about 4 characters per token, rounded up)."""
    chars = sum(len(str(m.get("content") or "")) + len(str(m.get("tool_calls") or "")) + 8 for m in messages)
    chars += sum(len(str(t)) for t in tools or ())
    return chars // 4 + 1


def _chat_usage(result: ChatResult, estimate: int) -> int:
    """Tokens a chat call used, from the API's usage report (the estimate when it sent none)."""
    usage = result.usage
    if "total_tokens" in usage:
        return usage["total_tokens"]
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    return estimate


async def with_retries(
    call: Callable[[], Awaitable[R]],
    slots: asyncio.Semaphore,
    cfg: EngineConfig,
    *,
    limiter: RateLimiter | None = None,
    tokens: int = 0,
    used: Callable[[R], int] | None = None,
) -> tuple[R, int]:
    """Run a model call under ``slots`` with a timeout per attempt, retrying transient errors with
    exponential backoff and jitter. Returns (result, attempts); raises ``TurnFailed`` at the end.

    With a ``limiter``, every attempt first waits for one request and ``tokens`` (an estimate) to
    fit the rate limits (outside ``slots`` and the timeout); ``used(result)`` then settles the
    estimate with the real usage."""
    attempt = 0
    while True:
        attempt += 1
        charged = await limiter.acquire(tokens) if limiter is not None else 0
        try:
            async with slots:
                start = time.perf_counter()
                async with asyncio.timeout(cfg.llm_timeout_s):
                    result = await call()
            result.latency_s = time.perf_counter() - start  # type: ignore[attr-defined]
            if limiter is not None and used is not None:
                limiter.settle(charged, used(result))
            return result, attempt
        except TimeoutError:
            error: Exception = LLMError(f"model call timed out after {cfg.llm_timeout_s:g}s", transient=True)
        except LLMError as exc:
            error = exc
        except (httpx.TransportError, ConnectionError) as exc:
            error = LLMError(f"{type(exc).__name__}: {exc}", transient=True)
        if not getattr(error, "transient", False) or attempt > cfg.llm_retries:
            raise TurnFailed(f"model call failed after {attempt} attempt(s): {error}") from error
        await asyncio.sleep(backoff_delay(attempt, cfg.retry_backoff_s))


Policy = ModelPolicy | ScriptedPolicy | ChatPolicy
