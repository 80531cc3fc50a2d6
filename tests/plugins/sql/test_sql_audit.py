"""The SQL rows of ``toolgym sandbox audit``: they pass on the tool's own SQLite
path and with the provisioned reader DSN, and FAIL where the hardening is bypassed: a plain SQLite
connection, the superuser DSN, a pool that does not reset sessions."""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.plugins.sql import audit, sandboxed
from toolgym.plugins.sql.backends import QueryResult, QueryTimeout, SQLBackend, SQLError, Table
from toolgym.sandboxes.audit import FAIL, PASS, SKIP, Row
from toolgym.sandboxes.pool import PooledBackend

SQLITE_NAMES = [name for name, _ in audit.SQLITE_CHECKS]
POSTGRES_NAMES = [name for name, _ in audit.POSTGRES_CHECKS]


class PlainSQLite(SQLBackend):
    """The hardening bypassed: a writable ``sqlite3`` connection, no authorizer, no progress handler
    (``aclose`` interrupts a statement still running, so the audit's runaway CTE ends with the test)."""

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)

    def _run(self, sql: str, max_rows: int) -> QueryResult:
        try:
            cur = self.conn.execute(sql)
            rows = cur.fetchmany(max_rows) if cur.description else []
        except sqlite3.Error as exc:
            if "interrupted" in str(exc):
                raise QueryTimeout("interrupted when the backend closed") from None
            raise SQLError(str(exc)) from None
        return QueryResult([d[0] for d in cur.description or []], [tuple(r) for r in rows], False, 0.0)

    async def query(
        self, sql: str, *, max_rows: int = 100, timeout_s: float = 10.0, cell_chars: int | None = None
    ) -> QueryResult:
        return await asyncio.to_thread(self._run, sql, max_rows)

    async def tables(self, *, timeout_s: float = 10.0) -> list[Table]:
        return []

    async def aclose(self) -> None:
        self.conn.interrupt()
        await asyncio.sleep(0.2)
        self.conn.close()


def results(rows: list[Row]) -> dict[str, str]:
    return {r.check: r.result for r in rows}


