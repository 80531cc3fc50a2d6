"""What stands between a model's SQL and a PostgreSQL server, besides the read-only transaction.

Three guards, each for something ``BEGIN READ ONLY`` does not stop:

- :func:`unsafe_role_reason`, run on every new connection: the session's role must not reach the
  server's programs or files, nor other sessions. A superuser, a ``CREATEROLE`` role (before
  PostgreSQL 16 it may grant itself any of what follows), or a member of
  ``pg_execute_server_program`` / ``pg_read_server_files`` / ``pg_write_server_files``
  (``COPY … TO PROGRAM`` runs even in a read-only transaction), ``pg_read_all_stats`` (reads every
  session's SQL) or ``pg_signal_backend`` is refused, and so is a session whose own SQL shows in
  ``pg_stat_activity`` (``track_activities`` on), where every episode reading as the same role
  could copy it.
- :func:`refusal`, run on every statement: no other command than SELECT, WITH, EXPLAIN, VALUES,
  TABLE or SHOW, and no statement that names a function holding server-wide state beyond the
  query (advisory locks) or running SQL given as text (``query_to_xml``, ``ts_stat``,
  ``ts_rewrite``: such text could hide a name). It is a second fence: on databases
  :func:`.postgres.create_database` provisions, the reader role may not execute the advisory-lock
  functions at all.
- no session outlives its call: the pool (:class:`.postgres._Pool`) closes each connection after
  one call and the next call gets a new server backend, so nothing one call leaves in its session
  (locks, prepared statements, cursors, settings, temp objects, and what no reset clears: a custom
  setting's placeholder, the ``random()`` seed) reaches another.

On databases :func:`.postgres.create_database` (or ``scripts/ensure-postgres.sh --reader``)
provisions, the server's privileges are the first fence: :data:`STATS_REVOKE_SQL` takes from
PUBLIC the server-wide views of other sessions (``pg_locks``, every ``pg_stat_*`` and
``pg_statio_*`` view, ``pg_stat_statements`` where installed) and the functions beneath them
(``pg_stat_get_*``, ``pg_lock_status``, ``pg_blocking_pids``), so one episode cannot read
another's locks, scans, row counts or other databases' traffic. On a database given by the user's
own DSN none of that holds: the statement filter is the only guard against advisory locks, and
:func:`filter_only_warning` says so once per role (``ROLE_CHECK_SQL`` asks whether the role may
execute ``pg_advisory_lock``).
"""

from __future__ import annotations

import re
from typing import Any

REFUSED_MEMBERSHIPS = (
    "pg_execute_server_program",
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_read_all_stats",
    "pg_signal_backend",
)
"""Predefined roles whose members the SQL tool never runs as (membership counted through any chain)."""

ROLE_CHECK_SQL = """
SELECT session_user, current_setting('track_activities'),
  ARRAY(SELECT r.rolname || CASE WHEN r.rolsuper THEN ' (superuser)' WHEN r.rolcreaterole THEN ' (CREATEROLE)' ELSE '' END
        FROM pg_roles r
        WHERE pg_has_role(session_user, r.oid, 'MEMBER')
          AND (r.rolsuper OR r.rolcreaterole OR r.rolname = ANY(%s))
        ORDER BY r.rolname),
  has_function_privilege('pg_catalog.pg_advisory_lock(bigint)', 'EXECUTE'),
  has_table_privilege('pg_catalog.pg_locks', 'SELECT')"""

STATS_REVOKE_SQL = r"""
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c
           WHERE c.relkind IN ('v', 'm') AND (c.relname = 'pg_locks' OR c.relname LIKE 'pg\_stat\_%'
                 OR c.relname LIKE 'pg\_statio\_%') AND (c.relnamespace = 'pg_catalog'::regnamespace
                 OR c.relname LIKE 'pg\_stat\_statements%') LOOP
    EXECUTE format('REVOKE SELECT ON %s FROM PUBLIC', r.rel);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
           WHERE (p.pronamespace = 'pg_catalog'::regnamespace AND (p.proname LIKE 'pg\_stat\_get\_%'
                  OR p.proname IN ('pg_lock_status', 'pg_blocking_pids', 'pg_safe_snapshot_blocking_pids')))
              OR p.proname LIKE 'pg\_stat\_statements%' LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', r.fn);
  END LOOP;
END $$"""
"""Run as a superuser in a provisioned database: PUBLIC may no longer read the views of other
sessions' locks and statistics, nor call the functions beneath them (a function is checked against
the caller even inside a view). ``pg_stats`` (column statistics of tables one may read) stays."""

