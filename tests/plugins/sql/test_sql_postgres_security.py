"""Attacks on the SQL tools over a real PostgreSQL server, as a model would make them.

- a DSN of a superuser (or of a role that may run server programs or read server files) never
  executes anything: ``COPY … TO PROGRAM`` cannot run through the tool, whatever DSN is given;
- concurrent episodes cannot read each other's SQL from ``pg_stat_activity``;
- nothing a call leaves in its session (advisory locks, prepared statements) reaches the next
  call on the pooled connection, and one statement cannot fill the server's lock table so that
  a new connection to another database fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.plugins.sql.conftest import ENSURE_POSTGRES
from toolgym.core.tools import ToolOutput
from toolgym.plugins.sql import tools as sql_tools
from toolgym.plugins.sql.backends import SQLError
from toolgym.plugins.sql.databases import open_database
from toolgym.plugins.sql.postgres import READER_ROLE, PostgresBackend
from toolgym.plugins.sql.tools import make_sql_tools

LOCK_FLOOD = "SELECT count(pg_advisory_lock(i)) FROM generate_series(1, 1000000) i"


def single_value(out: ToolOutput) -> str:
    """The one cell of a one-row, one-column ``sql_query`` answer (header line, value line, row count)."""
    assert not out.error, out.text
    return out.text.splitlines()[1].strip()


def as_url(dsn: str) -> str:
    """``dsn`` as a ``postgresql://`` URL (the form ``$TOOLGYM_SQL_DATABASE`` takes)."""
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"postgresql://{p['user']}:{p['password']}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{p['dbname']}"


def saw_nothing(out: ToolOutput) -> bool:
    """A one-value count answer that is 0, or a refusal of the view itself (no privilege)."""
    if out.error:
        return "permission denied" in out.text
    return single_value(out) == "0"


async def advisory_locks_in(admin_dsn: str, dbname: str) -> int:
    """Advisory locks held in ``dbname``, counted by the administrator (the reader may not look)."""
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
            "(SELECT oid FROM pg_database WHERE datname = %s)",
            (dbname,),
        )
        return int((await cur.fetchone())[0])  # type: ignore[index]


async def admin_execute(dsn: str, *statements: sql.Composed | sql.SQL | str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement)


@pytest.fixture
async def make_role(postgres_db: tuple[str, str, str]) -> AsyncIterator[Callable[..., object]]:
    """``await make_role(attributes, *grants)``: a login role on the test database with SELECT on its
    tables, ``attributes`` (e.g. ``SUPERUSER``) and role ``grants``; its DSN. Dropped afterwards."""
    admin, _reader, dbname = postgres_db
    made: list[str] = []

    async def make(attributes: str = "", *grants: str, settings: str = "SET track_activities = off") -> str:
        role = f"toolgym_probe_{uuid.uuid4().hex[:8]}"
        made.append(role)
        ident = sql.Identifier(role)
        await admin_execute(
            admin,
            sql.SQL(f"CREATE ROLE {{}} LOGIN PASSWORD 'probe' {attributes}").format(ident),
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(dbname), ident),
            sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(ident),
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(ident),
            *(sql.SQL("GRANT {} TO {}").format(sql.Identifier(g), ident) for g in grants),
            *([sql.SQL(f"ALTER ROLE {{}} {settings}").format(ident)] if settings else []),
        )
        return make_conninfo(admin, user=role, password="probe")

    yield make
    for role in made:
        ident = sql.Identifier(role)
        await admin_execute(
            admin, sql.SQL("DROP OWNED BY {}").format(ident), sql.SQL("DROP ROLE {}").format(ident)
        )


