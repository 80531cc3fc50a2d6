"""A small model server for tests and demos: SGLang's and OpenAI's protocols over a local model.

It serves any local Hugging Face model (the tiny one by default) through
:class:`~toolgym.core.llm.local.transformers_backend.TransformersBackend`, so the ids it returns for a
seed are the ids the in-process backend gives:

- ``POST /generate`` (SGLang native: ``input_ids`` or ``text``, ``sampling_params``,
  ``return_logprob``, ``top_logprobs_num``), ``GET /get_model_info``, ``GET /health``;
- ``POST /v1/completions`` (prompt as token ids or text; ``logprobs``; ``return_token_ids`` and
  ``return_tokens_as_token_ids`` as vLLM and SGLang spell them), ``POST /v1/chat/completions``
  (renders the chat template with tools, samples, parses Hermes ``<tool_call>`` blocks),
  ``GET /v1/models``;
- ``GET|POST /toolgym/faults``: fault injection (fail the next N generation requests with a given
  status, add latency) so retry and timeout paths can be tested over real HTTP.

:func:`serve` runs it on a free loopback port in a background thread and waits until it answers.
FastAPI and uvicorn are needed (``pip install 'toolgym[dev]'``); they are imported lazily. (No
``from __future__ import annotations`` here: FastAPI reads the handlers' annotations at runtime.)
"""

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from toolgym.core.util.http_server import BackgroundServer

from ...errors import ConfigError, LLMError
from ..local.transformers_backend import TransformersBackend

GENERATION_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")


@dataclass
class Faults:
    """Faults applied to generation requests (``GENERATION_PATHS``), changeable while serving."""

    fail_next: int = 0
    """How many of the next generation requests to answer with ``status`` instead."""
    status: int = 503
    latency_s: float = 0.0
    """Extra seconds before every generation request is handled."""
    retry_after_s: float | None = None
    """If set, sent as ``Retry-After`` with injected failures."""
    requests: int = 0
    """Generation requests received so far (failed ones included)."""
    failed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def fail(self, n: int, status: int = 503) -> None:
        with self._lock:
            self.fail_next, self.status = n, status

    def take(self) -> tuple[float, int | None]:
        """Count one request; return (latency to add, status to fail with or None)."""
        with self._lock:
            self.requests += 1
            if self.fail_next > 0:
                self.fail_next -= 1
                self.failed += 1
                return self.latency_s, self.status
            return self.latency_s, None

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


def create_app(
    backend: TransformersBackend, *, model_name: str | None = None, faults: Faults | None = None
) -> Any:
    """The FastAPI application serving ``backend``."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, Response
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigError(
            "the model server needs FastAPI and uvicorn: pip install 'toolgym[dev]' (or fastapi uvicorn)"
        ) from exc
    from .server_protocols import HTTPFail, Protocols

    faults = faults if faults is not None else Faults()
    name = model_name or backend.model_name
    proto = Protocols(backend, name)
    app = FastAPI(title="toolgym model server", docs_url=None, redoc_url=None)
    app.state.faults = faults
    app.state.backend = backend

    @app.middleware("http")
    async def inject_faults(request: Request, call_next: Any) -> Any:
        if request.method == "POST" and request.url.path in GENERATION_PATHS:
            latency, status = faults.take()
            if latency:
                await asyncio.sleep(latency)
            if status is not None:
                headers = (
                    {"Retry-After": f"{faults.retry_after_s:g}"} if faults.retry_after_s is not None else None
                )
                body = {
                    "error": {"message": f"injected fault: HTTP {status}", "type": "injected", "code": status}
                }
                return JSONResponse(body, status_code=status, headers=headers)
        return await call_next(request)

    async def handle(request: Request, fn: Any) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return _error(JSONResponse, 400, "the request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(JSONResponse, 400, "the request body must be a JSON object")
        try:
            return JSONResponse(await fn(body))
        except HTTPFail as exc:
            return _error(JSONResponse, exc.status, str(exc))
        except LLMError as exc:
            return _error(JSONResponse, 503 if exc.transient else 400, str(exc))

    @app.get("/health")
    async def health() -> Any:
        return Response(status_code=200)

    @app.get("/get_model_info")
    async def model_info() -> Any:
        return {
            "model_path": backend.model_path or name,
            "tokenizer_path": backend.model_path,
            "is_generation": True,
            "weight_version": backend.weight_version,
            "served_model_name": name,
        }

    @app.get("/v1/models")
    async def models() -> Any:
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "toolgym",
                    "root": backend.model_path,
                    "max_model_len": backend.max_context,
                }
            ],
        }

    @app.get("/toolgym/faults")
    async def get_faults() -> Any:
        return faults.state()

    @app.post("/toolgym/faults")
    async def set_faults(request: Request) -> Any:
        body = await request.json()
        kinds = {"fail_next": int, "status": int, "latency_s": float, "retry_after_s": float}
        try:
            changes = {
                k: (None if body[k] is None and k == "retry_after_s" else kinds[k](body[k]))
                for k in kinds
                if k in body
            }
        except (TypeError, ValueError):
            return _error(JSONResponse, 400, f"fault settings must be numbers: {', '.join(kinds)}")
        with faults._lock:
            for key, value in changes.items():
                setattr(faults, key, value)
        return faults.state()

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        return await handle(request, proto.sglang_generate)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await handle(request, proto.completions)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await handle(request, proto.chat_completions)

    return app


def _error(response_cls: Any, status: int, message: str) -> Any:
    kind = "BadRequestError" if status < 500 else "ServiceUnavailableError"
    return response_cls(
        {"error": {"message": message, "type": kind, "code": status}, "message": message}, status_code=status
    )


class ServerThread(BackgroundServer):
    """The model server running in a background thread on a loopback port.

    ``url`` is its address (``http://127.0.0.1:PORT``), ``faults`` its live fault settings.
    """

    name = "model server"

    def __init__(
        self,
        backend: TransformersBackend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str | None = None,
        faults: Faults | None = None,
        owns_backend: bool = False,
    ) -> None:
        super().__init__(host=host, port=port)
        self.backend = backend
        self.faults = faults if faults is not None else Faults()
        self.model_name = model_name or backend.model_name
        self.owns_backend = owns_backend

    def make_app(self) -> Any:
        return create_app(self.backend, model_name=self.model_name, faults=self.faults)

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        if self.owns_backend:
            asyncio.run(self.backend.aclose())


@contextmanager
def serve(
    model: str | TransformersBackend = "tiny",
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    model_name: str | None = None,
    faults: Faults | None = None,
    **backend_options: Any,
) -> Iterator[ServerThread]:
    """Serve ``model`` (``tiny``, ``tiny-llama``, a model directory, or a backend) for the block.

    >>> with serve("tiny") as server:            # doctest: +SKIP
    ...     backend = SGLangBackend(server.url)
    """
    if isinstance(model, TransformersBackend):
        backend, owns = model, False
    else:
        from ..resolve import resolve_model_dir

        directory = resolve_model_dir(model)
        if directory is None:
            raise ConfigError(
                f"cannot serve {model!r}: give 'tiny', 'tiny-llama' or a local Hugging Face model directory"
            )
        backend, owns = (
            TransformersBackend(directory, model_name=model_name or str(model), **backend_options),
            True,
        )
    server = ServerThread(
        backend,
        host=host,
        port=port,
        model_name=model_name or backend.model_name,
        faults=faults,
        owns_backend=owns,
    )
    with server:
        yield server
