"""The ``search`` and ``web_search`` tools, and a factory for search tools bound to any retriever.

A retriever is anything with ``name`` and ``async search(queries, k) -> list[list[Hit]]``: an
in-process index (:class:`~toolgym.plugins.search.index.LocalRetriever`) or a retrieval server
(:class:`~toolgym.plugins.search.client.RetrievalClient`). Retrievers are named by a spec string:

- ``shipped`` (default): the corpus shipped with toolgym, indexed in memory on first use;
- ``http://host:port``: a Search-R1 style retrieval server (``toolgym index serve``);
- a directory made by ``toolgym index build``; or a ``.jsonl`` corpus, indexed in memory.

The registered ``search`` tool uses ``$TOOLGYM_SEARCH`` (a spec; default ``shipped``) and
``$TOOLGYM_SEARCH_METHOD`` (``bm25`` default, ``dense``, ``hybrid``). Tasks build their own tools
with :func:`make_search_tool`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from toolgym import ConfigError, Tool, ToolArgumentError, ToolExecutionError, ToolOutput, tool

from .client import RetrievalClient
from .corpus import Hit, load_corpus
from .format import PER_RESULT_CHARS, TOTAL_CHARS, format_hits
from .index import LocalRetriever, SearchIndex, shipped_index
from .web import format_web_results, provider_from_env

SEARCH_TIMEOUT_S = 15.0
MAX_QUERY_CHARS = 500


class Retriever(Protocol):
    name: str

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...


_retrievers: dict[tuple[str, str], Retriever] = {}
_retrievers_lock = threading.Lock()


def resolve_retriever(spec: str | None = None, method: str = "bm25") -> Retriever:
    """The retriever a spec names (see the module docstring); loaded once per process and reused."""
    spec = (spec or "shipped").strip()
    with _retrievers_lock:
        key = (spec, method)
        if key in _retrievers:
            return _retrievers[key]
        retriever: Retriever
        if spec.startswith(("http://", "https://")):
            retriever = RetrievalClient(spec, method=None if method == "bm25" else method)
        elif spec == "shipped":
            retriever = LocalRetriever(shipped_index(dense=method != "bm25"), method)
        elif Path(spec).is_dir():
            retriever = LocalRetriever(SearchIndex.load(spec), method)
        elif Path(spec).is_file():
            retriever = LocalRetriever(SearchIndex.build(load_corpus(spec), dense=method != "bm25"), method)
        else:
            raise ConfigError(
                f"search source {spec!r} is not 'shipped', an http(s) URL, an index directory "
                "or a .jsonl corpus file"
            )
        _retrievers[key] = retriever
        return retriever


def _check_query(query: str, k: int, max_k: int) -> str:
    query = " ".join(query.split())
    if not query:
        raise ToolArgumentError("the search query is empty; write the words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise ToolArgumentError(
            f"the search query is {len(query)} characters long; keep it under {MAX_QUERY_CHARS}"
        )
    if not 1 <= k <= max_k:
        raise ToolArgumentError(f"k must be between 1 and {max_k}, got {k}")
    return query


def make_search_tool(
    retriever: Retriever | Callable[[], Retriever],
    *,
    name: str = "search",
    default_k: int = 3,
    max_k: int = 10,
    per_result: int = PER_RESULT_CHARS,
    total: int = TOTAL_CHARS,
    timeout_s: float = SEARCH_TIMEOUT_S,
) -> Tool:
    """A search tool over ``retriever`` (or a function giving it, resolved at each call).

    The tool takes ``query`` (first, so tag parsers pass ``<search>…</search>`` into it) and ``k``;
    its output is :func:`~toolgym.plugins.search.format.format_hits`, capped at ``per_result`` and
    ``total`` characters; ``metadata`` holds the ids and scores of the passages returned.
    """

    async def search(query: str, k: int = default_k) -> ToolOutput:
        q = _check_query(query, k, max_k)
        if callable(retriever) and not hasattr(retriever, "search"):
            source = await asyncio.to_thread(retriever)  # may load an index: keep it off the event loop
        else:
            source = retriever  # type: ignore[assignment]
        hits = (await source.search([q], k))[0]
        return ToolOutput(
            format_hits(hits, per_result=per_result, total=total),
            metadata={"ids": [h.document.id for h in hits], "scores": [h.score for h in hits]},
        )

    search.__doc__ = f"""Search the knowledge base and return the best matching passages, best first.

    Args:
        query: What to look for, in a few words (at most {MAX_QUERY_CHARS} characters).
        k: How many passages to return (1 to {max_k}).
    """
    return tool(search, name=name, timeout_s=timeout_s)


def _default_retriever() -> Retriever:
    return resolve_retriever(
        os.environ.get("TOOLGYM_SEARCH"), os.environ.get("TOOLGYM_SEARCH_METHOD", "bm25")
    )


search = make_search_tool(_default_retriever)
"""The registered ``search`` tool (source from ``$TOOLGYM_SEARCH``, default: the shipped corpus)."""


@tool(timeout_s=30.0)
async def web_search(query: str, k: int = 5) -> ToolOutput:
    """Search the web and return the best results (title, address and snippet of each).

    Args:
        query: What to look for, in a few words.
        k: How many results to return (1 to 10).
    """
    q = _check_query(query, k, 10)
    provider = provider_from_env()
    if provider is None:
        raise ToolExecutionError(
            "web search is off here; an operator can enable it with TOOLGYM_WEB_SEARCH "
            "(searxng or brave); use the search tool instead"
        )
    results = await provider.search(q, k)
    return ToolOutput(
        format_web_results(results), metadata={"urls": [r.url for r in results], "provider": provider.name}
    )
