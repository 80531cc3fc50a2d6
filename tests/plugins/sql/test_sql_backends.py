"""Both backends, SQLite and a real PostgreSQL: reads, read-only enforcement, timeouts, row caps, schema."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from decimal import Decimal

import pytest

from toolgym.plugins.sql.backends import QueryTimeout, ReadOnlyViolation, SQLBackend, SQLError, SQLiteBackend
from toolgym.plugins.sql.postgres import PostgresBackend


@pytest.fixture(params=["sqlite", "postgres"])
async def db(request: pytest.FixtureRequest) -> AsyncIterator[SQLBackend]:
    if request.param == "sqlite":
        backend: SQLBackend = request.getfixturevalue("sqlite_db")
    else:
        _admin, reader, _name = request.getfixturevalue("postgres_db")
        backend = PostgresBackend(reader)
    yield backend
    await backend.aclose()


async def count(db: SQLBackend, table: str) -> int:
    return int((await db.query(f"SELECT COUNT(*) FROM {table}")).rows[0][0])


async def test_reads(db: SQLBackend) -> None:
    r = await db.query("SELECT name, score FROM people WHERE team_id = 1 ORDER BY id")
    assert r.columns == ["name", "score"] and not r.truncated
    assert [(n, float(s)) for n, s in r.rows] == [("ann", 9.5), ("bob", 7.25)]
    nulls = await db.query("SELECT note FROM people WHERE id IN (1, 4)")
    assert nulls.rows == [(None,), (None,)]
    view = await db.query("SELECT name, size FROM team_sizes ORDER BY name")
    assert view.rows == [("blue", 1), ("green", 0), ("red", 2)]
    assert (await db.query("WITH x AS (SELECT 2 AS v) SELECT v * 21 FROM x")).rows == [(42,)]
    assert (await db.query("SELECT id FROM people WHERE id > 100")).rows == []


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO teams (id, name) VALUES (9, 'gold')",
        "UPDATE people SET name = 'x'",
        "DELETE FROM numbers",
        "DROP TABLE people",
        "CREATE TABLE extra (a INTEGER)",
        "CREATE TEMP TABLE scratch (a INTEGER)",
        "ALTER TABLE people ADD COLUMN age INTEGER",
        "CREATE INDEX people_name ON people (name)",
    ],
)
async def test_writes_are_refused(db: SQLBackend, statement: str) -> None:
    before = (await count(db, "people"), await count(db, "numbers"), await count(db, "teams"))
    with pytest.raises(ReadOnlyViolation, match="read-only"):
        await db.query(statement)
    assert (await count(db, "people"), await count(db, "numbers"), await count(db, "teams")) == before
    names = await db.query("SELECT name FROM people ORDER BY id")
    assert [n for (n,) in names.rows] == ["ann", "bob", "cy", "dee"]


async def test_one_statement_per_call(db: SQLBackend) -> None:
    with pytest.raises(SQLError, match="one SQL statement per call"):
        await db.query("SELECT 1; DELETE FROM numbers")
    assert await count(db, "numbers") == 5000
    assert (await db.query("SELECT 1;")).rows == [(1,)]  # a trailing semicolon is fine


async def test_errors_are_the_databases_words(db: SQLBackend) -> None:
    with pytest.raises(SQLError, match=r'no such column: nope|column "nope" does not exist'):
        await db.query("SELECT nope FROM people")
    with pytest.raises(SQLError, match="syntax error"):
        await db.query("SELEC name FROM people")
    assert (await db.query("SELECT COUNT(*) FROM teams")).rows == [(3,)]  # the connection is still usable


async def test_statement_timeout(db: SQLBackend) -> None:
    forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    start = time.monotonic()
    with pytest.raises(QueryTimeout, match=r"0\.5s time limit"):
        await db.query(forever, timeout_s=0.5)
    assert time.monotonic() - start < 4.0
    assert (await db.query("SELECT 7")).rows == [(7,)]


async def test_row_cap_stops_early(db: SQLBackend) -> None:
    r = await db.query("SELECT n FROM numbers ORDER BY n", max_rows=10)
    assert r.truncated and [n for (n,) in r.rows] == list(range(1, 11))
    exact = await db.query("SELECT n FROM numbers WHERE n <= 10", max_rows=10)
    assert not exact.truncated and len(exact.rows) == 10
    # 25 million rows: streaming them all takes about 100 s (250k rows/s here), so an answer inside the 10 s statement
    # timeout (a QueryTimeout otherwise) shows the stream was cut after the first few. Not a tighter
    # bound: cancelling the rest takes seconds when the machine is busy (5.6 s seen beside another
    # pytest worker).
    start = time.monotonic()
    huge = await db.query("SELECT a.n, b.n FROM numbers a CROSS JOIN numbers b", max_rows=5, timeout_s=10)
    assert huge.truncated and len(huge.rows) == 5 and time.monotonic() - start < 10.0


async def test_schema(db: SQLBackend) -> None:
    tables = {t.name: t for t in await db.tables()}
    assert set(tables) == {"numbers", "people", "teams", "team_sizes"}
    people = tables["people"]
    assert [c.name for c in people.columns] == ["id", "name", "team_id", "score", "note"]
    assert [c.primary_key for c in people.columns] == [True, False, False, False, False]
    assert not people.columns[1].nullable and people.columns[2].nullable
    assert [(fk.columns, fk.ref_table, fk.ref_columns) for fk in people.foreign_keys] == [
        (["team_id"], "teams", ["id"])
    ]
    assert tables["team_sizes"].kind == "view" and tables["teams"].kind == "table"


async def test_sqlite_specific_refusals(
    sqlite_db: SQLiteBackend, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = tmp_path_factory.mktemp("attach") / "other.sqlite"
    with pytest.raises(ReadOnlyViolation):
        await sqlite_db.query(f"ATTACH DATABASE '{other}' AS other")
    assert not other.exists()
    for pragma in ("PRAGMA writable_schema = ON", "PRAGMA user_version = 3", "PRAGMA journal_mode = DELETE"):
        with pytest.raises(ReadOnlyViolation, match="pragma"):
            await sqlite_db.query(pragma)
    for tx in ("COMMIT", "BEGIN", "ROLLBACK"):
        with pytest.raises(ReadOnlyViolation):
            await sqlite_db.query(tx)
    info = await sqlite_db.query("PRAGMA table_info(teams)")
    assert [row[1] for row in info.rows] == ["id", "name"]
    assert (await sqlite_db.query("EXPLAIN QUERY PLAN SELECT * FROM people")).rows


async def test_sqlite_fts3_tokenizer_leaks_no_pointer(sqlite_db: SQLiteBackend) -> None:
    # fts3_tokenizer('simple') returns the address of a tokenizer module in the process running SQLite
    for query in (
        "SELECT fts3_tokenizer('simple')",
        "SELECT hex(FTS3_TOKENIZER('porter'))",
        "WITH t(n) AS (SELECT 'simple') SELECT length(fts3_tokenizer(n)) FROM t",
    ):
        with pytest.raises(ReadOnlyViolation, match="fts3_tokenizer is not allowed"):
            await sqlite_db.query(query)
    assert (await sqlite_db.query("SELECT COUNT(*) FROM teams")).rows == [(3,)]


async def test_postgres_calls_change_nothing_that_outlives_them(postgres_db: tuple[str, str, str]) -> None:
    _admin, reader, _ = postgres_db
    db = PostgresBackend(reader, max_connections=1)  # every call on the same pooled connection
    try:
        # transaction control is refused: the next call is always a fresh read-only transaction
        for statement in ("COMMIT", "SET TRANSACTION READ WRITE", "BEGIN"):
            with pytest.raises(ReadOnlyViolation, match="read-only"):
                await db.query(statement)
        with pytest.raises(ReadOnlyViolation, match="read-only transaction"):
            await db.query("WITH gone AS (DELETE FROM numbers RETURNING n) SELECT count(*) FROM gone")
        # session changes made by a query are rolled back with its transaction
        changed = await db.query("SELECT set_config('application_name', 'changed-by-model', false)")
        assert changed.rows == [("changed-by-model",)]
        assert (await db.query("SHOW application_name")).rows != [("changed-by-model",)]
        assert (await db.query("SHOW transaction_read_only")).rows == [("on",)]
        assert await count(db, "numbers") == 5000
    finally:
        await db.aclose()


async def test_postgres_reader_role_has_only_select(postgres_db: tuple[str, str, str]) -> None:
    _admin, reader, _ = postgres_db
    db = PostgresBackend(reader)
    try:
        assert (await db.query("SELECT current_user")).rows == [("toolgym_reader",)]
        # even outside the read-only transaction the role may not write: it holds SELECT only
        privileges = await db.query(
            "SELECT has_table_privilege('people', 'INSERT'), has_table_privilege('people', 'SELECT')"
        )
        assert privileges.rows == [(False, True)]
        assert (await db.query("SHOW default_transaction_read_only")).rows == [("on",)]
        # nor end another episode's session (same role) with pg_terminate_backend
        with pytest.raises(SQLError, match="permission denied for function pg_terminate_backend"):
            await db.query(
                "SELECT pg_terminate_backend(2147483647)"
            )  # (nor may it list the others: pg_stat_activity)
        score = await db.query("SELECT score FROM people WHERE id = 1")
        assert score.rows == [(Decimal("9.50"),)]
    finally:
        await db.aclose()


async def test_postgres_connection_errors_are_clear() -> None:
    db = PostgresBackend("postgresql://nobody:wrong@127.0.0.1:9/none", connect_timeout_s=2)
    with pytest.raises(SQLError, match="cannot connect to the PostgreSQL database"):
        await db.query("SELECT 1")


async def test_concurrent_queries_share_the_pool(db: SQLBackend) -> None:
    queries = [f"SELECT COUNT(*) FROM numbers WHERE n <= {i * 100}" for i in range(24)]
    results = await asyncio.gather(*(db.query(q) for q in queries))
    assert [r.rows[0][0] for r in results] == [min(i * 100, 5000) for i in range(24)]
    failing = await asyncio.gather(*(db.query("SELECT nope") for _ in range(6)), return_exceptions=True)
    assert all(isinstance(f, SQLError) for f in failing)
    assert (await db.query("SELECT 1")).rows == [(1,)]
