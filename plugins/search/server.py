"""toolgym's retrieval server: one index shared by many rollout workers, over Search-R1's HTTP API.

``POST /retrieve`` takes ``{"queries": [str, ...], "topk": k, "return_scores": bool}`` and answers
``{"result": [per query: [...]]}`` where each entry is ``{"document": {"id", "contents"}, "score": s}``
when ``return_scores`` is true, and the bare document ``{"id", "contents"}`` when it is false —
the shape Search-R1's ``retrieval_server.py`` returns, so its clients work against this server and
:class:`~toolgym.plugins.search.client.RetrievalClient` works against theirs. ``topk`` missing or 0
means the server's default. A ``method`` field (``bm25``, ``dense``, ``hybrid``) is a toolgym
extension. ``GET /health`` reports the passage count and the methods.

FastAPI and uvicorn are imported lazily (``pip install 'toolgym[search]'``). No ``from __future__
import annotations`` here: FastAPI reads the handlers' annotations at run time.
"""

import asyncio
from typing import Any, Optional

from toolgym import BackgroundServer, ConfigError

from .index import SearchIndex

MAX_QUERIES = 512
"""Queries one request may carry."""
MAX_TOPK = 100


def _fastapi() -> Any:
    try:
        import fastapi
    except ImportError as exc:
        raise ConfigError(
            "the retrieval server needs FastAPI and uvicorn: pip install 'toolgym[search]' "
            "(or pip install fastapi uvicorn)"
        ) from exc
    return fastapi


def create_app(index: SearchIndex, *, default_topk: int = 3, default_method: str = "bm25") -> Any:
    """The FastAPI application serving ``index``."""
    fastapi = _fastapi()
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel

    if default_method not in index.methods:
        raise ConfigError(
            f"default method {default_method!r} is not available; this index has {', '.join(index.methods)}"
        )

    class RetrieveRequest(BaseModel):
        queries: list[str]
        topk: Optional[int] = None  # noqa: UP045 - FastAPI evaluates this at run time
        return_scores: bool = False
        method: Optional[str] = None  # noqa: UP045

    app = fastapi.FastAPI(title="toolgym retrieval server", docs_url=None, redoc_url=None)

    def bad(message: str) -> Any:
        return JSONResponse({"error": message, "detail": message}, status_code=400)

    @app.get("/health")
    async def health() -> Any:
        return {
            "status": "ok",
            "documents": len(index.docs),
            "methods": list(index.methods),
            "default_topk": default_topk,
            "default_method": default_method,
        }

    @app.post("/retrieve")
    async def retrieve(request: RetrieveRequest) -> Any:
        if len(request.queries) > MAX_QUERIES:
            return bad(f"{len(request.queries)} queries in one request; send at most {MAX_QUERIES}")
        topk = request.topk or default_topk
        if not 0 < topk <= MAX_TOPK:
            return bad(f"topk must be between 1 and {MAX_TOPK}, got {topk}")
        method = request.method or default_method
        if method not in index.methods:
            return bad(f"method {method!r} is not available; this index has {', '.join(index.methods)}")
        hits = await asyncio.to_thread(lambda: [index.search(q, topk, method) for q in request.queries])
        if request.return_scores:
            return {"result": [[h.to_json() for h in per_query] for per_query in hits]}
        return {"result": [[h.document.to_json() for h in per_query] for per_query in hits]}

    return app


def serve_index(
    index: SearchIndex,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    default_topk: int = 3,
    default_method: str = "bm25",
) -> BackgroundServer:
    """A retrieval server for ``index`` (not yet started: use it as a context manager)."""
    return BackgroundServer(
        create_app(index, default_topk=default_topk, default_method=default_method), host=host, port=port
    )
