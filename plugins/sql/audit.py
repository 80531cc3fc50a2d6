"""The SQL tool's rows of ``toolgym sandbox audit``: what its databases hold back.

- SQLite (always; a throw-away database file, a second or so): through the tool's SQLite path
  (:class:`.backends.SQLiteBackend`, the same :mod:`.readonly_sqlite` code that runs in the ``sql``
  sandbox), ``fts3_tokenizer`` (a memory address), ``ATTACH``, ``load_extension``, ``VACUUM
  INTO`` and ``readfile`` are refused, and a runaway recursive CTE is stopped by the time limit.
- PostgreSQL (when a DSN is given; otherwise one ``skip`` row per check): the DSN's role is no
  superuser, has no ``CREATEROLE`` and is in none of :data:`.pg_guard.REFUSED_MEMBERSHIPS`;
  ``pg_advisory_lock`` is refused by the statement filter and by the missing EXECUTE privilege
  (what a provisioned database has); ``pg_locks`` and ``pg_stat_activity`` show the role nothing
  of another session; and no session state a call leaves (a setting, a custom setting's
  placeholder, the ``random()`` seed, a temp table, a prepared statement) reaches the next call:
  each call runs on a server backend no earlier call used.

Each check is an async function returning a detail (pass) or raising :class:`~toolgym.sandboxes.audit.rows.Fail`;
rows are :class:`~toolgym.sandboxes.audit.rows.Row` with backend ``sqlite`` / ``postgresql`` and kind
``host`` (PostgreSQL is always reached from the host; the in-sandbox SQLite path runs this same code).
The CLI (``toolgym sandbox audit``) composes these rows after the sandbox ones: the audit package
sits below the plugins and cannot import them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym import Sandbox
from toolgym.sandboxes.audit.rows import Fail, Row, Skip, outcome

from . import pg_guard
from .backends import QueryTimeout, SQLBackend, SQLError, SQLiteBackend

DSN_ENV = "TOOLGYM_SQL_DATABASE"
"""The SQL tools' database spec; the audit reads it when it is a ``postgresql://`` URL."""
NO_DSN = "no PostgreSQL DSN configured (--sql-dsn)"
CTE_TIMEOUT_S = 1.0
"""The statement time limit the runaway CTE is given; it must stop within ``CTE_TIMEOUT_S + CTE_MARGIN_S``."""
CTE_MARGIN_S = 4.0
RUNAWAY_CTE = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000000) "
    "SELECT count(*) FROM c"
)
LOCK_PROBE = "SELECT pg_advisory_lock(4242)"

OpenSQLite = Callable[[Path], SQLBackend]
SQLiteCheck = Callable[["SQLitePlace"], Awaitable[str]]
PostgresCheck = Callable[[str], Awaitable[str]]
Progress = Callable[[Row], None]


def configured_dsn(given: str | None = None) -> str | None:
    """``given``, or ``$TOOLGYM_SQL_DATABASE`` when that is a PostgreSQL URL, or None."""
    if given:
        return given
    spec = os.environ.get(DSN_ENV, "").strip()
    return spec if spec.startswith(("postgresql://", "postgres://")) else None


# -- SQLite ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SQLitePlace:
    """Where the SQLite checks run: the tool's backend, a folder its statements could write into
    (on the host, or inside the ``sql`` sandbox), and how to tell whether a file appeared there."""

    db: SQLBackend
    folder: str
    exists: Callable[[str], Awaitable[bool]]


async def _host_exists(path: str) -> bool:
    return await asyncio.to_thread(os.path.exists, path)


async def _refused(db: SQLBackend, sql: str, what: str, *, words: Sequence[str] = ()) -> str:
    """Pass when ``sql`` raises a ``SQLError`` (whose text holds one of ``words``, if given)."""
    try:
        result = await db.query(sql, max_rows=5, timeout_s=5.0)
    except SQLError as exc:
        text = str(exc)
        if words and not any(w in text.lower() for w in words):
            raise Fail(f"{what} failed, but not as refused: {text}") from None
        return f"refused: {text[:160]}"
    raise Fail(f"{what} ran: {result.rows[:2]}")


async def sqlite_fts3_tokenizer(place: SQLitePlace) -> str:
    return await _refused(
        place.db,
        "SELECT hex(fts3_tokenizer('simple'))",
        "fts3_tokenizer('simple') (a memory address)",
        words=("not allowed", "not authorized", "no such function"),
    )


async def sqlite_attach(place: SQLitePlace) -> str:
    target = f"{place.folder}/attached.sqlite"
    detail = await _refused(place.db, f"ATTACH DATABASE '{target}' AS other", "ATTACH")
    if await place.exists(target):
        raise Fail(f"ATTACH was refused but created {target}")
    return detail


