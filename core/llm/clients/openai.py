"""OpenAI-compatible clients.

``OpenAICompletionsBackend`` (``openai``) is token-faithful: it posts ``/v1/completions`` with the
prompt as a list of token ids and asks for the sampled ids back, through the extensions vLLM and
SGLang share (``return_token_ids: true`` → ``choices[i].token_ids`` and ``prompt_token_ids``) and
vLLM's ``return_tokens_as_token_ids: true`` (logprob tokens spelled ``"token_id:123"``), used as a
fallback when ``token_ids`` is absent. A server that gives neither is refused rather than trusted.

The server's context limit (``max_model_len`` on ``/v1/models``) is read at start-up
(``max_context_len``; the engine caps its context budget to it). Its logprob convention is
checked before the first call at a temperature other than 0 and 1 (see
:mod:`~toolgym.core.llm.clients.server_info`): a server that returns unscaled logprobs there (vLLM's
default ``--logprobs-mode raw_logprobs``) is refused, since its logprobs would not be those of the
distribution that was sampled. ``logprobs_mode="processed"`` skips that probe.

A prompt with images (a vision-language model's screenshots) goes to vLLM's tokens-in/tokens-out
``/inference/v1/generate`` instead, the images as ``image_url`` parts with ``data:`` URLs, and the
prompt ids vLLM expands them into are checked against the recorded ones
(:mod:`~toolgym.core.llm.clients.vllm_tokens`). The client reads the model's image processor
(``preprocessor_config.json``) from the directory its tokenizer comes from, so the engine renders
each image as the run of image tokens the model sees.

``OpenAIChatBackend`` (``openai-chat``) is for black-box chat models: messages and tools in, text
and tool calls out. Its trajectories are marked not token-faithful.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import ConfigError, LLMError
from ...tokens.vision import IMAGE_PAD
from ...types import (
    ChatResult,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    Message,
    SamplingParams,
    ToolCall,
)
from ..base import ChatBackend, LLMBackend
from .http import HTTPClient
from .server_info import PROBE_TOP, LogprobsCheck, context_limit
from .vllm_tokens import (
    GENERATE_PATH,
    SCALE_OUT_HINT,
    collapse_image_runs,
    generate_payload,
    optional_sampling,
    parse_generate,
)

TOKEN_ID_PREFIX = "token_id:"
VLLM_HINT = "restart vLLM with --logprobs-mode processed_logprobs (`toolgym serve --engine vllm` does)"


def api_root(url: str) -> str:
    """The server root for an address given with or without a trailing ``/v1``."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _client(base_url: str, api_key: str | None, label: str, **http: Any) -> HTTPClient:
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"server address {base_url!r} must start with http:// or https://")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    return HTTPClient(api_root(base_url), headers=headers, label=label, **http)


