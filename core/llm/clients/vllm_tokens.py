"""Prompts with images through vLLM's tokens-in/tokens-out endpoint (``/inference/v1/generate``).

vLLM's ``/v1/completions`` takes a prompt of ids but no images, and its chat endpoint takes images
but renders (re-tokenizes) the conversation itself. ``/inference/v1/generate`` takes both: the
prompt's ``token_ids`` and its images as OpenAI ``image_url`` content parts with ``data:`` URLs
(``content_parts``, in prompt order), and answers with the sampled ids, their logprobs by id and,
with ``return_token_ids``, the prompt ids vLLM ran the model on. vLLM serves it when started with
``--enable-scale-out`` (``toolgym serve --engine vllm`` starts a vision-language model so).

Request (one prompt)::

    {"model", "token_ids": [...], "content_parts": [{"type": "image_url", "url": "data:image/png;base64,..."}],
     "sampling_params": {"n", "max_tokens", "temperature", "top_p", "top_k", "seed", "logprobs", "stop",
     "stop_token_ids", "skip_special_tokens", "include_stop_str_in_output"},
     "return_token_ids": true, "output_mode": "tokens"}

Answer: ``{"prompt_token_ids", "mm_placeholders": {"image": [{"offset", "length"}]}, "usage",
"choices": [{"token_ids", "finish_reason", "stop_reason", "weight_versions": [{"version", "start",
"end"}], "logprobs": {"content": [{"token_id", "logprob", "top_logprobs": [{"token_id", "logprob"}]}]}}]}`` (vLLM 0.32,
``entrypoints/scale_out/token_in_token_out/protocol.py``).

Image tokens. vLLM's Qwen2-VL/Qwen2.5-VL processor (``model_executor/models/qwen2_vl.py``,
``_get_prompt_updates``) replaces each ``<|image_pad|>`` of a token prompt by that image's run of
``t*h*w / merge²`` pads; it does not recognise a run that is already expanded (it would expand its
first pad again). toolgym records the expanded ids, since those are what the model is conditioned
on, so the client sends each image's run collapsed to one pad (:func:`collapse_image_runs`) and
checks that the ``prompt_token_ids`` vLLM answers with, after its own expansion, equal the recorded
ids: a server whose image processor counts otherwise (other pixel bounds, another patch size) is an
error naming both runs, never a silently different prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import LLMError
from ...tokens.images import data_url
from ...tokens.vision import image_pad_runs
from ...types import FinishReason, GenerationResult, SamplingParams

GENERATE_PATH = "/inference/v1/generate"
SCALE_OUT_HINT = (
    "start vLLM with --enable-scale-out (`toolgym serve --engine vllm` does for a vision-language model)"
)


def collapse_image_runs(ids: Sequence[int], pad_id: int, images: int) -> list[int]:
    """``ids`` with each run of ``pad_id`` shortened to one pad: the prompt as vLLM expects it.

    ``LLMError`` when the prompt holds another number of runs than ``images``."""
    runs = image_pad_runs(ids, pad_id)
    if len(runs) > images:
        raise LLMError(
            f"the prompt holds {len(runs)} image-token runs for {images} image(s): the model sampled the "
            "image-pad token as text in an earlier turn, and a Qwen-VL model (vLLM's processor too) reads "
            "every such token as part of an image, so this prompt cannot be run"
        )
    if len(runs) < images:
        raise LLMError(
            f"the prompt holds {len(runs)} image-token run(s) for {images} image(s); render it with the "
            "model's image processor (ChatFormat(vision=...))"
        )
    out: list[int] = []
    for t in ids:
        if t == pad_id and out and out[-1] == pad_id:
            continue
        out.append(t)
    return out


def image_parts(images: Sequence[bytes]) -> list[dict[str, str]]:
    """The images as OpenAI ``image_url`` content parts, in prompt order, in the flat spelling
    ``{"type": "image_url", "url": ...}`` that vLLM's ``ServingTokens.serve_tokens`` reads."""
    return [{"type": "image_url", "url": data_url(image)} for image in images]


