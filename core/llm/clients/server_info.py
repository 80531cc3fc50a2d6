"""What a model server toolgym did not start says about itself, and what toolgym does with it.

Two facts matter for token-faithful training data:

- **The context limit.** vLLM and SGLang report it as ``max_model_len`` on ``/v1/models`` (SGLang
  also as ``context_length`` on ``/get_server_info``). A request whose prompt plus ``max_tokens``
  exceeds it is refused with HTTP 400, which would end an episode as an error. Backends read it at
  start-up (``max_context_len``) and :func:`fit_context_budget` caps the engine's context budget
  (``max_tokens_per_trajectory``) to it, so an episode that outgrows the server *truncates* with a
  ``truncation_reason`` instead.
- **Which distribution the returned logprobs are of.** toolgym's contract: a stored logprob is of
  the sampled token under the distribution the sampler used, ``log_softmax(logits / T)``.
  vLLM returns that only with ``--logprobs-mode processed_logprobs``; its default
  (``raw_logprobs``) returns ``log_softmax(logits)``, which differs whenever ``T != 1``. SGLang
  returns the temperature-scaled values by default (its sampler takes the log of the probabilities
  it samples from) and the unscaled ones only when started with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``.
  :func:`classify_logprobs_mode` tells the two apart from two one-token probes of the same prompt
  at temperature 1 and at ``T``: under scaling, gaps between tokens' logprobs grow by ``1/T``;
  unscaled, they stay the same. With greedy decoding (``T == 0``) both conventions store the
  unscaled values, and at ``T == 1`` they coincide, so only ``0 < T != 1`` needs the probe.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from ...errors import ConfigError, LLMError

log = logging.getLogger("toolgym.llm")

LogprobsMode = Literal["processed", "raw", "unknown"]
"""``processed``: logprobs of the temperature-scaled distribution (what toolgym stores);
``raw``: of the unscaled one; ``unknown``: the probe could not tell (flat or missing top logprobs)."""

LOGPROBS_MODES: tuple[str, ...] = ("auto", "processed", "raw")
"""What a user may declare for a server: ``auto`` probes it on the first call at ``0 < T != 1``."""

PROBE_TOP = 8
"""Top alternatives asked for in each probe."""


def needs_scaled_logprobs(temperature: float) -> bool:
    """True when scaled and unscaled logprobs differ: sampling at a temperature other than 0 and 1."""
    return temperature > 0 and not math.isclose(temperature, 1.0)


def context_limit(*answers: Any) -> int | None:
    """The smallest positive context length named in server answers (``/v1/models`` cards or their
    list, ``/get_server_info``, ``/get_model_info``), or None when none names one."""
    found: list[int] = []
    for answer in answers:
        data = answer.get("data") if isinstance(answer, Mapping) else None
        for item in data if isinstance(data, list) else [answer]:
            if not isinstance(item, Mapping):
                continue
            for key in ("max_model_len", "context_length", "context_len"):
                value = item.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    found.append(value)
    return min(found) if found else None


def fit_context_budget(config: Any, policy: Any) -> Any:
    """``config`` (an ``EngineConfig``) with its context budget capped to the policy's model context.

    The limit is the backend's ``max_context_len`` (set by the HTTP backends from what the server
    reports; an in-process model's own positions); a config already within it, or a policy without
    one, is returned unchanged.
    """
    limit = getattr(getattr(policy, "backend", None), "max_context_len", None)
    if not isinstance(limit, int) or limit <= 0 or config.max_tokens_per_trajectory <= limit:
        return config
    log.info(
        "context budget capped from %d to the model's context of %d tokens",
        config.max_tokens_per_trajectory,
        limit,
    )
    return config.model_copy(update={"max_tokens_per_trajectory": limit})


def classify_logprobs_mode(
    at_one: Mapping[int, float], at_t: Mapping[int, float], temperature: float
) -> LogprobsMode:
    """Whether top logprobs answered at ``temperature`` are scaled, from the same position's top
    logprobs at temperature 1 (token id → logprob in each).

    Gaps to the best common token are compared: scaled gaps are the temperature-1 gaps divided by
    ``temperature``, unscaled ones equal them. The median ratio decides; ``unknown`` when fewer
    than two tokens are common or every gap is too small to measure.
    """
    if not needs_scaled_logprobs(temperature):
        return "unknown"
    common = [t for t in at_one if t in at_t]
    if len(common) < 2:
        return "unknown"
    best = max(common, key=lambda t: at_one[t])
    ratios = []
    for token in common:
        gap_one = at_one[token] - at_one[best]
        if token != best and abs(gap_one) > 1e-3:
            ratios.append((at_t[token] - at_t[best]) / gap_one)
    if not ratios:
        return "unknown"
    ratio = statistics.median(ratios)
    scaled = 1.0 / temperature
    return (
        "processed" if abs(math.log(max(ratio, 1e-9) / scaled)) < abs(math.log(max(ratio, 1e-9))) else "raw"
    )


def raw_logprobs_error(server: str, temperature: float, *, engine_hint: str) -> str:
    """The one-sentence refusal for a server whose logprobs are unscaled at ``temperature``."""
    return (
        f"the server at {server} returns logprobs of the unscaled distribution, not of the temperature-{temperature:g} "
        f"one it samples from, so importance ratios computed from them would be wrong; {engine_hint}, or sample at "
        "temperature 1 (or 0)"
    )


TopAt = Callable[[float], Awaitable[Mapping[int, float]]]
"""Asks the server for one token at a temperature; returns that position's top logprobs by token id."""