# -- 1. the role the tool runs as ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["superuser", "pg_execute_server_program", "createrole"])
async def test_copy_to_program_cannot_run_through_the_tool_whatever_the_dsn(
    kind: str,
    postgres_db: tuple[str, str, str],
    make_role: Callable[..., object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin, _reader, _ = postgres_db
    if kind == "superuser":
        dsn = admin  # what scripts/ensure-postgres.sh prints for administration
    elif kind == "createrole":
        dsn = await make_role("CREATEROLE")  # type: ignore[misc]
    else:
        dsn = await make_role("", "pg_execute_server_program")  # type: ignore[misc]
    dsn = as_url(dsn)
    role = psycopg.conninfo.conninfo_to_dict(dsn)["user"]
    marker = Path(f"/tmp/toolgym-sql-probe-{uuid.uuid4().hex}")
    # the registered tool, configured the way a user would: TOOLGYM_SQL_DATABASE=<the DSN>
    monkeypatch.setenv("TOOLGYM_SQL_DATABASE", dsn)
    monkeypatch.setenv("TOOLGYM_SQL_SANDBOX", "false")
    backend = open_database(dsn)
    try:
        for statement in (
            f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'",
            f"WITH x AS (SELECT 1) SELECT * FROM query_to_xml('COPY (SELECT 1) TO PROGRAM ''touch {marker}''', true, false, '')",
        ):
            out = await sql_tools.sql_query.call({"query": statement})
            assert out.error, out.text
            assert not await asyncio.to_thread(marker.exists), f"the tool ran a server program as {role}"
        # the role itself is refused, whatever the statement: a plain read does not run either
        with pytest.raises(SQLError, match=rf"role '{role}'.*read-only role"):
            await backend.query("SELECT pg_read_file('/etc/hostname')")
    finally:
        await backend.aclose()
        await asyncio.to_thread(marker.unlink, missing_ok=True)


async def test_the_reader_role_is_accepted_and_least_privileged(postgres_db: tuple[str, str, str]) -> None:
    _admin, reader, _ = postgres_db
    db = PostgresBackend(reader)
    try:
        rows = (
            await db.query(
                "SELECT rolsuper, rolcreaterole, rolcreatedb, rolconnlimit, "
                "  pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'), "
                "  pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER'), "
                "  current_setting('track_activities'), current_setting('statement_timeout'), "
                "  current_setting('idle_in_transaction_session_timeout'), current_setting('max_connections')::int "
                "FROM pg_roles WHERE rolname = current_user"
            )
        ).rows
        su, createrole, createdb, connlimit, exec_member, stats_member, track, timeout, idle, max_conn = rows[
            0
        ]
        assert (su, createrole, createdb, exec_member, stats_member, track) == (
            False,
            False,
            False,
            False,
            False,
            "off",
        )
        assert 0 < connlimit <= max_conn // 2, (
            "the reader role must not be able to take every connection slot"
        )
        assert timeout != "0" and idle != "0"
    finally:
        await db.aclose()


# -- 2. concurrent episodes ------------------------------------------------------------------------


async def test_concurrent_episodes_cannot_read_each_others_sql(
    postgres_db: tuple[str, str, str], postgres_dsn: str
) -> None:
    _admin, reader, _ = postgres_db
    secret = uuid.uuid4().hex
    # two episodes, each with its own pool (as in two rollout workers), both reading as the reader role
    episode_a, episode_b = PostgresBackend(reader), PostgresBackend(reader)
    (q_a, _), (q_b, _) = make_sql_tools(episode_a, sandbox=False), make_sql_tools(episode_b, sandbox=False)
    planted = asyncio.create_task(q_a.call({"query": f"SELECT 'ANSWER_{secret}' AS answer, pg_sleep(4)"}))
    try:
        # wait until the planting statement runs (its wait event shows even with track_activities off)
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
            for _ in range(100):
                cur = await admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event = 'PgSleep'",
                    (READER_ROLE,),
                )
                if (await cur.fetchone())[0]:  # type: ignore[index]
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the planting statement never started")
        # the spy's own text never holds the secret whole, so a match can only be the neighbour's
        spy = await q_b.call(
            {
                "query": f"SELECT count(*) AS seen FROM pg_stat_activity "
                f"WHERE strpos(query, 'ANSWER_' || '{secret}') > 0 AND pid <> pg_backend_pid()"
            }
        )
        texts = await q_b.call(
            {
                "query": "SELECT count(*) AS with_text FROM pg_stat_activity "
                f"WHERE usename = '{READER_ROLE}' AND datname = current_database() "
                "AND pid <> pg_backend_pid() AND query <> ''"
            }
        )
        assert not planted.done(), "the spy looked too late"
        assert saw_nothing(spy), f"one episode read another's SQL:\n{spy.text}"
        assert saw_nothing(texts), f"another session's SQL text is visible:\n{texts.text}"
        assert not (await planted).error
    finally:
        planted.cancel()
        await episode_a.aclose()
        await episode_b.aclose()