LOCK_FUNCTIONS = (
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
)
"""Functions that take advisory locks; :func:`.postgres.create_database` revokes them from PUBLIC."""

REFUSED_FIRST_WORDS = frozenset(
    "abort alter analyse analyze begin call checkpoint close cluster comment commit copy create deallocate declare "
    "delete discard do drop end execute fetch grant import insert listen load lock merge move notify prepare "
    "reassign refresh reindex release reset revoke rollback savepoint security set start truncate unlisten update "
    "vacuum".split()
)
"""PostgreSQL commands other than SELECT, WITH, EXPLAIN, VALUES, TABLE and SHOW (a word that is no
command at all is left to the server, whose syntax error then reaches the model as it is)."""
_FIRST_WORD = re.compile(r"[A-Za-z_]+")
_REFUSED_NAME = re.compile(
    r"\b(pg_(?:try_)?advisory_\w*|query_to_xml\w*|cursor_to_xml\w*|ts_stat|ts_rewrite|dblink\w*)\b", re.I
)
_UNICODE_IDENTIFIER = re.compile(r"\bU&\"", re.I)


def refusal(sql: str) -> tuple[str, str] | None:
    """Why the SQL tool refuses ``sql``, as (``readonly`` | ``refused``, message), or None to run it."""
    word = _FIRST_WORD.match(sql, _first_token(sql))
    first = word.group(0).lower() if word else ""
    if first in REFUSED_FIRST_WORDS:
        return "readonly", (
            f"the database is read-only: {first.upper()} is not allowed "
            "(only SELECT, WITH … SELECT, EXPLAIN, VALUES, TABLE and SHOW run)"
        )
    name = _REFUSED_NAME.search(sql)
    if name:
        return "refused", (
            f"{name.group(1).lower()} is not allowed: it holds locks or runs SQL text beyond this one "
            "read-only query; write a plain query instead"
        )
    if _UNICODE_IDENTIFIER.search(sql):
        return "refused", 'U&"…" identifiers are not allowed: write names plainly or in double quotes'
    return None


def skip_block_comment(sql: str, i: int) -> tuple[int, bool]:
    """Past the block comment that opens at ``i`` (they nest in PostgreSQL: ``/* /* */ */`` is one
    comment): the index after it, and whether it was closed before the text ended."""
    depth, i, n = 1, i + 2, len(sql)
    while i < n and depth:
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i, depth == 0


def _first_token(sql: str) -> int:
    """Index of the first token of ``sql`` past whitespace, opening parentheses and comments (block
    comments nest in PostgreSQL, so ``/* /* */ */`` is one comment)."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] == "(":
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            i, _ = skip_block_comment(sql, i)
        else:
            break
    return i


def unsafe_role_reason(row: tuple[Any, ...]) -> str | None:
    """Why a session described by :data:`ROLE_CHECK_SQL`'s row must not run the model's SQL, or None.

    The message names the role and says how to get a read-only one (one sentence)."""
    role, track_activities, dangerous = row[:3]
    how = (
        "connect the SQL tool as a read-only role instead: `bash scripts/ensure-postgres.sh --reader DBNAME` "
        "prints the DSN of one (toolgym_reader), and toolgym.plugins.sql.postgres.create_database sets one up"
    )
    if dangerous:
        return (
            f"the PostgreSQL role '{role}' may run programs, read files or watch other sessions on the server "
            f"(it is or acts as {', '.join(dangerous)}), so the SQL tool will not run as it: {how}"
        )
    if track_activities != "off":
        return (
            f"sessions of the PostgreSQL role '{role}' show their SQL in pg_stat_activity, where concurrent "
            f"episodes reading as '{role}' could copy it: run `ALTER ROLE \"{role}\" SET track_activities = off` "
            f"as a superuser, or {how}"
        )
    return None


def filter_only_warning(row: tuple[Any, ...]) -> str | None:
    """For a role :func:`unsafe_role_reason` accepts: a one-line warning when only the statement
    filter stands between the model and server-wide state (the role may take advisory locks), or None."""
    role, may_lock, may_see_locks = row[0], row[3], row[4]
    if not may_lock:
        return None
    seen = " and read pg_locks and the pg_stat_* views of other sessions" if may_see_locks else ""
    return (
        f"the PostgreSQL role '{role}' may execute pg_advisory_lock{seen}: on this database the SQL tool's "
        "statement filter is the only guard against one episode holding locks or watching another; for a "
        "provisioned database run `bash scripts/ensure-postgres.sh --reader DBNAME` (or create_database)"
    )
