"""The ``sql_query`` and ``sql_schema`` tools, and a factory for SQL tools bound to any database.

Tasks build their own pair with :func:`make_sql_tools` (bound to the episode's database). The
registered pair reads the database named by ``$TOOLGYM_SQL_DATABASE`` (``shipped:library``, a
``postgresql://`` URL, or a SQLite file; see :mod:`toolgym.plugins.sql.databases`).

Where a call runs: the tools can use the ``sql`` sandbox. When the call's episode has a sandbox
backend, a SQLite database runs inside the episode's ``sql`` sandbox (:mod:`.sandboxed`); a
PostgreSQL database, a call made outside an episode, or ``sandbox=False`` runs from the host.
The model reads the same text either way.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym import Tool, ToolArgumentError, ToolExecutionError, ToolOutput, tool

from .backends import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, SQLBackend
from .databases import open_database, shipped_names
from .render import CELL_CHARS, MAX_CHARS, render_result, render_schema, render_table
from .sandboxed import SandboxSQLiteBackend, episode_backend, sandbox_enabled_by_env

MAX_QUERY_CHARS = 20_000
MAX_SAMPLE_ROWS = 5
DatabaseSource = SQLBackend | Callable[[], SQLBackend | Awaitable[SQLBackend]]


async def _resolve(database: DatabaseSource, ctx: Any, sandbox: bool | Callable[[], bool]) -> SQLBackend:
    if isinstance(database, SQLBackend):
        backend = database
    else:
        got = database()
        backend = await got if inspect.isawaitable(got) else got
    enabled = sandbox() if callable(sandbox) else sandbox
    return await episode_backend(ctx, backend, enabled=enabled)


def _where(backend: SQLBackend) -> str:
    return "sandbox" if isinstance(backend, SandboxSQLiteBackend) else "host"


def _quote(name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def make_sql_tools(
    database: DatabaseSource,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_chars: int = MAX_CHARS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    query_name: str = "sql_query",
    schema_name: str = "sql_schema",
    sandbox: bool | Callable[[], bool] = True,
) -> list[Tool]:
    """A query tool and a schema tool over ``database`` (a backend, or a function giving one).

    Each statement runs read-only under a ``timeout_s`` statement timeout; the model reads at most
    ``max_rows`` rows and ``max_chars`` characters of each answer. ``sandbox`` (or a function
    read at each call): run a SQLite database inside the episode's ``sql`` sandbox when the
    episode has a sandbox backend; False keeps every call on the host. Each output's metadata
    says ``where`` it ran (``sandbox`` or ``host``).
    """

    async def sql_query(query: str, *, ctx: Any = None) -> ToolOutput:
        sql = query.strip()
        if not sql:
            raise ToolArgumentError("the query is empty; write one SQL statement")
        if len(sql) > MAX_QUERY_CHARS:
            raise ToolArgumentError(
                f"the query is {len(sql)} characters long; keep it under {MAX_QUERY_CHARS}"
            )
        backend = await _resolve(database, ctx, sandbox)
        result = await backend.query(sql, max_rows=max_rows, timeout_s=timeout_s, cell_chars=CELL_CHARS)
        return ToolOutput(
            render_result(result, max_chars=max_chars),
            metadata={
                "rows": len(result.rows),
                "truncated": result.truncated,
                "db_s": result.duration_s,
                "where": _where(backend),
            },
        )

    async def sql_schema(table: str = "", sample_rows: int = 0, *, ctx: Any = None) -> ToolOutput:
        if not 0 <= sample_rows <= MAX_SAMPLE_ROWS:
            raise ToolArgumentError(f"sample_rows must be between 0 and {MAX_SAMPLE_ROWS}, got {sample_rows}")
        backend = await _resolve(database, ctx, sandbox)
        tables = await backend.tables(timeout_s=timeout_s)
        where = {"where": _where(backend)}
        if not table.strip():
            if sample_rows:
                raise ToolArgumentError("sample_rows needs a table: give one table name")
            return ToolOutput(
                render_schema(tables, dialect=backend.dialect, max_chars=max_chars), metadata=where
            )
        wanted = table.strip().strip('"').lower()
        match = next((t for t in tables if t.name.lower() == wanted), None)
        if match is None:
            known = ", ".join(t.name for t in tables) or "none"
            raise ToolArgumentError(f"there is no table {table.strip()!r}; the tables are: {known}")
        text = render_table(match)
        if sample_rows:
            rows = await backend.query(
                f"SELECT * FROM {_quote(match.name)} LIMIT {sample_rows}",
                max_rows=sample_rows,
                timeout_s=timeout_s,
                cell_chars=CELL_CHARS,
            )
            text += f"\n\nFirst {len(rows.rows)} row(s):\n" + render_result(
                rows, max_chars=max(200, max_chars - len(text))
            )
        return ToolOutput(text[:max_chars], metadata=where)

    sql_query.__doc__ = f"""Run one read-only SQL statement (SELECT, WITH … SELECT, EXPLAIN) on the database and
    return its rows (at most {max_rows}). Statements that would change the database are refused.

    Args:
        query: One SQL statement in the database's dialect.
    """
    sql_schema.__doc__ = f"""Describe the database: every table with its columns, types and keys, or one table
    (optionally with a few example rows).

    Args:
        table: A table name to describe only that table; empty for all tables.
        sample_rows: How many example rows of that table to show (0 to {MAX_SAMPLE_ROWS}).
    """
    limit = 3 * timeout_s + 10.0  # the schema tool runs a few statements, each under timeout_s
    return [
        tool(sql_query, name=query_name, timeout_s=limit),
        tool(sql_schema, name=schema_name, timeout_s=limit),
    ]


def _configured_database() -> SQLBackend:
    spec = os.environ.get("TOOLGYM_SQL_DATABASE", "").strip()
    if not spec:
        raise ToolExecutionError(
            "no database is configured for the SQL tools: set TOOLGYM_SQL_DATABASE to "
            f"shipped:NAME ({', '.join(shipped_names())}), a postgresql:// URL or a SQLite file"
        )
    return open_database(spec)


sql_query, sql_schema = make_sql_tools(_configured_database, sandbox=sandbox_enabled_by_env)
"""The registered pair, over ``$TOOLGYM_SQL_DATABASE`` (sandboxed unless ``$TOOLGYM_SQL_SANDBOX`` is off)."""