STATS_VIEWS = (
    "pg_catalog.pg_locks",
    "pg_catalog.pg_stat_activity",
    "pg_catalog.pg_stat_database",
    "pg_catalog.pg_stat_user_tables",
    "pg_catalog.pg_stat_all_tables",
    "pg_catalog.pg_statio_user_tables",
    "pg_catalog.pg_stat_user_indexes",
    "pg_catalog.pg_stat_bgwriter",
    "pg_catalog.pg_stat_database_conflicts",
)
STATS_FUNCTIONS = (
    "pg_catalog.pg_lock_status()",
    "pg_catalog.pg_stat_get_activity(NULL)",
    "pg_catalog.pg_stat_get_db_xact_commit((SELECT oid FROM pg_database WHERE datname = 'postgres'))",
    "pg_catalog.pg_stat_get_db_tuples_returned((SELECT oid FROM pg_database WHERE datname = 'postgres'))",
    "pg_catalog.pg_stat_get_numscans('people'::regclass)",
    "pg_catalog.pg_stat_get_tuples_returned('people'::regclass)",
    "pg_catalog.pg_blocking_pids(pg_backend_pid())",
    "pg_catalog.pg_stat_get_backend_idset()",
)


async def refused_to(dsn: str, queries: list[str]) -> list[str]:
    """The queries of ``queries`` the role of ``dsn`` may run (straight to the server, no filter)."""
    answered = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for query in queries:
            try:
                await conn.execute(query)
            except psycopg.errors.InsufficientPrivilege:
                continue
            answered.append(query)
    return answered


async def test_the_reader_role_sees_no_locks_or_statistics_of_other_sessions(
    postgres_db: tuple[str, str, str], postgres_dsn: str
) -> None:
    """pg_locks and the pg_stat_* counters are shared by every session of the server: another
    episode's locks (which tables it reads), its scans and row counts, other databases' traffic.
    In a provisioned database the reader may read none of them, by view nor by function."""
    admin, reader, _ = postgres_db
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        statements = await (
            await conn.execute(
                "SELECT oid::regclass::text FROM pg_class WHERE relname = 'pg_stat_statements' AND relkind = 'v'"
            )
        ).fetchall()
    queries = [f"SELECT * FROM {view}" for view in STATS_VIEWS + tuple(r[0] for r in statements)]
    queries += [f"SELECT {fn}" for fn in STATS_FUNCTIONS]
    answered = await refused_to(reader, queries)
    assert answered == [], f"the reader role may still read: {answered}"
    # the tables themselves, and the column statistics of what it may read, still answer
    assert await refused_to(
        reader, ["SELECT count(*) FROM people", "SELECT * FROM pg_stats WHERE tablename = 'people'"]
    ) == ["SELECT count(*) FROM people", "SELECT * FROM pg_stats WHERE tablename = 'people'"]


async def test_a_role_that_may_take_advisory_locks_is_warned_about_once(
    postgres_db: tuple[str, str, str], make_role: Callable[..., object], caplog: pytest.LogCaptureFixture
) -> None:
    """A user's own DSN on a database toolgym did not provision: the statement filter is the only
    guard, and the backend says so, once."""
    dsn = await make_role()  # type: ignore[misc]
    role = str(psycopg.conninfo.conninfo_to_dict(dsn)["user"])
    await admin_execute(
        postgres_db[0],
        sql.SQL("GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO {}").format(sql.Identifier(role)),
    )
    for which in (dsn, postgres_db[1]):
        for _ in range(2):  # two backends of the same role (two episodes): still one warning
            backend = PostgresBackend(which, max_connections=1)
            try:
                with caplog.at_level(logging.WARNING, logger="toolgym"):
                    await asyncio.gather(backend.query("SELECT 1"), backend.query("SELECT 2"))
            finally:
                await backend.aclose()
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "pg_advisory_lock" in r.getMessage()
    ]
    assert len(warned) == 1 and role in warned[0] and "\n" not in warned[0], warned
    assert "statement filter" in warned[0]


# -- 3. session state and the lock table -----------------------------------------------------------


