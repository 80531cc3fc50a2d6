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
- :data:`RESET_SQL`, run after every call in the same round trip as its ``ROLLBACK``: what
  ``DISCARD ALL`` does (advisory locks, prepared statements, cursors, settings, temp objects), in
  statements allowed in a transaction block, so nothing one call leaves reaches the next call on
  the pooled connection.
"""

from __future__ import annotations

import re
from typing import Any

REFUSED_MEMBERSHIPS = ("pg_execute_server_program", "pg_read_server_files", "pg_write_server_files",
                       "pg_read_all_stats", "pg_signal_backend")
"""Predefined roles whose members the SQL tool never runs as (membership counted through any chain)."""

ROLE_CHECK_SQL = """
SELECT session_user, current_setting('track_activities'),
  ARRAY(SELECT r.rolname || CASE WHEN r.rolsuper THEN ' (superuser)' WHEN r.rolcreaterole THEN ' (CREATEROLE)' ELSE '' END
        FROM pg_roles r
        WHERE pg_has_role(session_user, r.oid, 'MEMBER')
          AND (r.rolsuper OR r.rolcreaterole OR r.rolname = ANY(%s))
        ORDER BY r.rolname)"""

RESET_SQL = ("ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; "
             "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD SEQUENCES; DISCARD TEMP")
"""Ends the call's transaction and resets its session: ``DISCARD ALL``'s steps, one round trip."""

LOCK_FUNCTIONS = ("pg_advisory_lock", "pg_advisory_lock_shared", "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared",
                  "pg_try_advisory_lock", "pg_try_advisory_lock_shared", "pg_try_advisory_xact_lock",
                  "pg_try_advisory_xact_lock_shared")
"""Functions that take advisory locks; :func:`.postgres.create_database` revokes them from PUBLIC."""

REFUSED_FIRST_WORDS = frozenset(
    "abort alter analyse analyze begin call checkpoint close cluster comment commit copy create deallocate declare "
    "delete discard do drop end execute fetch grant import insert listen load lock merge move notify prepare "
    "reassign refresh reindex release reset revoke rollback savepoint security set start truncate unlisten update "
    "vacuum".split())
"""PostgreSQL commands other than SELECT, WITH, EXPLAIN, VALUES, TABLE and SHOW (a word that is no
command at all is left to the server, whose syntax error then reaches the model as it is)."""
_FIRST_WORD = re.compile(r"[A-Za-z_]+")
_REFUSED_NAME = re.compile(r"\b(pg_(?:try_)?advisory_\w*|query_to_xml\w*|cursor_to_xml\w*|ts_stat|ts_rewrite|dblink\w*)\b",
                           re.I)
_UNICODE_IDENTIFIER = re.compile(r"\bU&\"", re.I)


def refusal(sql: str) -> tuple[str, str] | None:
    """Why the SQL tool refuses ``sql``, as (``readonly`` | ``refused``, message), or None to run it."""
    word = _FIRST_WORD.match(sql, _first_token(sql))
    first = word.group(0).lower() if word else ""
    if first in REFUSED_FIRST_WORDS:
        return "readonly", (f"the database is read-only: {first.upper()} is not allowed "
                            "(only SELECT, WITH … SELECT, EXPLAIN, VALUES, TABLE and SHOW run)")
    name = _REFUSED_NAME.search(sql)
    if name:
        return "refused", (f"{name.group(1).lower()} is not allowed: it holds locks or runs SQL text beyond this one "
                           "read-only query; write a plain query instead")
    if _UNICODE_IDENTIFIER.search(sql):
        return "refused", 'U&"…" identifiers are not allowed: write names plainly or in double quotes'
    return None


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
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        else:
            break
    return i


def unsafe_role_reason(row: tuple[Any, ...]) -> str | None:
    """Why a session described by :data:`ROLE_CHECK_SQL`'s row must not run the model's SQL, or None.

    The message names the role and says how to get a read-only one (one sentence)."""
    role, track_activities, dangerous = row
    how = ("connect the SQL tool as a read-only role instead: `bash scripts/ensure-postgres.sh --reader DBNAME` "
           "prints the DSN of one (toolgym_reader), and toolgym.plugins.sql.postgres.create_database sets one up")
    if dangerous:
        return (f"the PostgreSQL role '{role}' may run programs, read files or watch other sessions on the server "
                f"(it is or acts as {', '.join(dangerous)}), so the SQL tool will not run as it: {how}")
    if track_activities != "off":
        return (f"sessions of the PostgreSQL role '{role}' show their SQL in pg_stat_activity, where concurrent "
                f"episodes reading as '{role}' could copy it: run `ALTER ROLE \"{role}\" SET track_activities = off` "
                f"as a superuser, or {how}")
    return None