def optional_sampling(sp: SamplingParams) -> dict[str, Any]:
    """The sampling fields a request carries only when set (top_k, seed, stop strings and ids), named
    as vLLM's and SGLang's OpenAI-style endpoints and vLLM's generate endpoint all name them."""
    fields: dict[str, Any] = {}
    if sp.top_k > 0:
        fields["top_k"] = sp.top_k
    if sp.seed is not None:
        fields["seed"] = sp.seed
    if sp.stop:
        fields["stop"] = list(sp.stop)
    if sp.stop_token_ids:
        fields["stop_token_ids"] = list(sp.stop_token_ids)
    return fields


def generate_payload(
    model: str, token_ids: Sequence[int], images: Sequence[bytes], sp: SamplingParams
) -> dict[str, Any]:
    sampling: dict[str, Any] = {
        "n": 1,
        "max_tokens": sp.max_new_tokens,
        "temperature": sp.temperature,
        "top_p": sp.top_p,
        # vLLM lists the sampled token first, then the top candidates, cut at `logprobs` entries:
        # one more than wanted keeps all top k whether or not the sampled token is among them
        "logprobs": sp.top_logprobs + 1,
        "skip_special_tokens": False,
        "include_stop_str_in_output": True,
    }
    sampling.update(optional_sampling(sp))
    body: dict[str, Any] = {
        "token_ids": list(token_ids),
        "content_parts": image_parts(images),
        "sampling_params": sampling,
        "return_token_ids": True,
        "output_mode": "tokens",
    }
    if model:
        body["model"] = model
    return body


def parse_generate(data: Any, top_logprobs: int = 0, *, prompt_ids: Sequence[int]) -> GenerationResult:
    """One ``/inference/v1/generate`` answer → ``GenerationResult``; ``LLMError`` when vLLM ran the
    model on other prompt ids than ``prompt_ids`` (the recorded, expanded ones) or when its answer
    is not token-faithful."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"vLLM's generate answer has no choices: {str(data)[:200]}") from None
    fed = data.get("prompt_token_ids")
    if fed is None:
        raise LLMError(
            "vLLM did not return the prompt ids it ran the model on (return_token_ids); cannot check them"
        )
    if list(fed) != list(prompt_ids):
        raise LLMError(image_token_mismatch(prompt_ids, fed))
    reason = choice.get("finish_reason")
    if reason == "abort":
        raise LLMError("the server aborted the request", transient=True)
    ids = [int(t) for t in choice.get("token_ids") or []]
    content = (choice.get("logprobs") or {}).get("content")
    if (
        content is None
        or len(content) != len(ids)
        or any(int(e["token_id"]) != t for e, t in zip(content, ids, strict=True))
    ):
        raise LLMError(
            "vLLM returned logprobs for other tokens than its token_ids (or none); the result is not token-faithful"
        )
    logprobs = [float(e["logprob"]) for e in content]
    top = None
    if top_logprobs:
        top = []
        for entry in content:
            ranked = {int(c["token_id"]): float(c["logprob"]) for c in entry.get("top_logprobs") or []}
            top.append(sorted(ranked.items(), key=lambda e: -e[1])[:top_logprobs])
    finish: FinishReason = "length" if reason == "length" else "stop"
    meta: dict[str, Any] = {"backend": "openai", "endpoint": GENERATE_PATH, "id": data.get("request_id")}
    if choice.get("stop_reason") is not None:
        meta["matched_stop"] = choice["stop_reason"]
    usage = data.get("usage") or {}
    versions = {
        str(span.get("version")) for span in choice.get("weight_versions") or [] if isinstance(span, dict)
    }
    return GenerationResult(
        output_ids=ids,
        logprobs=logprobs,
        finish_reason=finish,
        top_logprobs=top,
        weight_version=versions.pop() if len(versions) == 1 else None,  # one policy sampled them all
        prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids)),
        meta=meta,
    )


def image_token_mismatch(recorded: Sequence[int], fed: Sequence[int]) -> str:
    """Says where vLLM's prompt ids part from the recorded ones (usually an image-token run)."""
    at = next(
        (i for i, (a, b) in enumerate(zip(recorded, fed, strict=False)) if a != b),
        min(len(recorded), len(fed)),
    )
    return (
        f"vLLM ran the model on other prompt ids than toolgym recorded ({len(fed)} ids against {len(recorded)}, "
        f"first difference at position {at}): its image processor expanded the images into other image-token "
        "runs than the model's image processor that toolgym used; serve the model directory whose "
        "preprocessor_config.json toolgym reads, or give the client that directory's processor"
    )
