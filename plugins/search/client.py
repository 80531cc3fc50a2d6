"""A client for any retrieval server that speaks Search-R1's ``POST /retrieve`` API (toolgym's own
``toolgym index serve``, Search-R1's ``retrieval_server.py``, FlashRAG-style servers).

Async (httpx), one connection pool per event loop, a timeout on every request, and retries with
backoff on connection errors and 5xx answers. Both answer shapes are read: entries
``{"document": {...}, "score": s}`` and bare documents (``return_scores`` false on the server side);
documents may carry ``contents`` or ``title``/``text``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

import httpx

from toolgym import ToolExecutionError

from .corpus import Document, Hit


class RetrievalError(ToolExecutionError):
    """The retrieval server could not be reached or answered something unreadable."""


class RetrievalClient:
    """Search through a remote index. ``url`` is the server (``http://host:port``) or its ``/retrieve``."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.2,
        method: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else f"{url}/retrieve"
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.method = method
        self.name = f"http:{self.url}"
        self._transport = transport
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
            client = httpx.AsyncClient(timeout=self.timeout_s, limits=limits, transport=self._transport)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close this event loop's connection pool."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """The best ``k`` passages for each query, best first; RetrievalError when the server fails."""
        payload: dict[str, Any] = {"queries": list(queries), "topk": k, "return_scores": True}
        if self.method:
            payload["method"] = self.method
        body = await self._post(payload)
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(
                f"the retrieval server at {self.url} answered without a 'result' list of "
                f"{len(queries)} entries; is it a Search-R1 style /retrieve endpoint?"
            )
        return [[_hit(entry, i) for i, entry in enumerate(per_query)] for per_query in result]

    async def _post(self, payload: dict[str, Any]) -> Any:
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await self._client().post(self.url, json=payload)
            except httpx.TimeoutException:
                last = f"no answer within {self.timeout_s:g}s"
                continue
            except httpx.TransportError as exc:
                last = f"cannot connect ({type(exc).__name__}: {exc})"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                raise RetrievalError(
                    f"the retrieval server at {self.url} refused the request "
                    f"(HTTP {response.status_code}: {_message(response)})"
                )
            try:
                return response.json()
            except ValueError:
                raise RetrievalError(
                    f"the retrieval server at {self.url} answered with something that is not JSON"
                ) from None
        raise RetrievalError(
            f"the retrieval server at {self.url} failed after {self.retries + 1} attempt(s): {last}; "
            "check that it is running (`toolgym index serve DIR --port N`)"
        )


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        return str(body.get("error") or body.get("detail") or body)[:300]
    return str(body)[:300]


def _hit(entry: Any, rank: int) -> Hit:
    if isinstance(entry, dict) and isinstance(entry.get("document"), dict):
        score = entry.get("score")
        return Hit(
            Document.from_json(entry["document"], fallback_id=str(rank)),
            float(score) if score is not None else 0.0,
        )
    try:
        return Hit(Document.from_json(entry, fallback_id=str(rank)), 0.0)
    except Exception as exc:
        raise RetrievalError(f"the retrieval server answered an unreadable result entry: {exc}") from None
