"""The SQL tools: schemas, argument errors, rendering and output caps, timeouts, configuration."""

from __future__ import annotations

import pytest

from toolgym.plugins.sql.backends import QueryResult, SQLiteBackend
from toolgym.plugins.sql.databases import open_database, shipped_names, sqlite_path
from toolgym.plugins.sql.render import render_result
from toolgym.plugins.sql.tools import make_sql_tools, sql_query, sql_schema


def test_schemas() -> None:
    q = sql_query.schema["function"]
    assert q["name"] == "sql_query" and q["parameters"]["required"] == ["query"]
    assert "read-only SQL statement" in q["description"] and "at most 50" in q["description"]
    s = sql_schema.schema["function"]
    assert s["name"] == "sql_schema" and "required" not in s["parameters"]
    assert set(s["parameters"]["properties"]) == {"table", "sample_rows"}


async def test_query_tool(sqlite_db: SQLiteBackend) -> None:
    query, _schema = make_sql_tools(sqlite_db)
    out = await query.call({"query": "SELECT id, name, score, note FROM people ORDER BY id"})
    assert not out.error
    assert out.text.splitlines() == [
        "id | name | score | note",
        "1 | ann | 9.5 | NULL",
        "2 | bob | 7.25 | line one line two",
        "3 | cy | NULL | x",
        "4 | dee | 3 | NULL",
        "(4 rows)",
    ]
    assert out.metadata["rows"] == 4 and not out.metadata["truncated"]
    refused = await query.call({"query": "DELETE FROM people"})
    assert refused.error and refused.text.startswith("Error: the database is read-only: delete")
    wrong = await query.call({"query": "SELECT * FROM ghosts"})
    assert wrong.error and wrong.text == "Error: no such table: ghosts"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument 'query'"),
        ({"query": "  "}, "the query is empty"),
        ({"query": 5}, "argument 'query': Input should be a valid string"),
        ({"query": "SELECT 1", "limit": 3}, "unexpected argument 'limit'"),
        ({"query": "SELECT 1 " + "x" * 20_001}, "keep it under 20000"),
    ],
)
async def test_query_argument_errors(sqlite_db: SQLiteBackend, arguments: dict, message: str) -> None:
    query, _ = make_sql_tools(sqlite_db)
    out = await query.call(arguments)
    assert out.error and message in out.text


async def test_row_and_output_caps(sqlite_db: SQLiteBackend) -> None:
    query, _ = make_sql_tools(sqlite_db, max_rows=20, max_chars=10_000)
    out = await query.call({"query": "SELECT n FROM numbers"})
    lines = out.text.splitlines()
    assert (
        len(lines) == 22
        and lines[-1] == "(first 20 rows shown; the query returned more: aggregate or add a LIMIT)"
    )
    narrow, _ = make_sql_tools(sqlite_db, max_rows=1000, max_chars=300)
    out = await narrow.call({"query": "SELECT n, n * 2 AS twice FROM numbers"})
    assert len(out.text) <= 300 and "rows shown: output limit" in out.text.splitlines()[-1]
    long_cell = render_result(QueryResult(["t"], [("y" * 1000,)]), cell_chars=50)
    assert long_cell.splitlines()[1] == "y" * 49 + "…"
    assert render_result(QueryResult([], [])) == "The statement ran and returned no result set."


async def test_timeout_reaches_the_model(sqlite_db: SQLiteBackend) -> None:
    query, _ = make_sql_tools(sqlite_db, timeout_s=0.3)
    out = await query.call(
        {"query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"}
    )
    assert out.error and "0.3s time limit" in out.text


async def test_schema_tool(sqlite_db: SQLiteBackend) -> None:
    _, schema = make_sql_tools(sqlite_db)
    whole = await schema.call({})
    assert not whole.error and whole.text.startswith(
        "sqlite database, 4 table(s): numbers, people, team_sizes, teams"
    )
    assert (
        "CREATE TABLE people (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n  team_id INTEGER,\n  "
        "score NUMERIC(6,2),\n  note TEXT,\n  FOREIGN KEY (team_id) REFERENCES teams(id)\n);"
    ) in whole.text
    assert "CREATE VIEW team_sizes" in whole.text
    one = await schema.call({"table": "TEAMS", "sample_rows": 2})
    assert (
        one.text
        == "CREATE TABLE teams (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL\n);\n\nFirst 2 row(s):\nid | name\n1 | red\n2 | blue\n(2 rows)"
    )
    missing = await schema.call({"table": "ghosts"})
    assert (
        missing.error
        and "there is no table 'ghosts'; the tables are: numbers, people, team_sizes, teams" in missing.text
    )
    bad = await schema.call({"table": "teams", "sample_rows": 9})
    assert bad.error and "sample_rows must be between 0 and 5" in bad.text
    (capped,) = [t for t in make_sql_tools(sqlite_db, max_chars=120) if t.name == "sql_schema"]
    short = await capped.call({})
    assert len(short.text) <= 120 and "call again with one table name" in short.text


async def test_configured_database(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("TOOLGYM_SQL_DATABASE", raising=False)
    out = await sql_query.call({"query": "SELECT 1"})
    assert (
        out.error
        and "set TOOLGYM_SQL_DATABASE" in out.text
        and "shipped:NAME (company, library, shop)" in out.text
    )
    monkeypatch.setenv("TOOLGYM_SQL_DATABASE", "shipped:library")
    out = await sql_query.call({"query": "SELECT COUNT(*) FROM books"})
    assert not out.error and out.text.splitlines()[1] == "30"
    monkeypatch.setenv("TOOLGYM_SQL_DATABASE", str(tmp_path / "nope.db"))
    out = await sql_schema.call({})
    assert out.error and "is not 'shipped:NAME', a postgresql:// URL or a SQLite file" in out.text


def test_shipped_databases_build_once() -> None:
    assert shipped_names() == ["company", "library", "shop"]
    path = sqlite_path("shop")
    assert path.is_file() and sqlite_path("shop") == path and path.stat().st_size > 0
    assert open_database("shipped:shop") is open_database("shipped:shop")
