"""Registers the search tools and the search-QA task, as any third-party plugin would."""

from __future__ import annotations

from toolgym import CliCommand, EnvSpec, Tool, hookimpl
from toolgym.plugins.search.tools import search, web_search


@hookimpl
def toolgym_tools() -> list[Tool]:
    return [search, web_search]


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "search-qa",
            "toolgym.plugins.search.qa.env:SearchQAEnv",
            description="Questions over an invented archipelago corpus, answered by searching it (Search-R1 "
            "<search>/<answer> tags or tool calls); exact-match or F1 reward.",
            tags=("task", "qa", "search"),
        ),
    ]


@hookimpl
def toolgym_cli_commands() -> list[CliCommand]:
    return [
        CliCommand(
            "index",
            "toolgym.plugins.search.cli:app",
            "Build, serve and query search indexes (BM25, dense, hybrid).",
        )
    ]
