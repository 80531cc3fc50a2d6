"""Web search: off by default; the SearXNG and Brave providers against a local fake engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from toolgym.core.errors import ConfigError, ToolExecutionError
from toolgym.plugins.search.server import BackgroundServer
from toolgym.plugins.search.tools import web_search
from toolgym.plugins.search.web import (
    BraveProvider,
    SearxngProvider,
    WebResult,
    WebSearchProvider,
    provider_from_env,
)

PAGES = [
    (f"Page <b>{i}</b>", f"https://example.org/{i}", f"Snippet number {i} about kites.") for i in range(8)
]


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[BackgroundServer, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    app = FastAPI()

    @app.get("/search")
    async def searxng(request: Request) -> Any:
        seen.append({"path": "/search", **dict(request.query_params)})
        if request.query_params.get("format") != "json":
            return JSONResponse({"error": "format"}, status_code=403)
        return {
            "query": request.query_params["q"],
            "results": [{"title": t, "url": u, "content": s} for t, u, s in PAGES],
        }

    @app.get("/res/v1/web/search")
    async def brave(request: Request) -> Any:
        seen.append(
            {
                "path": "brave",
                "token": request.headers.get("x-subscription-token"),
                **dict(request.query_params),
            }
        )
        if request.headers.get("x-subscription-token") != "good-key":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        count = int(request.query_params["count"])
        return {"web": {"results": [{"title": t, "url": u, "description": s} for t, u, s in PAGES[:count]]}}

    @app.get("/busy/search")
    async def busy(request: Request) -> Any:
        return JSONResponse({}, status_code=429)

    with BackgroundServer(app) as srv:
        yield srv, seen


async def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLGYM_WEB_SEARCH", raising=False)
    assert provider_from_env() is None
    out = await web_search.call({"query": "kites"})
    assert out.error and "web search is off" in out.text


async def test_searxng(
    engine: tuple[BackgroundServer, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, seen = engine
    results = await SearxngProvider(srv.url).search("kites", 3)
    assert results == [
        WebResult(f"Page {i}", f"https://example.org/{i}", f"Snippet number {i} about kites.")
        for i in range(3)
    ]
    assert seen[-1] == {"path": "/search", "q": "kites", "format": "json"}
    monkeypatch.setenv("TOOLGYM_WEB_SEARCH", "searxng")
    monkeypatch.setenv("TOOLGYM_SEARXNG_URL", srv.url)
    out = await web_search.call({"query": "kites", "k": 2})
    assert (
        not out.error
        and out.text.startswith("1. Page 0\n   https://example.org/0")
        and "2. Page 1" in out.text
    )
    assert out.metadata == {"urls": ["https://example.org/0", "https://example.org/1"], "provider": "searxng"}


async def test_brave(
    engine: tuple[BackgroundServer, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, seen = engine
    endpoint = f"{srv.url}/res/v1/web/search"
    results = await BraveProvider(api_key="good-key", endpoint=endpoint).search("kites", 4)
    assert len(results) == 4 and results[3].title == "Page 3"
    assert seen[-1]["token"] == "good-key" and seen[-1]["count"] == "4"
    with pytest.raises(ToolExecutionError, match="refused \\(HTTP 401\\): check the API key"):
        await BraveProvider(api_key="bad", endpoint=endpoint).search("kites", 2)
    monkeypatch.setenv("TOOLGYM_WEB_SEARCH", "brave")
    monkeypatch.setenv("TOOLGYM_BRAVE_API_KEY", "good-key")
    monkeypatch.setenv("TOOLGYM_BRAVE_URL", endpoint)
    out = await web_search.call({"query": "kites", "k": 1})
    assert not out.error and out.metadata["urls"] == ["https://example.org/0"]


async def test_errors(
    engine: tuple[BackgroundServer, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, _ = engine
    with pytest.raises(ToolExecutionError, match="rate-limited"):
        await SearxngProvider(f"{srv.url}/busy").search("kites", 2)
    with pytest.raises(ToolExecutionError, match="cannot reach"):
        await SearxngProvider("http://127.0.0.1:9", timeout_s=2).search("kites", 2)
    monkeypatch.setenv("TOOLGYM_WEB_SEARCH", "altavista")
    with pytest.raises(ConfigError, match="unknown web search provider 'altavista'"):
        provider_from_env()
    monkeypatch.setenv("TOOLGYM_WEB_SEARCH", "searxng")
    monkeypatch.delenv("TOOLGYM_SEARXNG_URL", raising=False)
    out = await web_search.call({"query": "kites"})
    assert out.error and "needs TOOLGYM_SEARXNG_URL" in out.text


class EchoProvider(WebSearchProvider):
    name = "echo"

    async def search(self, query: str, k: int) -> list[WebResult]:
        return [WebResult(f"{query} {i}", f"https://echo/{i}", "x" * 2000) for i in range(k)]


async def test_pluggable_provider_and_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGYM_WEB_SEARCH", f"{__name__}:EchoProvider")
    out = await web_search.call({"query": "kites", "k": 10})
    assert not out.error and len(out.text) <= 3000 and "not shown: output limit" in out.text
    first = out.text.split("\n2. ")[0]
    assert len(first) <= 500 and first.endswith("…")