async def sqlite_load_extension(place: SQLitePlace) -> str:
    # a missing file: the error says "not authorized" when loading is off, a dlopen error when it is on
    return await _refused(
        place.db,
        f"SELECT load_extension('{place.folder}/nothing')",
        "load_extension",
        words=("not authorized", "not allowed", "no such function"),
    )


async def sqlite_vacuum_into(place: SQLitePlace) -> str:
    target = f"{place.folder}/copy.sqlite"
    try:
        detail = await _refused(place.db, f"VACUUM INTO '{target}'", "VACUUM INTO")
    finally:
        written = await place.exists(target)
    if written:
        raise Fail(f"VACUUM INTO wrote {target}")
    return detail


async def sqlite_readfile(place: SQLitePlace) -> str:
    return await _refused(
        place.db,
        "SELECT readfile('/etc/hostname')",
        "readfile('/etc/hostname')",
        words=("not allowed", "not authorized", "no such function"),
    )


async def sqlite_runaway_cte(place: SQLitePlace) -> str:
    started = time.monotonic()
    try:
        result = await asyncio.wait_for(
            place.db.query(RUNAWAY_CTE, max_rows=1, timeout_s=CTE_TIMEOUT_S), CTE_TIMEOUT_S + CTE_MARGIN_S
        )
    except QueryTimeout:
        return f"stopped after {time.monotonic() - started:.1f}s (limit {CTE_TIMEOUT_S:g}s)"
    except TimeoutError:
        raise Fail(
            f"a runaway recursive CTE still ran {CTE_TIMEOUT_S + CTE_MARGIN_S:g}s after its "
            f"{CTE_TIMEOUT_S:g}s limit"
        ) from None
    raise Fail(
        f"a runaway recursive CTE ran to its end ({result.rows}) in {time.monotonic() - started:.1f}s, "
        f"past its {CTE_TIMEOUT_S:g}s limit"
    )


SQLITE_CHECKS: list[tuple[str, SQLiteCheck]] = [
    ("sql.sqlite-fts3-tokenizer", sqlite_fts3_tokenizer),
    ("sql.sqlite-attach", sqlite_attach),
    ("sql.sqlite-load-extension", sqlite_load_extension),
    ("sql.sqlite-vacuum-into", sqlite_vacuum_into),
    ("sql.sqlite-readfile", sqlite_readfile),
    ("sql.sqlite-runaway-cte", sqlite_runaway_cte),
]


def _seen(row: Row, progress: Progress | None) -> Row:
    if progress is not None:
        progress(row)
    return row


async def _timed(name: str, backend: str, work: Callable[[], Awaitable[str]], kind: str = "host") -> Row:
    started = time.perf_counter()
    try:
        result, detail = outcome(None, await work())
    except Exception as exc:
        result, detail = outcome(exc)
    return Row(name, backend, kind, result, detail, round(time.perf_counter() - started, 2))


def _audit_database(folder: Path) -> Path:
    path = folder / "audit.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (2);")
    conn.close()
    return path


async def _place_rows(place: SQLitePlace, backend: str, kind: str, progress: Progress | None) -> list[Row]:
    return [
        _seen(await _timed(name, backend, functools.partial(check, place), kind), progress)
        for name, check in SQLITE_CHECKS
    ]


async def sqlite_rows(
    open_sqlite: OpenSQLite = SQLiteBackend, *, progress: Progress | None = None
) -> list[Row]:
    """The SQLite rows on the host path (backend ``sqlite``, kind ``host``), on a small database made
    for the audit and opened by ``open_sqlite`` (the tool's own opener by default; tests pass a weakened one)."""
    with tempfile.TemporaryDirectory(prefix="toolgym-sql-audit-") as tmp:
        db = open_sqlite(_audit_database(Path(tmp)))
        try:
            return await _place_rows(SQLitePlace(db, tmp, _host_exists), "sqlite", "host", progress)
        finally:
            await db.aclose()


async def sandbox_sqlite_rows(
    sandbox: Sandbox, backend_name: str, *, progress: Progress | None = None
) -> list[Row]:
    """The SQLite rows inside ``sandbox`` (an ``sql`` sandbox of backend ``backend_name``), through
    the tool's sandboxed path (:class:`.sandboxed.SandboxSQLiteBackend`); rows of kind ``sql``."""
    from .sandboxed import SANDBOX_DIR, SandboxSQLiteBackend

    async def exists(path: str) -> bool:
        return (await sandbox.run(["test", "-e", path], timeout=10)).exit_code == 0

    with tempfile.TemporaryDirectory(prefix="toolgym-sql-audit-") as tmp:
        db = SandboxSQLiteBackend(SQLiteBackend(_audit_database(Path(tmp))), sandbox)
        try:
            await db.prepare()
        except Exception as exc:
            result, detail = outcome(exc)
            return [_seen(Row("sql.sqlite-sandbox", backend_name, "sql", result, detail, 0.0), progress)]
        return await _place_rows(SQLitePlace(db, SANDBOX_DIR, exists), backend_name, "sql", progress)


