"""The HTTP plumbing shared by the server clients (SGLang, OpenAI-compatible).

Every failure becomes an ``LLMError`` whose ``transient`` flag says whether retrying can help:
connection errors, timeouts, 408, 425, 429 and 5xx (but 501) are transient; other 4xx are not
(the request itself is wrong). The engine's policy retries transient errors with backoff; the
client can also retry on its own (``retries``), honouring ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from toolgym.core.util.retry import backoff_delay

from ...errors import LLMError

TRANSIENT_4XX = frozenset({408, 425, 429})


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_4XX or (status >= 500 and status != 501)


def error_from_response(response: httpx.Response, what: str) -> LLMError:
    """An ``LLMError`` for a non-2xx answer, with the server's own message when it gave one."""
    status = response.status_code
    detail = _server_message(response)
    hint = (
        "retrying may help"
        if is_transient_status(status)
        else "the request was rejected; check the model name and parameters"
    )
    return LLMError(
        f"{what} answered HTTP {status}: {detail} ({hint})",
        transient=is_transient_status(status),
        status=status,
    )


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict):
        for key in ("error", "message", "detail"):
            value = body.get(key)
            if isinstance(value, dict):
                value = value.get("message") or json.dumps(value)
            if value:
                return str(value)[:500]
    return json.dumps(body)[:500]


class HTTPClient:
    """A pooled ``httpx.AsyncClient`` per event loop, JSON in and out, errors classified.

    ``timeout_s`` bounds each request (read and write), ``connect_timeout_s`` the connection.
    ``retries`` extra attempts are made for transient errors, with exponential backoff from
    ``backoff_s`` (jittered, capped at 20 s, or the server's ``Retry-After``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        retries: int = 0,
        backoff_s: float = 0.5,
        max_connections: int = 256,
        headers: dict[str, str] | None = None,
        label: str = "server",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.headers = dict(headers or {})
        self.label = label
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            # A pool belongs to the loop it was opened on; a new loop (asyncio.run again) needs its own.
            self._client = httpx.AsyncClient(
                base_url=self.base_url, timeout=self.timeout, limits=self.limits, headers=self.headers
            )
            self._loop = loop
        return self._client

    async def post_json(self, path: str, payload: dict[str, Any]) -> Any:
        return await self._request("POST", path, payload)

    async def get_json(self, path: str) -> Any:
        return await self._request("GET", path, None)

    def get_json_sync(self, path: str, timeout_s: float = 10.0) -> Any:
        """A blocking GET, for set-up steps that run before any event loop (tokenizer discovery)."""
        try:
            response = httpx.get(self.base_url + path, timeout=timeout_s, headers=self.headers)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.label, self.base_url + path, timeout_s) from exc
        if response.status_code >= 400:
            raise error_from_response(response, f"{self.label} {path}")
        return response.json()

    def get_json_or_none(self, path: str, timeout_s: float = 10.0) -> Any:
        """``get_json_sync``, or None when the server has no such route or does not answer (optional probes)."""
        try:
            return self.get_json_sync(path, timeout_s)
        except (LLMError, ValueError):
            return None

    async def _request(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        attempt = 0
        while True:
            attempt += 1
            delay: float | None = None
            try:
                response = await self._session().request(method, path, json=payload)
                if response.status_code < 400:
                    try:
                        return response.json()
                    except (json.JSONDecodeError, ValueError) as exc:
                        raise LLMError(
                            f"{self.label} {path} answered with invalid JSON: {response.text[:200]!r}"
                        ) from exc
                error = error_from_response(response, f"{self.label} {path}")
                delay = _retry_after(response)
            except httpx.HTTPError as exc:
                error = _transport_error(exc, self.label, self.base_url + path, self.timeout_s)
            if not error.transient or attempt > self.retries:
                raise error
            await asyncio.sleep(backoff_delay(attempt, self.backoff_s, retry_after_s=delay))

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and not client.is_closed:
            try:
                await client.aclose()
            except RuntimeError:  # opened on a loop that is gone
                pass


def _transport_error(exc: httpx.HTTPError, label: str, url: str, timeout_s: float) -> LLMError:
    if isinstance(exc, httpx.TimeoutException):
        return LLMError(
            f"{label} at {url} did not answer within {timeout_s:g}s ({type(exc).__name__})", transient=True
        )
    if isinstance(exc, httpx.TransportError):
        return LLMError(
            f"cannot reach {label} at {url}: {type(exc).__name__}: {exc}; is it running?", transient=True
        )
    return LLMError(f"{label} request to {url} failed: {type(exc).__name__}: {exc}")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
