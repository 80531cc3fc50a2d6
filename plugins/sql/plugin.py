"""Registers the SQL tools and the text2sql task, as any third-party plugin would."""

from __future__ import annotations

from typing import Any

from toolgym import AuditCheck, EnvSpec, Tool, hookimpl
from toolgym.plugins.sql.tools import sql_query, sql_schema


@hookimpl
def toolgym_tools() -> list[Tool]:
    return [sql_query, sql_schema]


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "text2sql",
            "toolgym.plugins.sql.text2sql.env:Text2SQLEnv",
            description="Questions about small shipped databases answered with SQL (SQLite or PostgreSQL); "
            "execution-match reward.",
            tags=("task", "sql"),
        ),
    ]


async def _audit_rows(*, options: dict[str, Any], sandbox_backend: Any, progress: Any) -> list[Any]:
    from toolgym.plugins.sql.audit import run_sql_audit

    return await run_sql_audit(options.get("sql_dsn"), progress=progress, sandbox_backend=sandbox_backend)


@hookimpl
def toolgym_audit_checks() -> list[AuditCheck]:
    """SQLite rows on the host and, when ``sql`` sandboxes are audited, in one; PostgreSQL rows with a DSN."""
    return [AuditCheck("sql", _audit_rows, kind="sql", options=("sql_dsn",))]