# -- PostgreSQL ------------------------------------------------------------------------------------


def _psycopg() -> Any:
    from .postgres import _psycopg as load

    return load()


async def _connect(dsn: str, **kwargs: Any) -> Any:
    return await _psycopg().AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10, **kwargs)


async def _role_row(dsn: str) -> tuple[Any, ...]:
    async with await _connect(dsn) as conn:
        cur = await conn.execute(pg_guard.ROLE_CHECK_SQL, (list(pg_guard.REFUSED_MEMBERSHIPS),))
        return tuple(await cur.fetchone())


async def postgres_role(dsn: str) -> str:
    row = await _role_row(dsn)
    reason = pg_guard.unsafe_role_reason(row)
    if reason:
        raise Fail(reason)
    return (
        f"role '{row[0]}': no superuser or CREATEROLE, in none of {', '.join(pg_guard.REFUSED_MEMBERSHIPS)}; "
        "track_activities off"
    )


async def postgres_advisory_filter(dsn: str) -> str:
    refused = pg_guard.refusal(LOCK_PROBE)
    if refused is None:
        raise Fail(f"the statement filter lets {LOCK_PROBE!r} through")
    from .postgres import PostgresBackend

    backend = PostgresBackend(dsn, max_connections=1)
    try:
        await backend.query(LOCK_PROBE, timeout_s=5.0)
    except SQLError as exc:
        return f"the SQL tool refuses it: {str(exc).split(';')[0]}"
    finally:
        await backend.aclose()
    raise Fail(f"the SQL tool ran {LOCK_PROBE!r}")


async def postgres_advisory_privilege(dsn: str) -> str:
    row = await _role_row(dsn)
    if row[3]:
        raise Fail(pg_guard.filter_only_warning(row) or f"role '{row[0]}' may execute pg_advisory_lock")
    psycopg = _psycopg()
    async with await _connect(dsn) as conn:  # straight to the server, no statement filter
        try:
            await conn.execute(LOCK_PROBE)
        except psycopg.errors.InsufficientPrivilege:
            return f"role '{row[0]}' may not execute pg_advisory_lock (permission denied without the filter)"
        await conn.execute("SELECT pg_advisory_unlock_all()")
    raise Fail(f"role '{row[0]}' took an advisory lock straight on the server")


async def postgres_other_sessions(dsn: str) -> str:
    """A neighbour session of the same role holds a transaction open; the role, looking straight at
    the server, must see no other session in ``pg_locks`` nor ``pg_stat_activity``."""
    psycopg = _psycopg()
    async with await _connect(dsn) as neighbour, await _connect(dsn) as spy:
        await neighbour.execute("BEGIN READ ONLY")
        await neighbour.execute(
            "SELECT 'toolgym-audit-neighbour'"
        )  # holds its virtualxid lock until ROLLBACK
        pid = (await (await neighbour.execute("SELECT pg_backend_pid()")).fetchone())[0]
        seen, answers = [], []
        for view in ("pg_locks", "pg_stat_activity"):
            try:
                cur = await spy.execute(f"SELECT count(*) FROM pg_catalog.{view} WHERE pid = %s", (pid,))
                count = (await cur.fetchone())[0]
            except psycopg.errors.InsufficientPrivilege:
                answers.append(f"{view}: permission denied")
                continue
            answers.append(f"{view}: {count} rows of it")
            if count:
                seen.append(f"{view} ({count} row{'s' if count > 1 else ''})")
        await neighbour.execute("ROLLBACK")
    if seen:
        raise Fail(
            f"another session of the role (pid {pid}, a transaction open) shows in {' and '.join(seen)}"
        )
    return f"another session of the role (a transaction open) is hidden: {'; '.join(answers)}"


