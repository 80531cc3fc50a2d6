"""The retrieval server and client over real HTTP on loopback (Search-R1's /retrieve API)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from toolgym.plugins.search.client import RetrievalClient, RetrievalError
from toolgym.plugins.search.index import SearchIndex
from toolgym.plugins.search.server import BackgroundServer, serve_index
from toolgym.plugins.search.tools import make_search_tool


@pytest.fixture(scope="module")
def server(bm25_index: SearchIndex) -> Iterator[BackgroundServer]:
    with serve_index(bm25_index, default_topk=2) as srv:
        yield srv


async def test_retrieve_shapes(server: BackgroundServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        health = (await http.get(f"{server.url}/health")).json()
        assert health["documents"] == 298 and health["methods"] == ["bm25"]
        body = (
            await http.post(
                f"{server.url}/retrieve",
                json={
                    "queries": ["Who first climbed Mount Woudal?", "capital of the island Sesourn"],
                    "topk": 3,
                    "return_scores": True,
                },
            )
        ).json()
        assert len(body["result"]) == 2 and len(body["result"][0]) == 3
        first = body["result"][0][0]
        assert set(first) == {"document", "score"} and set(first["document"]) == {"id", "contents"}
        assert first["document"]["id"] == "mountain-000" and first["document"]["contents"].startswith(
            "Mount Woudal\n"
        )
        assert body["result"][1][0]["document"]["id"] == "island-000"
        bare = (await http.post(f"{server.url}/retrieve", json={"queries": ["Mount Woudal"]})).json()
        assert len(bare["result"][0]) == 2 and set(bare["result"][0][0]) == {
            "id",
            "contents",
        }  # default topk, no scores


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"queries": ["x"], "topk": 1000}, 400, "topk must be between 1 and 100"),
        ({"queries": ["x"], "method": "dense"}, 400, "method 'dense' is not available"),
        ({"queries": ["x"] * 600}, 400, "at most 512"),
        ({"topk": 3}, 422, "queries"),
    ],
)
async def test_bad_requests(server: BackgroundServer, payload: dict, status: int, message: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{server.url}/retrieve", json=payload)
    assert response.status_code == status and message in response.text


async def test_client_and_tool_over_http(server: BackgroundServer, bm25_index: SearchIndex) -> None:
    client = RetrievalClient(server.url)
    hits = await client.search(["Who founded the College of Fouskholt?", "Bouwoul pudding"], 3)
    local = [bm25_index.search(q, 3) for q in ["Who founded the College of Fouskholt?", "Bouwoul pudding"]]
    assert [[h.document.id for h in per] for per in hits] == [[h.document.id for h in per] for per in local]
    assert [round(h.score, 4) for h in hits[0]] == [round(h.score, 4) for h in local[0]]
    tool = make_search_tool(RetrievalClient(f"{server.url}/retrieve"))
    out = await tool.call({"query": "What is the main ingredient of Bouwoul pudding?"})
    assert not out.error and "chestnuts" in out.text.splitlines()[0]
    # many workers share one server: concurrent calls all answer
    outs = await asyncio.gather(*(tool.call({"query": f"town {i} founded"}) for i in range(16)))
    assert all(not o.error and o.text.startswith("Doc 1") for o in outs)
    await client.aclose()


def _fake_server(handler: Any) -> BackgroundServer:
    app = FastAPI()
    app.post("/retrieve")(handler)
    return BackgroundServer(app)


async def test_client_reads_other_servers_and_retries() -> None:
    calls = {"n": 0}

    async def flaky(request: Request) -> Any:
        calls["n"] += 1
        if calls["n"] <= 2:
            return JSONResponse({"error": "warming up"}, status_code=503)
        body = await request.json()
        # a server answering bare documents in title/text form (return_scores ignored)
        return {
            "result": [
                [{"title": "T", "text": f"about {q}"} for _ in range(body["topk"])] for q in body["queries"]
            ]
        }

    with _fake_server(flaky) as srv:
        hits = await RetrievalClient(srv.url, backoff_s=0.01).search(["kites"], 2)
        assert calls["n"] == 3 and [h.document.contents for h in hits[0]] == ["T\nabout kites"] * 2
        assert hits[0][0].document.id == "0" and hits[0][0].score == 0.0
        calls["n"] = 0
        with pytest.raises(RetrievalError, match=r"failed after 2 attempt\(s\): HTTP 503"):
            await RetrievalClient(srv.url, retries=1, backoff_s=0.01).search(["kites"], 2)


async def test_client_errors() -> None:
    async def refuses(request: Request) -> Any:
        return JSONResponse({"detail": "bad topk"}, status_code=400)

    async def wrong_shape(request: Request) -> Any:
        return {"hits": []}

    with _fake_server(refuses) as srv:
        with pytest.raises(RetrievalError, match=r"refused the request \(HTTP 400: bad topk\)"):
            await RetrievalClient(srv.url).search(["q"], 1)
    with _fake_server(wrong_shape) as srv:
        with pytest.raises(RetrievalError, match="without a 'result' list"):
            await RetrievalClient(srv.url).search(["q"], 1)
    # nothing listens on the port any more: a clear error, shown to the model by the tool
    out = await make_search_tool(RetrievalClient(srv.url, retries=0)).call({"query": "q"})
    assert out.error and "cannot connect" in out.text and "toolgym index serve" in out.text
