"""PostgreSQL: a read-only backend over psycopg 3, and the provisioning of databases for it.

Each query: the statement filter of :mod:`.pg_guard`, then ``BEGIN READ ONLY``, ``SET LOCAL
statement_timeout``, the statement itself through the extended query protocol (so one string holds
exactly one statement: ``SELECT 1; DROP …`` is refused by the server), rows streamed, each cell
cut by the server and the rows by a byte budget (:mod:`.pg_bound`), and the stream
abandoned after ``max_rows + 1``; then the connection is closed, so that no call ever runs on a
server session an earlier call used (``_Pool`` says why a reset is not enough). Connections are
opened ahead, per event loop, and each new one is checked: a role that may reach the server's
programs or files, or whose SQL other sessions can read, is refused (:func:`.pg_guard.unsafe_role_reason`). Point the backend at a role that can only
read (what :func:`create_database` sets up: SELECT grants only, ``default_transaction_read_only``,
``track_activities`` off, no advisory locks, a connection limit): then the grants are the boundary
and the transaction settings a second fence.

Needs ``psycopg`` (``pip install 'toolgym[sql]'``), imported lazily.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

from toolgym import ConfigError

from . import pg_bound, pg_guard
from .backends import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    DISPLAY_RESULT_BYTES,
    EXACT_RESULT_BYTES,
    Column,
    ForeignKey,
    QueryResult,
    QueryTimeout,
    ReadOnlyViolation,
    SQLBackend,
    SQLError,
    Table,
    UnsafeRoleError,
)

log = logging.getLogger(__name__)
_WARNED_ROLES: set[str] = set()
"""Roles already warned about (:func:`.pg_guard.filter_only_warning`), once per process."""


READER_ROLE = "toolgym_reader"
READER_PASSWORD = "toolgym_reader"
"""The read-only role that :func:`create_database` grants. Its password is not a secret: the role can
only read the benchmark databases toolgym creates. Use your own role for databases of your own."""

_COLUMNS_SQL = """
SELECT n.nspname, c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND has_table_privilege(c.oid, 'SELECT')
ORDER BY n.nspname, c.relname, a.attnum"""
_KEYS_SQL = """
SELECT n.nspname, cl.relname, con.contype,
  ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY AS k(num, ord)
        JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.ord),
  fn.nspname, fcl.relname,
  ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY AS k(num, ord)
        JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num ORDER BY k.ord)
