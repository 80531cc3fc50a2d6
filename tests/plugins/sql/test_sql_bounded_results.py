"""Bounded SQL results read as the statement alone gives them: PostgreSQL's wrapped
statements keep their values, types, order and errors, and the model's text cannot leave the
parentheses it is put in (``pg_bound``); SQLite on the host, in a process of its own, shows BLOBs by
size one row at a time, and its memory and size limits read clearly. The attacks themselves:
``test_sql_reply_memory.py``."""

from __future__ import annotations

import decimal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from toolgym.plugins.sql import pg_bound
from toolgym.plugins.sql.backends import (
    DISPLAY_RESULT_BYTES,
    ElidedBlob,
    QueryTimeout,
    ReadOnlyViolation,
    SQLError,
    SQLiteBackend,
)
from toolgym.plugins.sql.postgres import PostgresBackend
from toolgym.plugins.sql.render import CELL_CHARS, render_result
from toolgym.plugins.sql.tools import make_sql_tools

MiB = 1024 * 1024


# -- reading statements as PostgreSQL does --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "first", "body"),
    [
        ("SELECT 1", "select", "SELECT 1"),
        ("  select 1 ;  -- done\n", "select", "  select 1"),
        ("(SELECT 1) UNION (SELECT 2);;", "select", "(SELECT 1) UNION (SELECT 2)"),
        (
            "WITH x AS (SELECT ')' AS p) SELECT p FROM x",
            "with",
            "WITH x AS (SELECT ')' AS p) SELECT p FROM x",
        ),
        (
            "SELECT $$)$$, $t$ ( $t$, E'\\')', '('')', \"a)\"\"\" /* ) /* ( */ */",
            "select",
            "SELECT $$)$$, $t$ ( $t$, E'\\')', '('')', \"a)\"\"\"",
        ),
        ("SELECT a$b$ FROM t", "select", "SELECT a$b$ FROM t"),  # $ inside a name opens no quote
        ("VALUES (1), (2)", "values", "VALUES (1), (2)"),
        ("EXPLAIN SELECT 1", "explain", "EXPLAIN SELECT 1"),
        ("SELECT 1) AS z, (SELECT 2", "select", None),  # closes the parenthesis it would be put in
        ("SELECT (1", "select", None),
        ("SELECT 'open", "select", None),
        ("SELECT 1 /* open", "select", None),
        ("SELECT $x$ open", "select", None),
        (
            "SELECT x'\\', ')'",
            "select",
            "SELECT x'\\', ')'",
        ),  # not an E'' string: the backslash is a character
    ],
)
def test_parse_reads_quotes_comments_and_parentheses(sql: str, first: str, body: str | None) -> None:
    statement = pg_bound.parse(sql)
    assert (statement.first_word, statement.body) == (first, body)


@pytest.mark.parametrize("sql", ["SELECT 1; SELECT 2", "SELECT 1; DELETE FROM t", "SELECT ';'; x"])
def test_parse_refuses_a_second_statement(sql: str) -> None:
    with pytest.raises(SQLError, match="one SQL statement per call"):
        pg_bound.parse(sql)


# -- the bounded PostgreSQL result reads as the statement alone ---------------------------------------


@pytest.fixture()
async def pg(postgres_db: tuple[str, str, str]) -> AsyncIterator[PostgresBackend]:
    db = PostgresBackend(postgres_db[1])
    yield db
    await db.aclose()


async def test_values_keep_their_types_and_rows_their_order(pg: PostgresBackend) -> None:
    r = await pg.query(
        "SELECT 1::int AS i, 2.5::numeric AS n, 'a'::text AS t, '{\"k\": [1]}'::json AS j, "
        "ARRAY[1, 2] AS a, '\\x0102'::bytea AS b, NULL::text AS z, now() > '2000-01-01' AS later"
    )
    assert r.columns == ["i", "n", "t", "j", "a", "b", "z", "later"]
    assert r.rows == [(1, decimal.Decimal("2.5"), "a", {"k": [1]}, [1, 2], b"\x01\x02", None, True)]
    shown = await pg.query("SELECT '\\x0102'::bytea AS b", cell_chars=CELL_CHARS)
    assert shown.rows == [(ElidedBlob(2),)] and "<2 bytes>" in render_result(shown)
    desc = await pg.query("SELECT n FROM numbers ORDER BY n DESC LIMIT 4", cell_chars=CELL_CHARS)
    assert [n for (n,) in desc.rows] == [5000, 4999, 4998, 4997]
    same = await pg.query("SELECT 1 AS a, 2 AS a, ')' AS \"p)\"; -- a comment")
    assert same.columns == ["a", "a", "p)"] and same.rows == [(1, 2, ")")]
    assert (await pg.query("TABLE teams")).rows == [(1, "red"), (2, "blue"), (3, "green")]
    assert (await pg.query("SELECT FROM teams")).rows == [(), (), ()]
    explain = await pg.query("EXPLAIN SELECT * FROM people", cell_chars=CELL_CHARS)  # runs as it is
    assert explain.columns == ["QUERY PLAN"] and "Seq Scan on people" in explain.rows[0][0]


async def test_long_cells_are_cut_by_the_server_and_read_as_cut(pg: PostgresBackend) -> None:
    tool, _ = make_sql_tools(pg, sandbox=False)
    out = await tool.call({"query": "SELECT repeat('ab', 50000) AS big, 'small' AS s"})
    row = out.text.splitlines()[1]
    assert row == "ab" * 99 + "a… | small", out.text
    exact = await pg.query(
        "SELECT repeat('ab', 50000) AS big"
    )  # exact values (scoring) arrive whole below the cap
    assert exact.rows == [("ab" * 50000,)]
    with pytest.raises(SQLError, match=r"column 'big' of row 1 is 20000000 bytes, more than the 16777216"):
        await pg.query("SELECT repeat('x', 20000000) AS big")