class OpenAICompletionsBackend(LLMBackend):
    """Token-faithful generation through ``/v1/completions`` of vLLM or SGLang.

    ``served_model`` is the model name the server knows (default: the first of ``/v1/models``). ``tokenizer`` is an
    object, a local directory or ``"tiny"``; by default the ``root`` that ``/v1/models`` reports
    (vLLM) or SGLang's ``/get_model_info`` path is used when it exists on this machine.
    ``logprobs_mode`` is ``auto`` (probe the server), or what the server is known to return:
    ``processed`` (temperature-scaled) or ``raw`` (unscaled: refused at ``0 < T != 1``).
    ``image_processor`` is a vision-language model's (default: the one saved beside the tokenizer,
    if any); with one, prompts with images go to ``/inference/v1/generate`` (module docstring).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: Any = None,
        served_model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        retries: int = 0,
        backoff_s: float = 0.5,
        max_connections: int = 256,
        logprobs_mode: str = "auto",
        image_processor: Any = None,
    ) -> None:
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.http = _client(
            base_url,
            api_key,
            "completions server",
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            retries=retries,
            backoff_s=backoff_s,
            max_connections=max_connections,
        )
        self.base_url = self.http.base_url
        candidates: list[str] = []
        model = served_model
        if model is None or tokenizer is None:
            model, candidates = self._discover(model)
        self.model_name = model or ""
        self.tokenizer = _tokenizer(tokenizer, candidates, self.base_url)
        self.image_processor = image_processor or _image_processor(tokenizer, candidates, self.tokenizer)
        """A vision-language model's image processor (None for a text model): the engine expands each
        image into the run of image tokens it gives, and such prompts go to ``/inference/v1/generate``."""
        self.max_context_len: int | None = self._context_limit()
        """The server's context length (prompt plus completion), when it reports one."""
        self.logprobs = LogprobsCheck(logprobs_mode, server=self.base_url, hint=VLLM_HINT)
        """Whether the server's logprobs are temperature-scaled (probed before the first call at 0 < T != 1)."""

    def _context_limit(self) -> int | None:
        """The served model's ``max_model_len`` from ``/v1/models``, if the server reports one."""
        answer = self.http.get_json_or_none("/v1/models")
        cards = [
            c for c in (answer.get("data") or [] if isinstance(answer, dict) else []) if isinstance(c, dict)
        ]
        return context_limit(*([c for c in cards if c.get("id") == self.model_name] or cards))

    def _discover(self, model: str | None) -> tuple[str | None, list[str]]:
        candidates: list[str] = []
        try:
            cards = self.http.get_json_sync("/v1/models").get("data") or []
        except (LLMError, AttributeError) as exc:
            raise ConfigError(
                f"could not list the models of {self.base_url} ({exc}); is the server running? pass served_model= and tokenizer= otherwise"
            ) from exc
        card = next((c for c in cards if c.get("id") == model), cards[0] if cards else None)
        if card is None:
            raise ConfigError(f"{self.base_url}/v1/models lists no model; give the served model name")
        model = model or card.get("id")
        candidates += [str(p) for p in (card.get("root"), card.get("id")) if p]
        try:
            info = self.http.get_json_sync("/get_model_info")
            candidates += [
                str(info[k])
                for k in ("tokenizer_path", "model_path")
                if isinstance(info, dict) and info.get(k)
            ]
        except LLMError:
            pass
        return model, candidates

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        mode = await self.logprobs.check(
            request.sampling.temperature, lambda t: self._top_at(request.input_ids, t, request.images)
        )
        if request.images:
            result = await self._generate_with_images(request.input_ids, request.images, request.sampling)
        else:
            payload = completions_payload(self.model_name, request.input_ids, request.sampling)
            data = await self.http.post_json("/v1/completions", payload)
            result = parse_completion(
                data, request.sampling.top_logprobs, prompt_ids=request.input_ids, tokenizer=self.tokenizer
            )
        result.meta["logprobs_mode"] = mode
        if request.request_id:
            result.meta["request_id"] = request.request_id
        return result

    async def _generate_with_images(
        self, input_ids: Sequence[int], images: Sequence[bytes], sp: SamplingParams
    ) -> GenerationResult:
        """vLLM's ``/inference/v1/generate``: each image's run collapsed to one pad (vLLM expands it),
        the images as ``data:`` URLs; the prompt ids vLLM expanded must equal ``input_ids``."""
        if self.image_processor is None:
            raise LLMError(
                f"the prompt has {len(images)} image(s) but {self.model_name or self.base_url} has no image "
                "processor here; serve a vision-language model whose directory holds preprocessor_config.json"
            )
        pad = int(self.tokenizer.convert_tokens_to_ids(IMAGE_PAD))
        sent = collapse_image_runs(input_ids, pad, len(images))
        try:
            data = await self.http.post_json(
                GENERATE_PATH, generate_payload(self.model_name, sent, images, sp)
            )
        except LLMError as exc:
            if exc.status in (403, 404):  # vLLM answers 403 without --enable-scale-out
                raise LLMError(f"{self.base_url} has no {GENERATE_PATH}: {SCALE_OUT_HINT}") from exc
            raise
        return parse_generate(data, sp.top_logprobs, prompt_ids=input_ids)

    async def _top_at(
        self, prompt_ids: Sequence[int], temperature: float, images: Sequence[bytes] = ()
    ) -> dict[int, float]:
        """One token at ``temperature``: the top logprobs of its position (the logprobs-mode probe)."""
        sp = SamplingParams(max_new_tokens=1, temperature=temperature, top_logprobs=PROBE_TOP)
        if images:
            top = (await self._generate_with_images(prompt_ids, images, sp)).top_logprobs
        else:
            data = await self.http.post_json(
                "/v1/completions", completions_payload(self.model_name, prompt_ids, sp)
            )
            top = parse_completion(data, PROBE_TOP, tokenizer=self.tokenizer).top_logprobs
        return dict(top[0]) if top else {}

    async def aclose(self) -> None:
        await self.http.aclose()