async def postgres_reset(dsn: str) -> str:
    """Dirty one call's session (a setting, a custom setting's placeholder, the ``random()`` seed, a
    temp table, a prepared statement); the next call must see none of it (a reset of the
    session keeps the placeholder and the seed, so the pool gives each call a new backend)."""
    from .postgres import PostgresBackend

    seed = 0.4242
    backend = PostgresBackend(dsn, max_connections=1)
    try:
        async with backend._pool().connection() as conn:  # a session left dirty, however a call got it so
            pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
            await conn.execute("SET application_name = 'toolgym-audit-dirty'")
            await conn.execute("SELECT set_config('toolgym_audit.planted', 'yes', false)")
            await conn.execute("SET default_transaction_read_only = off")
            await conn.execute("CREATE TEMP TABLE toolgym_audit_planted (v INTEGER)")
            await conn.execute("PREPARE toolgym_audit_planted AS SELECT 1")
            await conn.execute("SELECT setseed(%s)", (seed,))
        after = await backend.query(
            "SELECT pg_backend_pid(), current_setting('application_name'), "
            "current_setting('toolgym_audit.planted', true) IS NOT NULL, "
            "to_regclass('pg_temp.toolgym_audit_planted') IS NOT NULL, "
            "(SELECT count(*) FROM pg_prepared_statements WHERE name = 'toolgym_audit_planted'), random()",
            timeout_s=5.0,
        )
        async with await _connect(dsn) as conn:
            await conn.execute("SELECT setseed(%s)", (seed,))
            seeded = (await (await conn.execute("SELECT random()")).fetchone())[0]
    except SQLError as exc:
        raise Fail(f"the SQL tool could not run as this role: {exc}") from None
    finally:
        await backend.aclose()
    next_pid, app, placeholder, temp, prepared, drawn = after.rows[0]
    left = [
        what
        for what, there in (
            ("the SET", app == "toolgym-audit-dirty"),
            ("the custom setting's placeholder", placeholder),
            ("the temp table", temp),
            ("the prepared statement", prepared),
            ("the random() seed", drawn == seeded),
        )
        if there
    ]
    if left:
        raise Fail(f"the next call on the pooled connection still saw {', '.join(left)}")
    return f"SET, custom setting, random() seed, temp table, prepared statement gone on the next call (backend {pid} -> {next_pid})"


POSTGRES_CHECKS: list[tuple[str, PostgresCheck]] = [
    ("sql.postgres-role", postgres_role),
    ("sql.postgres-advisory-filter", postgres_advisory_filter),
    ("sql.postgres-advisory-privilege", postgres_advisory_privilege),
    ("sql.postgres-other-sessions", postgres_other_sessions),
    ("sql.postgres-reset", postgres_reset),
]


async def postgres_rows(dsn: str | None, *, progress: Progress | None = None) -> list[Row]:
    """The PostgreSQL rows for the role of ``dsn``; ``skip`` rows when there is none."""
    rows = []
    for name, check in POSTGRES_CHECKS:
        if not dsn:
            rows.append(_seen(await _timed(name, "postgresql", _skip), progress))
        else:
            rows.append(
                _seen(await _timed(name, "postgresql", functools.partial(_bounded, check, dsn)), progress)
            )
    return rows


async def _bounded(check: PostgresCheck, dsn: str) -> str:
    return await asyncio.wait_for(check(dsn), 60)


async def _skip() -> str:
    raise Skip(NO_DSN)


async def in_sandbox_rows(
    backend_name: str, factory: Callable[..., Any], *, progress: Progress | None = None
) -> list[Row]:
    """The SQLite rows in an ``sql`` sandbox of the backend ``factory(max_idle=1)`` makes (kind ``sql``);
    one failed ``sql.sqlite-sandbox`` row if none can be had."""
    started = time.perf_counter()
    backend = factory(max_idle=1)
    try:
        try:
            sandbox = await asyncio.wait_for(backend.acquire("sql", episode_id="audit-sql"), 120)
        except Exception as exc:
            result, detail = outcome(exc)
            row = Row(
                "sql.sqlite-sandbox",
                backend_name,
                "sql",
                result,
                detail,
                round(time.perf_counter() - started, 2),
            )
            return [_seen(row, progress)]
        return await sandbox_sqlite_rows(sandbox, backend_name, progress=progress)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(backend.aclose(), 60)


async def run_sql_audit(
    dsn: str | None = None,
    *,
    progress: Progress | None = None,
    open_sqlite: OpenSQLite = SQLiteBackend,
    sandbox_backend: tuple[str, Callable[..., Any]] | None = None,
) -> list[Row]:
    """The SQLite rows on the host path, then in an ``sql`` sandbox of ``sandbox_backend`` (``(name,
    factory)``, as :func:`toolgym.sandboxes.audit.resolve` gives) if one is given, then the
    PostgreSQL rows for ``dsn`` (or :func:`configured_dsn`)."""
    rows = await sqlite_rows(open_sqlite, progress=progress)
    if sandbox_backend is not None:
        rows += await in_sandbox_rows(*sandbox_backend, progress=progress)
    return rows + await postgres_rows(configured_dsn(dsn), progress=progress)