FROM pg_constraint con JOIN pg_class cl ON cl.oid = con.conrelid JOIN pg_namespace n ON n.oid = cl.relnamespace
LEFT JOIN pg_class fcl ON fcl.oid = con.confrelid LEFT JOIN pg_namespace fn ON fn.oid = fcl.relnamespace
WHERE con.contype IN ('p', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY n.nspname, cl.relname, con.conname"""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ConfigError(
            "PostgreSQL support needs psycopg: pip install 'toolgym[sql]' (or pip install 'psycopg[binary]')"
        ) from exc
    return psycopg


def _qualified(schema: str, name: str) -> str:
    return name if schema == "public" else f"{schema}.{name}"


class _Pool:
    """Up to ``size`` connections of one event loop, each serving exactly one call.

    A call gets a server backend no earlier call has used: the connection is closed when the call
    ends, and a replacement is opened in the background for the next one (a call that finds none
    ready opens its own). A reset of the session is not enough: ``DISCARD ALL`` and
    ``RESET ALL`` leave a custom setting's placeholder for the life of the backend
    (``set_config('x.y', …)`` in one call makes ``current_setting('x.y', true)`` ``''`` instead of
    NULL in every later one), and the ``random()`` generator a ``setseed()`` left; both are written
    by plain SELECTs, and neither can be listed to be checked. The cost is a connection (and its
    role check) per call, off the call's path while calls come slower than connections open
    (``bench/sql_fresh_backend.py``, 2 shared cores, PostgreSQL 15 on loopback: p50 0.9-2.3 ms a
    call with the spare ready vs 1.2-2.0 ms for the pool that reset and reused its connection;
    14-22 ms for a call that must connect itself; connecting, authenticating and checking the role
    alone 10-14 ms)."""

    def __init__(self, dsn: str, size: int, connect_timeout_s: float) -> None:
        self.dsn, self.size, self.connect_timeout_s = dsn, size, connect_timeout_s
        self.idle: list[Any] = []
        """Connected, checked, never used."""
        self.slots = asyncio.Semaphore(size)
        self._busy = 0
        self._opening: set[asyncio.Task[None]] = set()
        self._closed = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        psycopg = _psycopg()
        async with self.slots:
            conn = None
            while self.idle and conn is None:
                conn = self.idle.pop()
                if conn.closed:
                    conn = None
            self._busy += 1
            try:
                if conn is None:
                    conn = await self._connect(psycopg)
                yield conn
            finally:
                self._busy -= 1
                if conn is not None:  # (a refused or failed connection is not retried in the background)
                    await self._retire(conn)
                    self._replenish()

    async def _connect(self, psycopg: Any) -> Any:
        """A new connection, refused (closed, ``UnsafeRoleError``) if its role is unsafe for the model."""
        try:
            # prepare_threshold None: psycopg prepares nothing of its own on the server
            conn = await psycopg.AsyncConnection.connect(
                self.dsn,
                autocommit=True,
                prepare_threshold=None,
                connect_timeout=max(1, round(self.connect_timeout_s)),
            )
        except psycopg.OperationalError as exc:
            raise SQLError(f"cannot connect to the PostgreSQL database: {str(exc).strip()}") from None
        try:
            cur = await conn.execute(pg_guard.ROLE_CHECK_SQL, (list(pg_guard.REFUSED_MEMBERSHIPS),))
            row = tuple(await cur.fetchone())
            reason = pg_guard.unsafe_role_reason(row)
        except psycopg.Error as exc:
            await conn.close()
            raise SQLError(f"cannot check the PostgreSQL role of the connection: {_message(exc)}") from None
        except BaseException:
            await conn.close()
            raise
        if reason:
            await conn.close()
            raise UnsafeRoleError(reason)
        warning = pg_guard.filter_only_warning(row)
        if warning and row[0] not in _WARNED_ROLES:
            _WARNED_ROLES.add(row[0])
            log.warning("%s", warning)
        return conn

    async def _retire(self, conn: Any) -> None:
        """End a used connection: its backend exits, and everything its session held with it
        (transaction, locks, temp tables, settings and their placeholders)."""
        with contextlib.suppress(Exception):
            await conn.close()

    def _replenish(self) -> None:
        """Open connections in the background until every free slot has one ready."""
        while not self._closed and self._busy + len(self.idle) + len(self._opening) < self.size:
            task = asyncio.get_running_loop().create_task(self._open_spare())
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open_spare(self) -> None:
        try:
            conn = await self._connect(_psycopg())
        except Exception as exc:  # the next call connects itself and reports the error
            log.debug("could not open a spare PostgreSQL connection: %s", exc)
            return
        if self._closed:
            await conn.close()
        else:
            self.idle.append(conn)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._opening):
            task.cancel()
        await asyncio.gather(*self._opening, return_exceptions=True)
        while self.idle:
            await self.idle.pop().close()


class PostgresBackend(SQLBackend):
    """A PostgreSQL database reached by ``dsn`` (a URL or ``key=value`` string)."""

    dialect = "postgresql"

    def __init__(
        self, dsn: str, *, name: str | None = None, max_connections: int = 4, connect_timeout_s: float = 5.0
    ) -> None:
        self.dsn = dsn
        self.name = name or str(_psycopg().conninfo.conninfo_to_dict(dsn).get("dbname") or "postgres")
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()

    def _pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = _Pool(self.dsn, self.max_connections, self.connect_timeout_s)
        return pool

    async def query(
        self,
        sql: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cell_chars: int | None = None,
    ) -> QueryResult:
        psycopg = _psycopg()
        errors = psycopg.errors
        refused = pg_guard.refusal(sql)
        if refused:
            kind, message = refused
            raise (ReadOnlyViolation if kind == "readonly" else SQLError)(message)
        statement = pg_bound.parse(sql)  # raises MultipleStatements
        if statement.first_word == "explain":  # a plan line may be huge: read in a process of its own
            return await pg_bound.explain_apart(
                self.dsn,
                sql,
                max_rows=max_rows,
                timeout_s=timeout_s,
                cell_chars=cell_chars,
                connect_timeout_s=self.connect_timeout_s,
            )
        start = time.perf_counter()
        async with self._pool().connection() as conn:
            columns: list[str] = []
            rows: list[tuple[Any, ...]] = []
            more = False
            try:
                # the backstop covers a server that ignores statement_timeout (or a dead network)
                async with asyncio.timeout(timeout_s + 5.0):
                    # one round trip (simple protocol); the model's statement then goes alone
                    await conn.execute(
                        f"BEGIN READ ONLY; SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}; "
                        f"{pg_bound.SETTINGS_SQL}"
                    )
                    bounded, text = await _bounded(conn, statement, sql, cell_chars)
                    budget = (
                        bounded.budget
                        if bounded
                        else EXACT_RESULT_BYTES
                        if cell_chars is None
                        else DISPLAY_RESULT_BYTES
                    )
                    used = 0
                    cur = conn.cursor()
                    try:
                        # closed explicitly: psycopg then cancels the rest of the result at once
                        async with aclosing(cur.stream(text)) as stream:
                            async for raw in stream:
                                row = (
                                    bounded.row(raw, len(rows) + 1)
                                    if bounded
                                    else pg_bound.raw_row(raw, cell_chars)
                                )
                                del raw
                                used += pg_bound.row_bytes(row)
                                if used > budget:  # rows stop at the result's byte budget
                                    if cell_chars is None:
                                        raise SQLError(
                                            f"the result is larger than the {budget} bytes a result of exact "
                                            "values may have; select fewer rows or columns, or aggregate"
                                        )
                                    more = True
                                    break
                                rows.append(row)
                                if len(rows) > max_rows:
                                    break
                    except psycopg.ProgrammingError as exc:
                        if "didn't produce a result" not in str(exc):
                            raise
                    if bounded is not None:
                        columns = bounded.names
                    elif cur.description:
                        columns = [c.name for c in cur.description]
            except TimeoutError:
                await conn.close()
                raise QueryTimeout(
                    f"the query ran past the {timeout_s:g}s time limit and was stopped{_after(rows)}"
                ) from None
            except errors.QueryCanceled:
                raise QueryTimeout(
                    f"the query ran past the {timeout_s:g}s time limit and was stopped{_after(rows)}; "
                    "simplify it or add a LIMIT"
                ) from None
            except errors.ReadOnlySqlTransaction as exc:
                raise ReadOnlyViolation(f"the database is read-only: {_message(exc)}") from None
            except errors.SyntaxError as exc:
                if "multiple commands" in str(exc):
                    raise SQLError("send one SQL statement per call") from None
                raise SQLError(_message(exc)) from None
            except psycopg.Error as exc:
                raise SQLError(_message(exc)) from None
            # the pool closes the connection: its backend, and whatever its session held, are gone
        return QueryResult(
            columns, rows[:max_rows], more or len(rows) > max_rows, time.perf_counter() - start
        )

    async def tables(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Table]:
        cols = await self.query(_COLUMNS_SQL, max_rows=1_000_000, timeout_s=timeout_s)
        keys = await self.query(_KEYS_SQL, max_rows=1_000_000, timeout_s=timeout_s)
        primary: set[tuple[str, str]] = set()
        foreign: dict[str, list[ForeignKey]] = {}
        for schema, table, kind, columns, ref_schema, ref_table, ref_columns in keys.rows:
            name = _qualified(schema, table)
            if kind == "p":
                primary.update((name, c) for c in columns)
            else:
                foreign.setdefault(name, []).append(
                    ForeignKey(list(columns), _qualified(ref_schema, ref_table), list(ref_columns))
                )
        tables: dict[str, Table] = {}
        for schema, table, relkind, column, type_name, not_null in cols.rows:
            name = _qualified(schema, table)
            entry = tables.setdefault(
                name, Table(name, [], foreign.get(name, []), "view" if relkind in ("v", "m") else "table")
            )
            is_pk = (name, column) in primary
            entry.columns.append(Column(column, str(type_name).upper(), not not_null and not is_pk, is_pk))
        return sorted(tables.values(), key=lambda t: t.name)

    async def aclose(self) -> None:
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()


async def _bounded(
    conn: Any, statement: pg_bound.Statement, sql: str, cell_chars: int | None
) -> tuple[pg_bound.BoundedResult | None, str]:
    """(how to read the rows, the SQL to run) of ``sql``: wrapped so that the server cuts every
    cell (:mod:`.pg_bound`), or as it is when it cannot return rows of the model's choosing."""
    if not statement.wrapped:
        return None, sql
    cur = conn.cursor()
    # binary: psycopg then sends it through the extended protocol, which runs exactly one statement
    if statement.body is None:  # unreadable quoting or parentheses: the server's error, or a refusal
        await cur.execute(pg_bound.describe_sql(sql), binary=True)  # no row whatever the text holds
        raise SQLError(
            "the statement's quotes, comments or parentheses do not close where PostgreSQL's do as "
            "toolgym reads them; write it without unusual quoting"
        )
    try:
        await cur.execute(pg_bound.describe_sql(statement.body), binary=True)
    except _psycopg().Error as exc:
        refusal = pg_bound.top_level_only(_message(exc))
        if refusal is None:
            raise
        raise refusal from None
    described = [(c.name, int(c.type_code)) for c in cur.description or []]
    bounded = pg_bound.BoundedResult(described, cell_chars=cell_chars)
    return bounded, bounded.sql(statement.body)


def _after(rows: list[Any]) -> str:
    """How far a stopped query had come, for its timeout message."""
    return f" (after {len(rows)} row{'s' if len(rows) != 1 else ''} had arrived)" if rows else ""


def _message(exc: Any) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    return (primary or str(exc)).strip()


# -- provisioning ----------------------------------------------------------------------------------


def reader_dsn(
    admin_dsn: str, dbname: str, *, role: str = READER_ROLE, password: str = READER_PASSWORD
) -> str:
    """The DSN of ``dbname`` as the read-only role, on the server ``admin_dsn`` points at."""
    return _psycopg().conninfo.make_conninfo(admin_dsn, dbname=dbname, user=role, password=password)


READER_SETTINGS = {
    "default_transaction_read_only": "on",
    "track_activities": "off",
    "statement_timeout": "60s",
    "idle_in_transaction_session_timeout": "60s",
    "lock_timeout": "10s",
}
"""Session defaults of the reader role: read-only; its SQL not shown to other sessions of the role in
``pg_stat_activity`` (concurrent episodes share the role); backstop timeouts behind each call's own."""


async def create_database(
    admin_dsn: str, dbname: str, script: str, *, role: str = READER_ROLE, password: str = READER_PASSWORD
) -> str:
    """Create ``dbname`` from ``script`` unless it exists, grant ``role`` read access, return its DSN.

    ``admin_dsn`` must be a superuser (only a superuser may set ``track_activities`` for a role).
    The role gets :data:`READER_SETTINGS`, no attribute beyond LOGIN, and a connection limit of
    half the server's ``max_connections`` (so readers can never take every slot); in ``dbname`` it
    gets SELECT on the tables of ``public`` and may not execute the advisory-lock functions (one
    statement could otherwise fill the server's shared lock table, and new connections to any
    database would fail), nor signal other sessions. The database is built under a temporary
    name and renamed when complete, so a crash never leaves a half-loaded one; an advisory lock
    serialises concurrent callers.
    """
    psycopg = _psycopg()
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_advisory_lock(hashtext('toolgym-provision'))")
        try:
            cur = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,))
            if await cur.fetchone() is None:
                tmp = f"{dbname[:50]}_tmp"
                await admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(tmp))
                )
                await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(tmp)))
                target = psycopg.conninfo.make_conninfo(admin_dsn, dbname=tmp)
                async with await psycopg.AsyncConnection.connect(target, autocommit=True) as conn:
                    await conn.execute(script)
                await admin.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(tmp), sql.Identifier(dbname)
                    )
                )
            await admin.execute(
                sql.SQL(
                    "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {name}) THEN "
                    "CREATE ROLE {role} LOGIN; END IF; END $$"
                ).format(name=sql.Literal(role), role=sql.Identifier(role))
            )
            await _harden_role(admin, role, password)
            await admin.execute(
                sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                    sql.Identifier(dbname), sql.Identifier(role)
                )
            )
        finally:
            await admin.execute("SELECT pg_advisory_unlock(hashtext('toolgym-provision'))")
    target = psycopg.conninfo.make_conninfo(admin_dsn, dbname=dbname)
    async with await psycopg.AsyncConnection.connect(target, autocommit=True) as conn:
        await conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        # roles may signal their own other sessions: keep one episode from ending another's
        await conn.execute(
            "REVOKE EXECUTE ON FUNCTION pg_terminate_backend(integer, bigint), "
            "pg_cancel_backend(integer) FROM PUBLIC"
        )
        # nor hold advisory locks: the lock table is shared by every database of the server
        cur = await conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = ANY(%s) "
            "AND pronamespace = 'pg_catalog'::regnamespace",
            (list(pg_guard.LOCK_FUNCTIONS),),
        )
        signatures = [row[0] for row in await cur.fetchall()]
        await conn.execute(
            sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(
                sql.SQL(", ").join(sql.SQL(s) for s in signatures)
            )
        )
        # nor read other sessions' locks and statistics (server-wide: other episodes, other databases)
        await conn.execute(pg_guard.STATS_REVOKE_SQL)
        await conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        await conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(role))
        )
    return reader_dsn(admin_dsn, dbname, role=role, password=password)