async def test_rows_stop_at_the_byte_budget(pg: PostgresBackend) -> None:
    shown = await pg.query(
        "SELECT repeat('x', 3000) FROM generate_series(1, 100000)", max_rows=100_000, cell_chars=CELL_CHARS
    )
    assert shown.truncated and 0 < len(shown.rows) < 100_000
    assert sum(len(v) for (v,) in shown.rows) <= DISPLAY_RESULT_BYTES
    with pytest.raises(SQLError, match="larger than the 16777216 bytes a result of exact values may have"):
        await pg.query("SELECT repeat('x', 10000) FROM generate_series(1, 3000)", max_rows=100_000)


async def test_the_statement_cannot_leave_its_parentheses(pg: PostgresBackend) -> None:
    # each would make the wrapper's parenthesis close early and put rows of its own beside the wrapped ones
    for escape in (
        "SELECT 1) AS z, (SELECT repeat('x', 100000)",
        "SELECT 'a' AS c1) AS q UNION ALL SELECT repeat('x', 100000) FROM (SELECT 1",
    ):
        with pytest.raises(SQLError, match="quotes, comments or parentheses do not close"):
            await pg.query(escape)
    with pytest.raises(
        SQLError, match="UNION types integer and text"
    ):  # the server's own error, from the describe
        await pg.query("SELECT 1 AS c1) AS q UNION ALL SELECT repeat('x', 100000) FROM (SELECT 1")
    with pytest.raises(SQLError, match="syntax error"):
        await pg.query("SELECT (1")
    with pytest.raises(ReadOnlyViolation, match="read-only"):
        await pg.query("SELECT 1 INTO new_table")


async def test_a_timeout_while_large_rows_arrive_says_so(pg: PostgresBackend) -> None:
    with pytest.raises(QueryTimeout, match=r"ran past the 1s time limit and was stopped"):
        await pg.query(
            "SELECT repeat('x', 10000000), pg_sleep(0.3) FROM generate_series(1, 100)",
            max_rows=100,
            timeout_s=1.0,
            cell_chars=CELL_CHARS,
        )
    assert (await pg.query("SELECT 7")).rows == [(7,)]


# -- SQLite from the host, in a process of its own ------------------------------------------------------


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reply-memory") / "odd ?#% name.sqlite"  # any file name works
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);")
    conn.commit()
    conn.close()
    return path


COUNT = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) "


async def test_sqlite_blobs_are_shown_by_size_one_row_at_a_time(small_db: Path) -> None:
    db = SQLiteBackend(small_db, memory_bytes=512 * MiB)
    shown = await db.query(COUNT.format(n=4) + "SELECT zeroblob(100000000) FROM c", cell_chars=CELL_CHARS)
    assert shown.rows == [(ElidedBlob(100_000_000),)] * 4  # 4 x 200 MB at once would not fit in 512 MiB
    assert (await db.query("SELECT a FROM t ORDER BY a")).rows == [(1,), (2,)]


async def test_sqlite_memory_and_size_limits_read_clearly(small_db: Path) -> None:
    db = SQLiteBackend(small_db, memory_bytes=256 * MiB)
    with pytest.raises(SQLError, match="needed more than the 256 MiB of memory a query may use"):
        await db.query("SELECT randomblob(300000000)", cell_chars=CELL_CHARS)
    shown = await db.query(
        COUNT.format(n=100_000) + "SELECT substr(hex(zeroblob(200)), 1, 300) FROM c",
        max_rows=100_000,
        cell_chars=CELL_CHARS,
    )
    assert shown.truncated and 1000 < len(shown.rows) < 100_000  # stopped at the 1 MiB budget, not an error
    with pytest.raises(SQLError, match="more than the 16777216 bytes"):
        await db.query(COUNT.format(n=10_000) + "SELECT hex(zeroblob(1000)) FROM c", max_rows=100_000)


async def test_an_explain_runs_apart_and_reads_as_before(pg: PostgresBackend) -> None:
    plan = await pg.query("EXPLAIN SELECT * FROM people WHERE name = 'ann'", cell_chars=CELL_CHARS)
    assert plan.columns == ["QUERY PLAN"] and plan.rows[0][0].startswith("Seq Scan on people")
    assert any("Filter: (name = 'ann'::text)" in r[0] for r in plan.rows)
    as_json = await pg.query("EXPLAIN (FORMAT JSON) SELECT 1")  # exact values: the plan as psycopg loads it
    assert as_json.rows[0][0][0]["Plan"]["Node Type"] == "Result"
    folded = await pg.query("EXPLAIN VERBOSE SELECT repeat('x', 1000000)", cell_chars=CELL_CHARS)
    assert render_result(folded).splitlines()[2] == "  Output: '" + "x" * 188 + "…"
    with pytest.raises(SQLError, match="one SQL statement per call"):
        await pg.query("EXPLAIN SELECT 1; SELECT 2")
    with pytest.raises(SQLError, match="syntax error"):
        await pg.query("EXPLAIN SELEC 1")
    with pytest.raises(QueryTimeout, match=r"ran past the 1s time limit"):
        await pg.query("EXPLAIN ANALYZE SELECT pg_sleep(3)", timeout_s=1.0)