async def test_sqlite_rows_pass_on_the_tools_path_and_fail_on_a_plain_connection() -> None:
    start = time.monotonic()
    good = await audit.sqlite_rows()
    assert results(good) == dict.fromkeys(SQLITE_NAMES, PASS), good
    assert all(r.backend == "sqlite" and r.kind == "host" for r in good)
    weak = await audit.sqlite_rows(PlainSQLite)
    by_name = {r.check: r for r in weak}
    # fts3_tokenizer answers an address, ATTACH and VACUUM INTO write, the CTE outlives its limit;
    # load_extension stays off in Python's sqlite3 and readfile is no function of it, whatever the opener
    assert {n for n, r in by_name.items() if r.result == FAIL} == {
        "sql.sqlite-fts3-tokenizer",
        "sql.sqlite-attach",
        "sql.sqlite-vacuum-into",
        "sql.sqlite-runaway-cte",
    }, weak
    assert "VACUUM INTO" in by_name["sql.sqlite-vacuum-into"].detail
    assert "runaway" in by_name["sql.sqlite-runaway-cte"].detail
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("name", BACKENDS)
async def test_sqlite_rows_pass_in_the_sql_sandbox_and_fail_with_a_weakened_runner(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same checks through the sandboxed path (the runner copied into an ``sql`` sandbox); a
    runner whose authorizer is gone lets fts3_tokenizer out."""

    def factory(**options: Any) -> PooledBackend:
        return make_backend(name, images=("sql",), profiles={"sql": TEST_PROFILE}, **options)

    start = time.monotonic()
    good = await audit.in_sandbox_rows(name, factory)
    assert [(r.check, r.backend, r.kind, r.result) for r in good] == [
        (n, name, "sql", PASS) for n in SQLITE_NAMES
    ], good
    source = sandboxed.runner_source().replace(b"conn.set_authorizer(authorize)", b"pass")
    assert source != sandboxed.runner_source()
    monkeypatch.setattr(sandboxed, "runner_source", lambda: source)
    weak = await audit.in_sandbox_rows(name, factory)
    assert {r.check for r in weak if r.result == FAIL} == {"sql.sqlite-fts3-tokenizer"}, weak
    assert time.monotonic() - start < 60


async def test_postgres_rows_are_skipped_without_a_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(audit.DSN_ENV, raising=False)
    rows = await audit.postgres_rows(audit.configured_dsn(None))
    assert [(r.check, r.result, r.detail) for r in rows] == [(n, SKIP, audit.NO_DSN) for n in POSTGRES_NAMES]
    monkeypatch.setenv(audit.DSN_ENV, "shipped:library")
    assert audit.configured_dsn(None) is None
    monkeypatch.setenv(audit.DSN_ENV, "postgresql://u:p@h/db")
    assert audit.configured_dsn(None) == "postgresql://u:p@h/db"
    assert audit.configured_dsn("postgresql://given") == "postgresql://given"


async def test_postgres_rows_pass_as_the_reader_and_fail_as_the_superuser(
    postgres_db: tuple[str, str, str],
) -> None:
    admin, reader, _ = postgres_db
    good = await audit.postgres_rows(reader)
    assert results(good) == dict.fromkeys(POSTGRES_NAMES, PASS), good
    bad = {r.check: r for r in await audit.postgres_rows(admin)}
    # the statement filter holds whatever the role; everything the role itself should lack, it has
    assert {n for n, r in bad.items() if r.result == FAIL} == set(POSTGRES_NAMES) - {
        "sql.postgres-advisory-filter"
    }, bad
    assert "superuser" in bad["sql.postgres-role"].detail
    assert "pg_locks" in bad["sql.postgres-other-sessions"].detail


async def test_a_pool_that_reuses_sessions_fails_the_reset_row(
    postgres_db: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgym.plugins.sql import postgres

    async def reuse(pool: Any, conn: Any, *, reset: str) -> None:
        await conn.execute(reset)
        pool.idle.append(conn)

    monkeypatch.setattr(postgres._Pool, "_retire", functools.partialmethod(reuse, reset="ROLLBACK"))
    rows = {r.check: r for r in await audit.postgres_rows(postgres_db[1])}
    assert rows["sql.postgres-reset"].result == FAIL
    for what in (
        "the SET",
        "the custom setting's placeholder",
        "the temp table",
        "the prepared statement",
        "the random() seed",
    ):
        assert what in rows["sql.postgres-reset"].detail
    # the reset the pool used to run (DISCARD ALL's steps) leaves the placeholder and the seed
    discard_all = (
        "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; "
        "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD SEQUENCES; DISCARD TEMP"
    )
    monkeypatch.setattr(postgres._Pool, "_retire", functools.partialmethod(reuse, reset=discard_all))
    detail = {r.check: r for r in await audit.postgres_rows(postgres_db[1])}["sql.postgres-reset"].detail
    assert detail.endswith("still saw the custom setting's placeholder, the random() seed"), detail


def test_the_cli_adds_the_sql_rows(
    postgres_db: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox rows are left out (tests/sandboxes/test_audit.py runs them): only the plumbing."""
    import toolgym.sandboxes.audit as sandbox_audit
    from toolgym.cli import app

    async def no_sandbox_rows(*args: object, **kwargs: object) -> list[Row]:
        return []

    monkeypatch.setattr(sandbox_audit, "run_audit", no_sandbox_rows)
    monkeypatch.delenv(audit.DSN_ENV, raising=False)
    cli = CliRunner()
    ok = cli.invoke(app, ["sandbox", "audit", "--json", "--sql-dsn", postgres_db[1]])
    assert ok.exit_code == 0, ok.output
    assert [(r["check"], r["result"]) for r in json.loads(ok.stdout)] == [
        (n, PASS) for n in SQLITE_NAMES + POSTGRES_NAMES
    ]
    from tests.plugins.sql.test_sql_postgres_security import as_url

    monkeypatch.setenv(audit.DSN_ENV, as_url(postgres_db[0]))  # how the sql tool is pointed at a server
    bad = cli.invoke(app, ["sandbox", "audit"])
    assert bad.exit_code == 1, bad.output
    assert "FAILED (sql.postgres-role (host)" in bad.output