def completions_payload(model: str, input_ids: Sequence[int], sp: SamplingParams) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(input_ids),
        "max_tokens": sp.max_new_tokens,
        "temperature": sp.temperature,
        "top_p": sp.top_p,
        "n": 1,
        "stream": False,
        "logprobs": max(1, sp.top_logprobs),
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
        "include_stop_str_in_output": True,  # vLLM; SGLang's spelling follows
        "no_stop_trim": True,
    }
    body.update(optional_sampling(sp))
    return body


def parse_completion(
    data: Any, top_logprobs: int = 0, *, prompt_ids: Sequence[int] | None = None, tokenizer: Any = None
) -> GenerationResult:
    """One ``/v1/completions`` answer → ``GenerationResult``; ``LLMError`` if not token-faithful."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"completions answer has no choices: {str(data)[:200]}") from None
    echoed = choice.get("prompt_token_ids")
    if prompt_ids is not None and echoed is not None and list(echoed) != list(prompt_ids):
        raise LLMError(
            "the server conditioned on other prompt ids than those sent (it re-tokenized the prompt); the result is not token-faithful"
        )
    lp = choice.get("logprobs") or {}
    tokens = lp.get("tokens") or []
    ids = choice.get("token_ids")
    if ids is None:
        parsed = [_token_id(t) for t in tokens]
        if not tokens or any(t is None for t in parsed):
            raise LLMError(
                "the completions server returned no token ids: use vLLM ≥ 0.10.2 or a recent SGLang "
                "(return_token_ids), or the sglang backend; text answers are not token-faithful"
            )
        ids = parsed
    ids = [int(t) for t in ids]
    values = lp.get("token_logprobs")
    logprobs = None
    if values is not None:
        if len(values) != len(ids):
            raise LLMError(
                f"the server returned {len(values)} logprobs for {len(ids)} output tokens; the result is not token-faithful"
            )
        logprobs = [float(v) if v is not None else float("nan") for v in values]
    top = None
    if top_logprobs:
        top = [_top_entries(pos, top_logprobs, tokenizer) for pos in (lp.get("top_logprobs") or [])]
        if len(top) != len(ids):
            raise LLMError(f"the server returned top logprobs for {len(top)} of {len(ids)} output tokens")
    reason = choice.get("finish_reason")
    if reason == "abort":
        raise LLMError("the server aborted the request", transient=True)
    finish: FinishReason = "length" if reason == "length" else "stop"
    usage = data.get("usage") or {}
    meta: dict[str, Any] = {"backend": "openai", "id": data.get("id")}
    matched = choice.get("stop_reason", choice.get("matched_stop"))
    if matched is not None:
        meta["matched_stop"] = matched
    version = (
        (data.get("metadata") or {}).get("weight_version") if isinstance(data.get("metadata"), dict) else None
    )
    return GenerationResult(
        output_ids=ids,
        logprobs=logprobs,
        finish_reason=finish,
        top_logprobs=top,
        weight_version=None if version is None else str(version),
        prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids or [])),
        meta=meta,
    )


def _token_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX):
        try:
            return int(token[len(TOKEN_ID_PREFIX) :])
        except ValueError:
            return None
    return None


def _top_entries(position: dict[str, float] | None, k: int, tokenizer: Any) -> list[tuple[int, float]]:
    """Top alternatives keyed ``token_id:N`` (or by token text, mapped back when it is one token)."""
    out: list[tuple[int, float]] = []
    for key, value in (position or {}).items():
        token = _token_id(key)
        if token is None and tokenizer is not None:
            ids = tokenizer.encode(key, add_special_tokens=False)
            token = ids[0] if len(ids) == 1 else None
        if token is not None:
            out.append((token, float(value)))
    out.sort(key=lambda e: -e[1])
    return out[:k]


def _image_processor(given: Any, candidates: list[str], tokenizer: Any) -> Any:
    """The image processor saved beside the tokenizer (the ``--tokenizer`` directory, the server's
    model directory, or where the tokenizer object was loaded from), or None."""
    from ...tokens.vision import load_image_processor

    paths = [given] if isinstance(given, str) else []
    paths += [*candidates, str(getattr(tokenizer, "name_or_path", "") or "")]
    for path in paths:
        if path and Path(path).is_dir():
            processor = load_image_processor(path)
            if processor is not None:
                return processor
    return None


def _tokenizer(tokenizer: Any, candidates: list[str], base_url: str) -> Any:
    from ..local.hf_tokenizer import load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    for path in candidates:
        try:
            return load_tokenizer(path)
        except (ConfigError, OSError):
            continue
    raise ConfigError(
        f"none of {candidates or ['(no model path reported)']} served by {base_url} is a directory on this machine; pass the model's tokenizer with --tokenizer DIR"
    )


class OpenAIChatBackend(ChatBackend):
    """A chat-completions API (OpenAI, or any compatible server): text and tool calls out.

    ``served_model`` is the model to ask for (``gpt-4o-mini``...; default: the first of
    ``/v1/models``).     ``api_key`` defaults to ``$OPENAI_API_KEY``. ``top_k`` is not part of this API and is not
    sent; anything else a server accepts can go in ``extra_body``. Newer OpenAI models want
    ``max_tokens_field="max_completion_tokens"``.
    """

    name = "openai-chat"

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        *,
        served_model: str | None = None,
        api_key: str | None = None,
        tokenizer: Any = None,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        retries: int = 0,
        backoff_s: float = 0.5,
        max_connections: int = 64,
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.http = _client(
            base_url,
            api_key,
            "chat server",
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            retries=retries,
            backoff_s=backoff_s,
            max_connections=max_connections,
        )
        self.base_url = self.http.base_url
        self.model_name = served_model or ""
        self.tokenizer = tokenizer
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})

    async def chat(
        self, messages: Sequence[Message], *, tools: Sequence[dict[str, Any]] | None, sampling: SamplingParams
    ) -> ChatResult:
        if not self.model_name:
            cards = (await self.http.get_json("/v1/models")).get("data") or []
            if not cards:
                raise LLMError(f"{self.base_url}/v1/models lists no model; pass served_model=")
            self.model_name = cards[0]["id"]
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": wire_messages(messages),
            self.max_tokens_field: sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if tools:
            body["tools"], body["tool_choice"] = [_tool_schema(t) for t in tools], "auto"
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        body.update(self.extra_body)
        return parse_chat_completion(await self.http.post_json("/v1/chat/completions", body))

    async def aclose(self) -> None:
        await self.http.aclose()


def wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as the chat API wants them: tool-call arguments as JSON strings, ids filled in."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant turn's calls, for tool messages lacking one
    for message in messages:
        m = {
            k: v for k, v in message.items() if k in ("role", "content", "name", "tool_calls", "tool_call_id")
        }
        if m.get("tool_calls"):
            calls: list[dict[str, Any]] = []
            for i, call in enumerate(m["tool_calls"]):
                fn = call.get("function", call)
                args = fn.get("arguments", {})
                calls.append(
                    {
                        "id": call.get("id") or f"call_{len(out)}_{i}",
                        "type": "function",
                        "function": {
                            "name": fn["name"],
                            "arguments": args
                            if isinstance(args, str)
                            else json.dumps(args, ensure_ascii=False),
                        },
                    }
                )
            m["tool_calls"], pending = calls, [str(c["id"]) for c in calls]
        if m.get("role") == "tool":
            m.pop("name", None)
            if not m.get("tool_call_id") and pending:
                m["tool_call_id"] = pending.pop(0)
        out.append(m)
    return out


def _tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def parse_chat_completion(data: Any) -> ChatResult:
    """One ``/v1/chat/completions`` answer → ``ChatResult``.

    A tool call whose arguments are not valid JSON is not returned as a call: it is written back
    into the text in Hermes form, so the episode's parser reports the error to the model.
    """
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"chat answer has no message: {str(data)[:200]}") from None
    text = message.get("content") or ""
    if isinstance(text, list):
        text = "".join(part.get("text", "") for part in text if isinstance(part, dict))
    calls: list[ToolCall] = []
    broken: list[str] = []
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        raw = fn.get("arguments")
        try:
            args = raw if isinstance(raw, dict) else json.loads(raw or "{}")
        except json.JSONDecodeError:
            broken.append(
                f'<tool_call>\n{{"name": {json.dumps(fn.get("name"))}, "arguments": {raw}}}\n</tool_call>'
            )
            continue
        if not isinstance(args, dict):
            broken.append(
                f'<tool_call>\n{{"name": {json.dumps(fn.get("name"))}, "arguments": {raw}}}\n</tool_call>'
            )
            continue
        calls.append(
            ToolCall(
                name=str(fn.get("name", "")),
                arguments=args,
                id=str(call.get("id") or f"call_{i}"),
                raw=raw if isinstance(raw, str) else json.dumps(raw),
            )
        )
    if broken:
        text, calls = "\n".join([text, *broken]).strip(), []
    usage = {k: int(v) for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
    finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
    return ChatResult(text=text, tool_calls=calls, finish_reason=finish, usage=usage)
