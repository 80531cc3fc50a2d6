"""Fixtures for the SQL tests: a small test database as a SQLite file and on a real PostgreSQL server.

PostgreSQL: ``$TOOLGYM_TEST_POSTGRES_DSN`` (a role that may create databases and roles), or else the
server ``scripts/ensure-postgres.sh`` starts (installing it if needed, as root). If neither works the
tests fail, they are never skipped. Each test module gets its own database, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
import subprocess
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from toolgym.plugins.sql.backends import SQLiteBackend

T = TypeVar("T")
ENSURE_POSTGRES = Path(__file__).resolve().parents[3] / "scripts" / "ensure-postgres.sh"

FIXTURE_SQL = """
CREATE TABLE teams (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE people (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    team_id INTEGER REFERENCES teams(id),
    score NUMERIC(6,2),
    note TEXT
);
CREATE TABLE numbers (n INTEGER NOT NULL);
CREATE VIEW team_sizes AS SELECT t.name, COUNT(p.id) AS size FROM teams t LEFT JOIN people p ON p.team_id = t.id GROUP BY t.id, t.name;
INSERT INTO teams (id, name) VALUES (1, 'red'), (2, 'blue'), (3, 'green');
INSERT INTO people (id, name, team_id, score, note) VALUES
    (1, 'ann', 1, 9.50, NULL), (2, 'bob', 1, 7.25, 'line one
line two'), (3, 'cy', 2, NULL, 'x'), (4, 'dee', NULL, 3.00, NULL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) INSERT INTO numbers (n) SELECT x FROM c;
"""


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> SQLiteBackend:
    path = tmp_path_factory.mktemp("sql") / "fixture.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(FIXTURE_SQL)
    conn.commit()
    conn.close()
    return SQLiteBackend(path)


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    dsn = os.environ.get("TOOLGYM_TEST_POSTGRES_DSN")
    if dsn:
        return dsn
    proc = subprocess.run(["bash", str(ENSURE_POSTGRES)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not proc.stdout.strip():
        pytest.fail(
            "PostgreSQL is needed: scripts/ensure-postgres.sh failed (or set TOOLGYM_TEST_POSTGRES_DSN "
            f"to a server where the role may create databases):\n{proc.stderr[-3000:]}"
        )
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def postgres_db(postgres_dsn: str) -> Iterator[tuple[str, str, str]]:
    """(admin DSN of the test database, read-only DSN of it, its name); dropped after the module."""
    from psycopg.conninfo import make_conninfo

    from toolgym.plugins.sql.postgres import create_database, drop_database

    name = f"toolgym_test_{uuid.uuid4().hex[:10]}"
    reader = run_async(create_database(postgres_dsn, name, FIXTURE_SQL))
    try:
        yield make_conninfo(postgres_dsn, dbname=name), reader, name
    finally:
        run_async(drop_database(postgres_dsn, name))


@pytest.fixture(scope="module")
def shipped_on_postgres(postgres_dsn: str) -> Iterator[str]:
    """The admin DSN; the shipped databases created on it are dropped after the module's tests."""
    from toolgym.plugins.sql.databases import drop_shipped_postgres

    yield postgres_dsn
    run_async(drop_shipped_postgres(postgres_dsn))


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end from sync code, even where an event loop is running (own thread)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