async def _harden_role(admin: Any, role: str, password: str) -> None:
    """Give ``role`` LOGIN and nothing more, :data:`READER_SETTINGS` and its connection limit."""
    psycopg = _psycopg()
    from psycopg import sql

    ident = sql.Identifier(role)
    cur = await admin.execute("SELECT current_setting('max_connections')::int")
    limit = max(1, (await cur.fetchone())[0] // 2)
    await admin.execute(
        sql.SQL(
            "ALTER ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
            "CONNECTION LIMIT {} PASSWORD {}"
        ).format(ident, sql.Literal(limit), sql.Literal(password))
    )
    for granted in pg_guard.REFUSED_MEMBERSHIPS:
        await admin.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(granted), ident))
    try:
        for name, value in READER_SETTINGS.items():
            await admin.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(ident, sql.Identifier(name), sql.Literal(value))
            )
    except psycopg.errors.InsufficientPrivilege:
        raise ConfigError(
            "the admin DSN must be a PostgreSQL superuser, to set track_activities off for the reader "
            "role; use the DSN scripts/ensure-postgres.sh prints"
        ) from None


async def drop_database(admin_dsn: str, dbname: str) -> None:
    """Drop ``dbname`` (closing its connections first); nothing happens if it does not exist."""
    psycopg = _psycopg()
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
        await admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