class LogprobsCheck:
    """Checks, once per temperature, that a server's logprobs are of the sampled distribution.

    ``declared`` is ``auto`` (probe with :func:`classify_logprobs_mode`), ``processed`` or ``raw``;
    ``hint`` says how to make that server return scaled logprobs. :meth:`check` raises ``LLMError``
    (not transient) for ``raw`` at ``0 < T != 1`` and returns the mode otherwise.
    """

    def __init__(self, declared: str, *, server: str, hint: str) -> None:
        if declared not in LOGPROBS_MODES:
            raise ConfigError(f"logprobs_mode {declared!r} is not one of {', '.join(LOGPROBS_MODES)}")
        self.declared: LogprobsMode | None = None if declared == "auto" else declared  # type: ignore[assignment]
        self.server, self.hint = server, hint
        self.modes: dict[float, LogprobsMode] = {}
        """What was found at each temperature used so far."""
        self._lock: asyncio.Lock | None = None

    async def check(self, temperature: float, top_at: TopAt) -> LogprobsMode:
        mode = await self.mode(temperature, top_at)
        if mode == "raw":
            raise LLMError(raw_logprobs_error(self.server, temperature, engine_hint=self.hint))
        return mode

    async def mode(self, temperature: float, top_at: TopAt) -> LogprobsMode:
        if not needs_scaled_logprobs(temperature):
            return "processed"
        if self.declared is not None:
            return self.declared
        key = round(float(temperature), 6)
        if key not in self.modes:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if key not in self.modes:
                    self.modes[key] = await self._probe(float(temperature), top_at)
        return self.modes[key]

    async def _probe(self, temperature: float, top_at: TopAt) -> LogprobsMode:
        try:
            at_one, at_t = await top_at(1.0), await top_at(temperature)
        except LLMError as exc:
            log.warning(
                "could not probe how %s computes logprobs (%s); trusting them as temperature-scaled",
                self.server,
                exc,
            )
            return "unknown"
        mode = classify_logprobs_mode(at_one, at_t, temperature)
        if mode == "unknown":
            log.warning(
                "could not tell whether %s returns temperature-scaled logprobs; trusting them as such",
                self.server,
            )
        return mode
