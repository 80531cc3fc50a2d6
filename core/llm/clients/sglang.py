"""Client of SGLang's native ``/generate`` endpoint: token ids in, token ids and logprobs out.

Request (one prompt)::

    {"input_ids": [...], "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k",
     "stop", "stop_token_ids", "sampling_seed", "skip_special_tokens", "no_stop_trim"},
     "return_logprob": true, "logprob_start_len": -1, "top_logprobs_num": k}

Answer: ``{"text", "output_ids", "meta_info": {"id", "finish_reason": {"type": "stop"|"length"|
"abort", "matched"|"length"|"message"...}, "prompt_tokens", "completion_tokens", "weight_version",
"output_token_logprobs": [[logprob, token_id, text|null], ...], "output_top_logprobs": [[[logprob,
token_id, text|null], ...] per position]}}`` (the shapes of SGLang's tokenizer manager).
``output_ids`` include the EOS or stop-string tokens the model sampled; only ``text`` is trimmed.

Images (a vision-language model's screenshots) go beside the ids as ``"image_data": ["data:image/png;
base64,...", ...]``, one entry per image in prompt order (``GenerateReqInput.image_data``; SGLang
loads URLs, paths, base64 and ``data:`` URLs alike). The ids keep each image's expanded run
(``<|vision_start|>`` + pads + ``<|vision_end|>``): SGLang's Qwen-VL processor matches such runs
(its ``image_token_regex``) and expands them again from the images it processed, so the answer's
``meta_info.prompt_tokens`` is checked to equal the number of ids sent. SGLang resizes Qwen-VL images
itself before its processor runs (to multiples of 28 pixels, Qwen's 14-pixel patches merged 2x2,
``multimodal/processors/qwen_vl.py``), so a model with other patches (``tiny-vl``: 8 pixels) may get
other counts there: that check turns it into an error, not a different prompt.

The server's context limit (``max_model_len`` on ``/v1/models``, else ``context_length`` on
``/get_server_info``) is read at start-up (``max_context_len``). SGLang's logprobs are of the
temperature-scaled distribution unless it runs with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``; that is
checked before the first call at ``0 < T != 1`` as for the OpenAI backend
(:mod:`~toolgym.core.llm.clients.server_info`).

``sampling_seed`` is honoured by SGLang only when the server runs with deterministic sampling
enabled; otherwise the same seed may give different samples (ids and logprobs stay faithful).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConfigError, LLMError
from ...tokens.images import data_url
from ...types import FinishReason, GenerationRequest, GenerationResult, SamplingParams
from ..base import LLMBackend
from .http import HTTPClient, is_transient_status
from .server_info import PROBE_TOP, LogprobsCheck, context_limit

SGLANG_HINT = "restart SGLang without SGLANG_RETURN_ORIGINAL_LOGPROB"


class SGLangBackend(LLMBackend):
    """Generates through a running SGLang server (or anything speaking its ``/generate``).

    ``tokenizer`` is a tokenizer object, a local directory, or ``"tiny"``; when omitted, the
    server's ``/get_model_info`` is asked for its tokenizer path, which must exist on this machine.
    """

    name = "sglang"

    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: Any = None,
        model_name: str | None = None,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        retries: int = 0,
        backoff_s: float = 0.5,
        max_connections: int = 256,
        api_key: str | None = None,
        logprobs_mode: str = "auto",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"SGLang server address {base_url!r} must start with http:// or https://")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.http = HTTPClient(
            base_url,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            retries=retries,
            backoff_s=backoff_s,
            max_connections=max_connections,
            headers=headers,
            label="SGLang server",
        )
        self.base_url = self.http.base_url
        info: dict[str, Any] = {}
        if tokenizer is None or model_name is None:
            info = _model_info(self.http, need=tokenizer is None)
        self.tokenizer = _tokenizer(tokenizer, info, self.base_url)
        self.model_name = model_name or str(info.get("model_path") or "sglang")
        self.max_context_len: int | None = context_limit(
            self.http.get_json_or_none("/v1/models")
        ) or context_limit(self.http.get_json_or_none("/get_server_info"))
        """The server's context length (prompt plus completion), when it reports one."""
        self.logprobs = LogprobsCheck(logprobs_mode, server=self.base_url, hint=SGLANG_HINT)
        """Whether the server's logprobs are temperature-scaled (probed before the first call at 0 < T != 1)."""

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        mode = await self.logprobs.check(
            request.sampling.temperature, lambda t: self._top_at(request.input_ids, t, request.images)
        )
        payload = generate_payload(request.input_ids, request.sampling, request.images)
        data = await self.http.post_json("/generate", payload)
        result = parse_generate_response(data, request.sampling.top_logprobs)
        if request.images and result.prompt_tokens and result.prompt_tokens != len(request.input_ids):
            raise LLMError(
                f"SGLang ran the model on {result.prompt_tokens} prompt ids for the {len(request.input_ids)} "
                "toolgym recorded: its image processor expanded the images into other image-token runs "
                "than the model's image processor toolgym used (see SGLang's Qwen-VL resizing in the "
                "client's docstring)"
            )
        result.prompt_tokens = result.prompt_tokens or len(request.input_ids)
        result.meta["logprobs_mode"] = mode
        if request.request_id:
            result.meta["request_id"] = request.request_id
        return result

    async def _top_at(
        self, prompt_ids: Sequence[int], temperature: float, images: Sequence[bytes] = ()
    ) -> dict[int, float]:
        """One token at ``temperature``: the top logprobs of its position (the logprobs-mode probe)."""
        sp = SamplingParams(max_new_tokens=1, temperature=temperature, top_logprobs=PROBE_TOP)
        data = await self.http.post_json("/generate", generate_payload(prompt_ids, sp, images))
        top = parse_generate_response(data, PROBE_TOP).top_logprobs
        return dict(top[0]) if top else {}

    async def aclose(self) -> None:
        await self.http.aclose()


