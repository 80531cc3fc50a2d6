"""Wire formats of the model server (:mod:`toolgym.core.llm.serving.server`): request parsing and the
answers SGLang's ``/generate`` and OpenAI's completions and chat completions give.

Kept apart from the web framework so the shapes can be read (and checked) on their own.
Output ids always include the EOS or stop-string tokens that were sampled; only texts are trimmed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Sequence
from typing import Any

from toolgym.core.parsing.base import HermesParser
from toolgym.core.tokens.chat import ChatFormat

from ...types import ActionKind, GenerationRequest, GenerationResult, SamplingParams
from ..local.transformers_backend import TransformersBackend

_TOOL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


class HTTPFail(Exception):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def sampling_from(body: dict[str, Any], *, max_key: str, default_max: int) -> SamplingParams:
    """Parse the sampling fields both protocols share; ``HTTPFail(400)`` when one is invalid."""
    try:
        stop = body.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(str(s) for s in stop)
        top_k = int(body["top_k"]) if body.get("top_k") is not None else 0
        seed = body.get("sampling_seed", body.get("seed"))
        params = SamplingParams(
            max_new_tokens=int(body[max_key]) if body.get(max_key) is not None else default_max,
            temperature=float(body["temperature"]) if body.get("temperature") is not None else 1.0,
            top_p=float(body["top_p"]) if body.get("top_p") is not None else 1.0,
            top_k=max(top_k, 0),
            seed=None if seed is None else int(seed),
            stop=stop,
            stop_token_ids=tuple(int(t) for t in body.get("stop_token_ids") or ()),
        )
    except (TypeError, ValueError) as exc:
        raise HTTPFail(400, f"invalid sampling parameter: {exc}") from None
    if params.temperature < 0 or not 0 < params.top_p <= 1 or params.max_new_tokens < 0:
        raise HTTPFail(400, f"temperature must be ≥ 0, top_p in (0, 1] and {max_key} ≥ 0")
    return params


def _check_ids(ids: Any) -> list[int]:
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids)
    ):
        raise HTTPFail(400, "a prompt must be a non-empty list of integer token ids (or a string)")
    return ids


class Protocols:
    """The handlers: each takes a parsed JSON body and returns the JSON answer."""

    def __init__(self, backend: TransformersBackend, model_name: str) -> None:
        self.backend = backend
        self.model_name = model_name
        self.tokenizer = backend.tokenizer
        self.chat = (
            ChatFormat(backend.tokenizer) if getattr(backend.tokenizer, "chat_template", None) else None
        )
        self.parser = HermesParser()

    # -- helpers -------------------------------------------------------------------------------

    def _text(self, ids: Sequence[int], *, skip_special: bool, matched: Any = None, trim: bool = True) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)
        if trim and isinstance(matched, str) and (cut := text.find(matched)) >= 0:
            text = text[:cut]
        return text

    def _token_str(self, token: int, as_ids: bool) -> str:
        return f"token_id:{token}" if as_ids else self.tokenizer.decode([token], skip_special_tokens=False)

    def _prompts(self, value: Any, *, add_special: bool) -> tuple[list[list[int]], bool]:
        """(prompts, batched) from a string, ids, or a list of either."""
        if isinstance(value, str):
            return [self.tokenizer.encode(value, add_special_tokens=add_special)], False
        if isinstance(value, list) and value and isinstance(value[0], (list, str)):
            return [self._prompts(v, add_special=add_special)[0][0] for v in value], True
        return [_check_ids(value)], False

    async def _run(self, prompts: list[list[int]], sampling: SamplingParams) -> list[GenerationResult]:
        return list(
            await asyncio.gather(
                *(self.backend.generate(GenerationRequest(_check_ids(p), sampling)) for p in prompts)
            )
        )

    # -- SGLang native -------------------------------------------------------------------------

    async def sglang_generate(self, body: dict[str, Any]) -> Any:
        if body.get("stream"):
            raise HTTPFail(400, "streaming is not supported by the toolgym model server; send stream=false")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise HTTPFail(
                400, "sampling_params must be one JSON object (per-prompt lists are not supported)"
            )
        if body.get("input_ids") is not None:
            prompts, batched = self._prompts(body["input_ids"], add_special=False)
        elif body.get("text") is not None:
            prompts, batched = self._prompts(body["text"], add_special=True)
        else:
            raise HTTPFail(400, "give input_ids (a list of token ids) or text")
        want_lp = bool(body.get("return_logprob"))
        top_n = int(body.get("top_logprobs_num") or 0) if want_lp else 0
        sampling = sampling_from(sp, max_key="max_new_tokens", default_max=128).replace(top_logprobs=top_n)
        results = await self._run(prompts, sampling)
        outs = [self._sglang_answer(p, r, sp, want_lp, top_n) for p, r in zip(prompts, results, strict=True)]
        return outs if batched else outs[0]

    def _sglang_answer(
        self, prompt: list[int], r: GenerationResult, sp: dict[str, Any], want_lp: bool, top_n: int
    ) -> dict[str, Any]:
        matched = r.meta.get("matched_stop")
        finish = (
            {"type": "length", "length": len(r.output_ids)}
            if r.finish_reason == "length"
            else {"type": "stop", "matched": matched}
        )
        meta: dict[str, Any] = {
            "id": new_id("gen"),
            "finish_reason": finish,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(r.output_ids),
            "cached_tokens": 0,
            "weight_version": r.weight_version,
            "e2e_latency": r.latency_s,
        }
        if want_lp:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [
                [lp, t, None] for t, lp in zip(r.output_ids, r.logprobs or [], strict=True)
            ]
            if top_n:
                meta["input_top_logprobs"] = []
                meta["output_top_logprobs"] = [
                    [[lp, t, None] for t, lp in pos] for pos in r.top_logprobs or []
                ]
        text = self._text(
            r.output_ids,
            skip_special=sp.get("skip_special_tokens", True),
            matched=matched,
            trim=not sp.get("no_stop_trim"),
        )
        return {"text": text, "output_ids": r.output_ids, "meta_info": meta}

    # -- OpenAI completions --------------------------------------------------------------------

    async def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream"):
            raise HTTPFail(400, "streaming is not supported by the toolgym model server; send stream=false")
        if body.get("echo"):
            raise HTTPFail(400, "echo is not supported by the toolgym model server")
        if int(body.get("n") or 1) != 1:
            raise HTTPFail(400, "n must be 1 on the toolgym model server")
        if body.get("prompt") is None:
            raise HTTPFail(400, "prompt is required (token ids or text)")
        prompts, _ = self._prompts(body["prompt"], add_special=True)
        k = body.get("logprobs")
        sampling = sampling_from(body, max_key="max_tokens", default_max=16)
        if k is not None:
            sampling = sampling.replace(top_logprobs=int(k))
        results = await self._run(prompts, sampling)
        as_ids, want_ids = bool(body.get("return_tokens_as_token_ids")), bool(body.get("return_token_ids"))
        keep_stop = bool(body.get("include_stop_str_in_output") or body.get("no_stop_trim"))
        choices = []
        for i, (prompt, r) in enumerate(zip(prompts, results, strict=True)):
            matched = r.meta.get("matched_stop")
            choice: dict[str, Any] = {
                "index": i,
                "text": self._text(
                    r.output_ids,
                    skip_special=body.get("skip_special_tokens", True),
                    matched=matched,
                    trim=not keep_stop,
                ),
                "logprobs": self._completion_logprobs(r, as_ids) if k is not None else None,
                "finish_reason": r.finish_reason,
                "stop_reason": None if matched in self.backend.eos_token_ids else matched,
                "matched_stop": matched,
            }
            if want_ids:
                choice["token_ids"], choice["prompt_token_ids"] = r.output_ids, prompt
            choices.append(choice)
        return {
            "id": new_id("cmpl"),
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": _usage(prompts, results),
            "metadata": {"weight_version": results[0].weight_version},
        }

    def _completion_logprobs(self, r: GenerationResult, as_ids: bool) -> dict[str, Any]:
        tokens = [self._token_str(t, as_ids) for t in r.output_ids]
        lps = r.logprobs or []
        tops = []
        for pos, (token, lp) in enumerate(zip(r.output_ids, lps, strict=True)):
            entry = {
                self._token_str(t, as_ids): v for t, v in (r.top_logprobs[pos] if r.top_logprobs else [])
            }
            entry.setdefault(self._token_str(token, as_ids), lp)  # the sampled token is always listed
            tops.append(entry)
        offsets, at = [], 0
        for token in r.output_ids:
            offsets.append(at)
            at += len(self.tokenizer.decode([token], skip_special_tokens=False))
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}

    # -- OpenAI chat completions ---------------------------------------------------------------

    async def chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.chat is None:
            raise HTTPFail(400, "this model's tokenizer has no chat template; use /v1/completions")
        if body.get("stream"):
            raise HTTPFail(400, "streaming is not supported by the toolgym model server; send stream=false")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise HTTPFail(400, "messages must be a non-empty list of message objects")
        tools = body.get("tools") or None
        if body.get("tool_choice") == "none":
            tools = None
        prompt = self.chat.encode(
            self.chat.render([_plain(m) for m in messages], tools=tools, add_generation_prompt=True)
        )
        max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        sampling = sampling_from(body, max_key=max_key, default_max=256)
        if body.get("logprobs"):
            sampling = sampling.replace(top_logprobs=int(body.get("top_logprobs") or 0))
        (r,) = await self._run([prompt], sampling)
        text = self._text(r.output_ids, skip_special=True, matched=r.meta.get("matched_stop"))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = r.finish_reason
        action = self.parser.parse(text) if tools else None
        if action is not None and action.kind is ActionKind.TOOL_CALLS:
            rest = _TOOL_BLOCK.sub("", text).strip()
            message["content"] = rest or None
            message["tool_calls"] = [
                {
                    "id": new_id("call"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
                }
                for c in action.tool_calls
            ]
            finish = "tool_calls"  # type: ignore[assignment]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": self._chat_logprobs(r, bool(body.get("return_tokens_as_token_ids")))
            }
        if body.get("return_token_ids"):
            choice["token_ids"], choice["prompt_token_ids"] = r.output_ids, prompt
        return {
            "id": new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": _usage([prompt], [r]),
        }

    def _chat_logprobs(self, r: GenerationResult, as_ids: bool) -> list[dict[str, Any]]:
        def item(token: int, lp: float) -> dict[str, Any]:
            text = self._token_str(token, as_ids)
            return {"token": text, "logprob": lp, "bytes": list(text.encode())}

        out = []
        for pos, (token, lp) in enumerate(zip(r.output_ids, r.logprobs or [], strict=True)):
            entry = item(token, lp)
            entry["top_logprobs"] = [item(t, v) for t, v in (r.top_logprobs[pos] if r.top_logprobs else [])]
            out.append(entry)
        return out


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message with list-of-parts content flattened to text, as templates expect."""
    m = dict(message)
    content = m.get("content")
    if isinstance(content, list):
        m["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    elif content is None:
        m["content"] = ""
    return m


def _usage(prompts: list[list[int]], results: list[GenerationResult]) -> dict[str, int]:
    prompt = sum(len(p) for p in prompts)
    completion = sum(len(r.output_ids) for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
