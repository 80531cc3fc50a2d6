"""The search tool: schema, argument errors, timeouts, output caps, sources."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from toolgym.core.errors import ConfigError
from toolgym.core.parsing.base import XMLTagParser
from toolgym.core.types import ActionKind
from toolgym.plugins.search.corpus import Hit
from toolgym.plugins.search.index import LocalRetriever, SearchIndex
from toolgym.plugins.search.tools import make_search_tool, resolve_retriever, search


def test_schema() -> None:
    params = search.schema["function"]["parameters"]
    assert search.name == "search" and params["required"] == ["query"]
    assert params["properties"]["k"] == {
        "default": 3,
        "description": "How many passages to return (1 to 10).",
        "type": "integer",
    }
    assert "Search the knowledge base" in search.description


async def test_registered_tool_searches_the_shipped_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLGYM_SEARCH", raising=False)
    out = await search.call({"query": "Who first climbed Mount Woudal?", "k": 2})
    assert not out.error and out.text.startswith("Doc 1(Title: Mount Woudal)") and "Tobin Buwe" in out.text
    assert out.metadata["ids"][0] == "mountain-000" and len(out.metadata["ids"]) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument 'query'"),
        ({"query": "x", "k": "many"}, "argument 'k': Input should be a valid integer"),
        ({"query": "x", "n": 3}, "unexpected argument 'n'"),
        ({"query": "   "}, "the search query is empty"),
        ({"query": "x", "k": 0}, "k must be between 1 and 10, got 0"),
        ({"query": "x", "k": 11}, "k must be between 1 and 10, got 11"),
        ({"query": "word " * 200}, "keep it under 500"),
    ],
)
async def test_argument_errors_are_readable(arguments: dict, message: str) -> None:
    out = await search.call(arguments)
    assert out.error and message in out.text


class SlowRetriever:
    name = "slow"

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        await asyncio.sleep(5)
        return [[] for _ in queries]


async def test_timeout() -> None:
    slow = make_search_tool(SlowRetriever(), timeout_s=0.1)
    out = await slow.call({"query": "anything"})
    assert out.error and out.metadata["timed_out"] and "timed out after 0.1s" in out.text


async def test_output_caps(bm25_index: SearchIndex) -> None:
    tool = make_search_tool(LocalRetriever(bm25_index), default_k=10, per_result=60, total=400)
    out = await tool.call({"query": "town founded river"})
    assert not out.error and len(out.text) <= 400
    assert all(len(line) <= 60 + len("Doc 10(Title: ") + 40 for line in out.text.splitlines())
    assert out.text.splitlines()[-1].endswith("not shown: output limit]")


async def test_sources(tmp_path: Path, bm25_index: SearchIndex) -> None:
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text(
        '{"id": "a", "title": "Kettle", "text": "A kettle boils water."}\n'
        '{"id": "b", "title": "Anvil", "text": "An anvil is struck with hammers."}\n'
    )
    hits = (await resolve_retriever(str(corpus)).search(["hammer"], 3))[0]
    assert [h.document.id for h in hits] == ["b"]
    bm25_index.save(tmp_path / "idx")
    assert resolve_retriever(str(tmp_path / "idx")).name == "local-bm25"
    assert resolve_retriever("shipped") is resolve_retriever("shipped")
    with pytest.raises(ConfigError, match="not 'shipped', an http"):
        resolve_retriever(str(tmp_path / "nothing-here"))
    with pytest.raises(ConfigError, match="not available for this index"):
        LocalRetriever(bm25_index, "dense")


def test_xml_parser_feeds_the_query() -> None:
    action = XMLTagParser().parse("<think>hm</think><search> Mount Woudal </search>", {"search": search})
    assert action.kind is ActionKind.TOOL_CALLS and action.tool_calls[0].arguments == {
        "query": " Mount Woudal "
    }