async def test_one_statement_cannot_fill_the_lock_table_for_another_database(
    postgres_db: tuple[str, str, str], postgres_dsn: str
) -> None:
    _admin, reader, dbname = postgres_db
    backend = PostgresBackend(reader, max_connections=1)
    sql_query, _ = make_sql_tools(backend, sandbox=False, timeout_s=20)
    failures: list[str] = []

    async def connect_elsewhere() -> None:  # a new session of another database (the admin's)
        try:
            async with await psycopg.AsyncConnection.connect(
                postgres_dsn, autocommit=True, connect_timeout=10
            ) as other:
                await other.execute("SELECT 1")
        except psycopg.Error as exc:
            failures.append(str(exc).strip())

    try:
        flood = asyncio.create_task(sql_query.call({"query": LOCK_FLOOD}))
        while not flood.done():  # during the statement …
            await connect_elsewhere()
            await asyncio.sleep(0.05)
        out = await flood
        await connect_elsewhere()  # … and after it, while the pooled connection stays open
        assert not failures, f"another database became unreachable: {failures[:3]}"
        assert await advisory_locks_in(postgres_dsn, dbname) == 0
        assert out.error and "pg_advisory_lock" in out.text, out.text
    finally:
        await backend.aclose()


async def test_the_reader_role_cannot_take_advisory_locks_by_any_route(
    postgres_db: tuple[str, str, str], postgres_dsn: str
) -> None:
    _admin, reader, dbname = postgres_db
    # straight to the server as the reader (no statement filter): the privilege is the boundary
    async with await psycopg.AsyncConnection.connect(reader, autocommit=True) as conn:
        for fn in (
            "pg_advisory_lock(1)",
            "pg_advisory_lock_shared(1, 2)",
            "pg_try_advisory_lock(1)",
            "pg_advisory_xact_lock(1)",
            "pg_try_advisory_xact_lock_shared(1)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(f"SELECT {fn}")
    # through the tool, spelled so that no text filter sees the name
    backend = PostgresBackend(reader, max_connections=1)
    sql_query, _ = make_sql_tools(backend, sandbox=False)
    try:
        for query in (
            "SELECT * FROM query_to_xml('SELECT pg_' || 'advisory_lock(42)', true, false, '')",
            'SELECT U&"pg\\005fadvisory\\005flock"(42)',
            "SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, ''b''::tsquery FROM pg_' || 'advisory_lock(42) x')",
            "SELECT pg_catalog.PG_ADVISORY_LOCK(42)",
        ):
            out = await sql_query.call({"query": query})
            assert out.error, out.text
        assert await advisory_locks_in(postgres_dsn, dbname) == 0
    finally:
        await backend.aclose()


async def test_session_state_does_not_survive_a_call(
    postgres_db: tuple[str, str, str], make_role: Callable[..., object]
) -> None:
    # a role that may take advisory locks (as on a database toolgym did not provision)
    dsn = await make_role()  # type: ignore[misc]
    role = sql.Identifier(str(psycopg.conninfo.conninfo_to_dict(dsn)["user"]))
    await admin_execute(
        postgres_db[0],
        sql.SQL("GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO {}").format(role),
        sql.SQL("GRANT SELECT ON pg_catalog.pg_locks TO {}").format(role),
        sql.SQL("GRANT EXECUTE ON FUNCTION pg_catalog.pg_lock_status() TO {}").format(role),
    )
    backend = PostgresBackend(dsn, max_connections=1)
    try:
        pool = backend._pool()
        async with pool.connection() as conn:  # one call's session, left dirty however it got so
            pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
            await conn.execute("SELECT count(pg_advisory_lock(i)) FROM generate_series(1, 2000) i")
            await conn.execute("PREPARE planted AS SELECT 'from the previous episode'")
        after = await backend.query(
            "SELECT pg_backend_pid(), (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND pid = pg_backend_pid()), (SELECT count(*) FROM pg_prepared_statements)"
        )
        next_pid, locks, prepared = after.rows[0]
        assert next_pid != pid, "the next call ran on the backend an earlier call used"
        assert (locks, prepared) == (0, 0), (
            "state of one call survived into the next on the pooled connection"
        )
        for _ in range(100):  # the used backend exits, and its session-level locks with it
            if await advisory_locks_in(postgres_db[0], postgres_db[2]) == 0:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the advisory locks of the closed session are still held")
    finally:
        await backend.aclose()


async def test_statement_filter_refuses_session_state_functions(postgres_db: tuple[str, str, str]) -> None:
    _admin, reader, _ = postgres_db
    db = PostgresBackend(reader)
    try:
        for query in (LOCK_FLOOD, "SELECT pg_try_advisory_lock(1)", "select PG_ADVISORY_XACT_LOCK(1)"):
            with pytest.raises(SQLError, match=r"pg_\w*advisory\w* is not allowed"):
                await db.query(query)
        for query in (
            "DO $$ BEGIN PERFORM 1; END $$",
            "PREPARE p AS SELECT 1",
            "LISTEN channel",
            "SET ROLE NONE",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "COPY people TO STDOUT",
            "/* a /* nested */ comment */ -- and a line\n ( DO $$ BEGIN PERFORM 1; END $$",
        ):
            with pytest.raises(SQLError, match="only SELECT, WITH … SELECT, EXPLAIN"):
                await db.query(query)
        start = time.monotonic()  # legitimate reads still run
        assert (await db.query("/* q */ (SELECT 1) UNION SELECT 2 ORDER BY 1")).rows == [(1,), (2,)]
        assert (await db.query("  explain SELECT * FROM people")).rows
        assert (await db.query("WITH x AS (SELECT 'pg_advisory' AS t) SELECT length(t) FROM x")).rows == [
            (11,)
        ]
        assert time.monotonic() - start < 5
    finally:
        await db.aclose()


# -- the set-up script -----------------------------------------------------------------------------


async def test_setup_script_prints_a_reader_dsn_the_tool_accepts(postgres_dsn: str) -> None:
    parts = psycopg.conninfo.conninfo_to_dict(postgres_dsn)
    dbname = f"toolgym_test_{uuid.uuid4().hex[:10]}"
    await admin_execute(postgres_dsn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    await admin_execute(
        make_conninfo(postgres_dsn, dbname=dbname), "CREATE TABLE t (v INTEGER)", "INSERT INTO t VALUES (7)"
    )
    env = {
        **os.environ,
        "TOOLGYM_POSTGRES_PORT": str(parts.get("port", 5432)),
        "TOOLGYM_POSTGRES_USER": str(parts["user"]),
        "TOOLGYM_POSTGRES_PASSWORD": str(parts["password"]),
    }
    try:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            str(ENSURE_POSTGRES),
            "--reader",
            dbname,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        dsn = out.decode().strip()
        assert dsn.startswith("postgresql://toolgym_reader:") and dsn.endswith(f"/{dbname}"), dsn
        backend = open_database(dsn)
        try:
            assert (await backend.query("SELECT v FROM t")).rows == [(7,)]
            for statement in (
                "COPY (SELECT 1) TO PROGRAM 'true'",
                "SELECT pg_read_file('/etc/hostname')",
                "SELECT * FROM query_to_xml('SELECT pg_' || 'advisory_lock(1)', true, false, '')",
            ):
                with pytest.raises(SQLError):
                    await backend.query(statement)
            spying = [
                "SELECT * FROM pg_locks",
                "SELECT * FROM pg_stat_database",
                "SELECT * FROM pg_stat_user_tables",
                "SELECT pg_stat_get_db_xact_commit(1)",
                "SELECT pg_lock_status()",
            ]
            assert await refused_to(dsn, spying) == []
        finally:
            await backend.aclose()
    finally:
        await admin_execute(
            postgres_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )


# -- 4. covert channels between calls on a pooled connection -------------------------
# The pool is shared by every episode of a process: whatever one call leaves in its server session,
# the next call (another sample of the same group, say) can read. The per-call reset (DISCARD ALL's
# steps) clears settings' values, but a custom setting's *placeholder* lives as long as the backend
# (current_setting('x.y', true) is then '' instead of NULL), and so does the random() generator's
# state after setseed(). One bit per placeholder name, or a seed, is enough to hand over an answer.


async def _seeded_random(dsn: str, seed: float) -> float:
    """The first random() after setseed(seed), on a session of its own."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT setseed(%s)", (seed,))
        return float((await (await conn.execute("SELECT random()")).fetchone())[0])  # type: ignore[index]


async def test_a_call_cannot_hand_a_value_to_the_next_through_the_tool(
    postgres_db: tuple[str, str, str],
) -> None:
    """Episode 1 and episode 2 each make tool calls, one after the other, on a pool of one connection."""
    _admin, reader, _ = postgres_db
    backend = PostgresBackend(reader, max_connections=1)
    sql_query, _ = make_sql_tools(backend, sandbox=False)
    seed = 0.4242
    try:
        # episode 1: plants through statements the filter lets through (they are SELECTs)
        for planted in (
            "SELECT set_config('answer.is_42', 'yes', false)",  # session-level
            "SELECT set_config('answer.local', 'yes', true)",  # transaction-level
            f"SELECT setseed({seed})",
        ):  # the session's random() generator
            out = await sql_query.call({"query": planted})
            assert not out.error, out.text
        # episode 2
        seen = await sql_query.call(
            {
                "query": "SELECT current_setting('answer.is_42', true) IS NULL "
                "AND current_setting('answer.local', true) IS NULL AS fresh"
            }
        )
        assert single_value(seen) == "True", (
            f"a custom setting's placeholder survived into the next call:\n{seen.text}"
        )
        drawn = float(single_value(await sql_query.call({"query": "SELECT random()"})))
        assert drawn != await _seeded_random(reader, seed), (
            "the previous call's setseed() decided this call's random()"
        )
    finally:
        await backend.aclose()


SESSION_STATE = (
    "SELECT current_setting('x.y', true) IS NULL, current_setting('x.z', true) IS NULL, "
    "current_setting('x.t', true) IS NULL, current_setting('default_transaction_read_only'), "
    "current_setting('application_name'), to_regclass('pg_temp.planted') IS NULL, "
    "(SELECT count(*) FROM pg_prepared_statements), (SELECT count(*) FROM pg_listening_channels()), "
    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), "
    "(SELECT count(*) FROM pg_cursors WHERE name <> ''), current_user = session_user, random()"
)
"""What a session shows of the state a call can leave (the last column: its next random())."""


async def test_no_session_state_reaches_the_next_call_however_it_was_made(
    postgres_db: tuple[str, str, str], make_role: Callable[..., object]
) -> None:
    """The session dirtied straight through the pooled connection (as a filter bypass would), with
    every kind of state a backend keeps; the next call must find the session of a new backend."""
    dsn = await make_role()  # type: ignore[misc]
    role = sql.Identifier(str(psycopg.conninfo.conninfo_to_dict(dsn)["user"]))
    other = str(psycopg.conninfo.conninfo_to_dict(await make_role())["user"])  # type: ignore[misc]
    await admin_execute(
        postgres_db[0],
        sql.SQL("GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO {}").format(role),
        sql.SQL("GRANT SELECT ON pg_catalog.pg_locks TO {}").format(role),
        sql.SQL("GRANT EXECUTE ON FUNCTION pg_catalog.pg_lock_status() TO {}").format(role),
        sql.SQL("GRANT {} TO {}").format(sql.Identifier(other), role),
    )
    backend = PostgresBackend(dsn, max_connections=1)
    seed = 0.1234
    try:
        async with backend._pool().connection() as conn:
            for statement in (
                "SET x.y = 'secret'",
                "SELECT set_config('x.z', 'secret', false)",
                "BEGIN; SELECT set_config('x.t', 'secret', true); COMMIT",
                "SET default_transaction_read_only = off",
                "SET application_name = 'planted'",
                "CREATE TEMP TABLE planted (v INTEGER)",
                "PREPARE planted AS SELECT 1",
                "LISTEN planted",
                "SELECT pg_advisory_lock(42)",
                "BEGIN; DECLARE planted CURSOR WITH HOLD FOR SELECT 1; COMMIT",
                f"SELECT setseed({seed})",
                f'SET ROLE "{other}"',
            ):
                await conn.execute(statement)
        after = await backend.query(SESSION_STATE)
        reference = PostgresBackend(dsn, max_connections=1)  # a session nobody touched
        try:
            fresh = await reference.query(SESSION_STATE)
        finally:
            await reference.aclose()
        *state, drawn = after.rows[0]
        assert state == list(fresh.rows[0][:-1]), (
            f"state of one call reached the next: {state} (fresh: {fresh.rows[0][:-1]})"
        )
        assert state[:3] == [True, True, True] and state[5:7] == [True, 0] and state[-1] is True, state
        assert drawn != await _seeded_random(dsn, seed), (
            "the previous call's setseed() decided this call's random()"
        )
    finally:
        await backend.aclose()
