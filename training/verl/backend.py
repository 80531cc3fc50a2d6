"""toolgym ↔ verl generation: our ``LLMBackend`` over verl's ``LLMServerClient``, and the reverse.

- :class:`VerlServerBackend` lets toolgym's engine generate through the rollout servers verl
  manages (vLLM or SGLang): token ids in, sampled ids and logprobs out, so trajectories stay
  token-faithful.
- :class:`LocalLLMServerClient` is an ``LLMServerClient`` that answers with any toolgym
  ``LLMBackend`` in this process (the in-process transformers backend on a small model, say). It
  lets verl's own agent-loop classes run on a CPU, for tests and smoke runs, with no Ray actor and
  no inference server.

Sampling: verl decides temperature, top-p, top-k and whether logprobs come back (training and
validation differ); the engine decides the per-call token budget and the stop strings its tool
parser and environment need. Per-call seeds and top-k alternatives are not requested: verl's
servers do not return alternatives, and determinism is verl's ``rollout.full_determinism``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from toolgym.core.errors import ConfigError, LLMError
from toolgym.core.llm.base import LLMBackend
from toolgym.core.types import GenerationRequest, GenerationResult, SamplingParams

# How each server keeps the stop string in its text; the sampled ids always include it.
_KEEP_STOP_TEXT: dict[str, dict[str, Any]] = {
    "vllm": {"include_stop_str_in_output": True},
    "sglang": {"no_stop_trim": True},
}


class VerlServerBackend(LLMBackend):
    """Generates through verl's ``LLMServerClient``; one instance per episode.

    Every call of the episode uses the same ``request_id``, so verl's load balancer keeps the
    episode on one server and its prefix cache. ``min_global_steps`` / ``max_global_steps`` are
    the oldest and newest weight versions (verl's ``global_steps``) that answered a call.
    """

    name = "verl"

    def __init__(
        self,
        client: Any,
        tokenizer: Any,
        sampling_params: dict[str, Any],
        *,
        request_id: str,
        rollout_name: str = "vllm",
        eos_token_ids: Iterable[int] = (),
        priority: int = 0,
        model_name: str = "",
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.model_name = model_name or "verl"
        self.base_sampling = dict(sampling_params)
        self.request_id = request_id
        self.keep_stop_text = _KEEP_STOP_TEXT.get(rollout_name, {})
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.priority = int(priority)
        self.min_global_steps: int | None = None
        self.max_global_steps: int | None = None
        self.num_preempted = 0
        self.calls = 0

    def sampling_params(self, sp: SamplingParams) -> dict[str, Any]:
        """verl's sampling dict for one call: verl's settings plus the engine's budget and stops."""
        params = dict(self.base_sampling)
        params["max_new_tokens"] = int(sp.max_new_tokens)
        if sp.stop:
            params["stop"] = list(sp.stop)
            params.update(self.keep_stop_text)
        if sp.stop_token_ids:
            params["stop_token_ids"] = sorted({*params.get("stop_token_ids", []), *sp.stop_token_ids})
        return params

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        sp = request.sampling
        extra: dict[str, Any] = {"priority": self.priority} if self.priority else {}
        if request.images:  # a vision-language model's pixels, in the order of their image-token runs
            extra["image_data"] = [pil_image(data) for data in request.images]
        try:
            out: TokenOutput = await self.client.generate(
                request_id=self.request_id,
                prompt_ids=list(request.input_ids),
                sampling_params=self.sampling_params(sp),
                **extra,
            )
        except (ConnectionError, TimeoutError) as exc:
            raise LLMError(
                f"rollout server unreachable: {type(exc).__name__}: {exc}", transient=True
            ) from exc
        if out.stop_reason == "aborted":
            raise LLMError(
                "the rollout server aborted the request (generation paused for a weight update); retrying",
                transient=True,
            )
        ids = [int(t) for t in out.token_ids]
        logprobs = [float(x) for x in out.log_probs] if out.log_probs is not None else None
        if logprobs is not None and len(logprobs) != len(ids):
            raise LLMError(f"the rollout server returned {len(logprobs)} logprobs for {len(ids)} tokens")
        self.calls += 1
        self.num_preempted += int(out.num_preempted or 0)
        version = out.extra_fields.get("global_steps")
        if isinstance(version, int):
            self.min_global_steps = (
                version if self.min_global_steps is None else min(self.min_global_steps, version)
            )
            self.max_global_steps = (
                version if self.max_global_steps is None else max(self.max_global_steps, version)
            )
        return GenerationResult(
            output_ids=ids,
            logprobs=logprobs,
            finish_reason=self._finish_reason(ids, sp),
            weight_version=None if version is None else str(version),
            prompt_tokens=len(request.input_ids),
        )

    def _finish_reason(self, ids: list[int], sp: SamplingParams) -> Any:
        """verl reports only "completed": infer whether a stop condition or the budget ended it."""
        if ids and (ids[-1] in self.eos_token_ids or ids[-1] in sp.stop_token_ids):
            return "stop"
        if sp.stop and ids:
            tail = self.tokenizer.decode(ids[-32:], skip_special_tokens=False)
            if any(s in tail for s in sp.stop):
                return "stop"
        return "length" if len(ids) >= sp.max_new_tokens or not ids else "stop"


class LocalLLMServerClient(LLMServerClient):
    """An ``LLMServerClient`` answered in-process by a toolgym ``LLMBackend`` (test double).

    Takes verl's sampling dict (``temperature``, ``top_p``, ``top_k`` with -1 for none,
    ``max_new_tokens``/``max_tokens``, ``stop``, ``stop_token_ids``, ``logprobs``) and returns
    verl's ``TokenOutput``. Without a token budget it uses what verl's servers use:
    ``min(response_length, prompt_length + response_length - len(prompt))``. ``global_steps`` is
    reported as the weight version, as verl's servers do; set it to mimic a weight update.
    """

    _IGNORED = frozenset({"include_stop_str_in_output", "no_stop_trim", "ignore_eos"})

    def __init__(self, config: Any, backend: LLMBackend, *, global_steps: int = 0) -> None:
        super().__init__(config, load_balancer_handle=None)  # type: ignore[arg-type]  # no server pool to balance
        self.backend = backend
        self.global_steps = global_steps
        self.requests: list[tuple[str, list[int], dict[str, Any]]] = []
        """Every request seen, as (request_id, prompt_ids, sampling_params), for tests."""

    async def generate(
        self,
        request_id: Any,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:  # type: ignore[override]
        """``image_data``: PIL images of a vision-language prompt, in the order of its image-token
        runs, handed to the backend as PNG bytes (``GenerationRequest.images``)."""
        params = dict(sampling_params)
        self.requests.append((str(request_id), list(prompt_ids), dict(params)))
        rollout = self.config.actor_rollout_ref.rollout
        budget = params.pop("max_new_tokens", params.pop("max_tokens", None))
        if budget is None:
            budget = min(
                rollout.response_length, rollout.prompt_length + rollout.response_length - len(prompt_ids)
            )
        penalty = float(params.pop("repetition_penalty", 1.0))
        if not math.isclose(penalty, 1.0):
            raise ConfigError(f"LocalLLMServerClient does not apply repetition_penalty={penalty}; use 1.0")
        top_k = int(params.pop("top_k", -1))
        want_logprobs = bool(params.pop("logprobs", False))
        sp = SamplingParams(
            max_new_tokens=max(1, int(budget)),
            temperature=float(params.pop("temperature", 1.0)),
            top_p=float(params.pop("top_p", 1.0)),
            top_k=max(0, top_k),
            seed=params.pop("seed", params.pop("sampling_seed", None)),
            stop=tuple(params.pop("stop", None) or ()),
            stop_token_ids=tuple(params.pop("stop_token_ids", None) or ()),
        )
        unknown = sorted(set(params) - self._IGNORED)
        if unknown:
            raise ConfigError(
                f"LocalLLMServerClient does not understand sampling parameter(s) {', '.join(unknown)}"
            )
        images = [png_bytes(image) for image in image_data or ()]
        result = await self.backend.generate(GenerationRequest(list(prompt_ids), sp, str(request_id), images))
        return TokenOutput(
            token_ids=list(result.output_ids),
            log_probs=list(result.logprobs) if want_logprobs and result.logprobs is not None else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={
                "global_steps": self.global_steps,
                "min_global_steps": self.global_steps,
                "max_global_steps": self.global_steps,
            },
        )


def pil_image(data: bytes) -> Any:
    """An encoded image (PNG bytes) as the RGB PIL image verl's servers and processors take."""
    import io

    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def png_bytes(image: Any) -> bytes:
    """A PIL image encoded as PNG (lossless: the pixels a backend decodes are the image's)."""
    import io

    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