def sampling_params(sp: SamplingParams) -> dict[str, Any]:
    """SGLang's ``sampling_params`` for our settings (``top_k`` 0 becomes SGLang's -1)."""
    out: dict[str, Any] = {
        "max_new_tokens": sp.max_new_tokens,
        "temperature": sp.temperature,
        "top_p": sp.top_p,
        "top_k": sp.top_k if sp.top_k > 0 else -1,
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if sp.stop:
        out["stop"] = list(sp.stop)
    if sp.stop_token_ids:
        out["stop_token_ids"] = list(sp.stop_token_ids)
    if sp.seed is not None:
        out["sampling_seed"] = sp.seed
    return out


def generate_payload(
    input_ids: Sequence[int], sp: SamplingParams, images: Sequence[bytes] = ()
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "input_ids": list(input_ids),
        "sampling_params": sampling_params(sp),
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": sp.top_logprobs,
    }
    if images:
        body["image_data"] = [data_url(image) for image in images]
    return body


def parse_generate_response(data: Any, top_logprobs: int = 0) -> GenerationResult:
    """Turn one ``/generate`` answer into a ``GenerationResult``; raise ``LLMError`` if it is not
    token-faithful (ids missing, or logprobs for other tokens than the ones returned)."""
    if isinstance(data, list):
        if len(data) != 1:
            raise LLMError(f"SGLang server answered {len(data)} results for one prompt")
        data = data[0]
    if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
        raise LLMError(f"SGLang server answer has no meta_info: {str(data)[:200]}")
    meta = data["meta_info"]
    finish, matched = _finish(meta.get("finish_reason"))
    entries = meta.get("output_token_logprobs")
    ids = data.get("output_ids")
    if ids is None and entries is not None:
        ids = [int(e[1]) for e in entries]
    if ids is None:
        raise LLMError(
            "SGLang server returned no output_ids; run SGLang with a tokenizer-free or input_ids request (send input_ids, not text)"
        )
    ids = [int(t) for t in ids]
    logprobs: list[float] | None = None
    if entries is not None:
        if len(entries) != len(ids) or any(int(e[1]) != t for e, t in zip(entries, ids, strict=False)):
            raise LLMError(
                "SGLang server returned logprobs for other tokens than its output_ids; the result is not token-faithful"
            )
        logprobs = [float(e[0]) if e[0] is not None else float("nan") for e in entries]
    top = None
    if top_logprobs:
        raw_top = meta.get("output_top_logprobs") or []
        top = [[(int(e[1]), float(e[0])) for e in (pos or [])][:top_logprobs] for pos in raw_top]
        if len(top) != len(ids):
            raise LLMError(f"SGLang server returned top logprobs for {len(top)} of {len(ids)} output tokens")
    version = meta.get("weight_version")
    extra = {"backend": "sglang", "id": meta.get("id"), "cached_tokens": meta.get("cached_tokens")}
    if matched is not None:
        extra["matched_stop"] = matched
    return GenerationResult(
        output_ids=ids,
        logprobs=logprobs,
        finish_reason=finish,
        top_logprobs=top,
        weight_version=None if version is None else str(version),
        prompt_tokens=int(meta.get("prompt_tokens") or 0),
        meta={k: v for k, v in extra.items() if v is not None},
    )


def _finish(reason: Any) -> tuple[FinishReason, Any]:
    if reason is None:
        return "stop", None
    if isinstance(reason, str):
        kind, matched, message, status = reason, None, reason, None
    else:
        kind, matched = reason.get("type"), reason.get("matched")
        message, status = reason.get("message") or "aborted", reason.get("status_code")
    if kind == "length":
        return "length", None
    if kind == "abort":
        transient = status is None or is_transient_status(int(status))
        raise LLMError(f"SGLang server aborted the request: {message}", transient=transient, status=status)
    return "stop", matched


def _model_info(http: HTTPClient, *, need: bool) -> dict[str, Any]:
    try:
        info = http.get_json_sync("/get_model_info")
    except LLMError as exc:
        if need:
            raise ConfigError(
                f"could not ask {http.base_url} for its tokenizer ({exc}); pass the model's tokenizer with --tokenizer"
            ) from exc
        return {}
    return info if isinstance(info, dict) else {}


def _tokenizer(tokenizer: Any, info: dict[str, Any], base_url: str) -> Any:
    from ..local.hf_tokenizer import load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    for key in ("tokenizer_path", "model_path"):
        path = info.get(key)
        if path:
            try:
                return load_tokenizer(str(path))
            except ConfigError:
                continue
    raise ConfigError(
        f"the server at {base_url} serves {info.get('model_path')!r}, which is not a directory on this machine; "
        "pass the model's tokenizer with --tokenizer DIR"
    )
