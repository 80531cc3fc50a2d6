"""Registers the SQL tools and the text2sql task, as any third-party plugin would."""

from __future__ import annotations

from toolgym import EnvSpec, Tool, hookimpl
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
