"""Helpers shared by CLI commands."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any

import typer

from toolgym.core.registry import Registry, get_registry
from toolgym.core.util.terminal import visible


@lru_cache(maxsize=1)
def console() -> Any:
    from rich.console import Console

    return Console(stderr=False)


@lru_cache(maxsize=1)
def err_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def shown(text: object) -> str:
    """Text from a model, tool, environment or dataset, for a rich ``print`` that parses markup:
    control characters shown visibly (``toolgym.core.util.terminal``) and ``[`` tags escaped, so it can
    neither drive the terminal nor become a markup link. ``typer.echo`` lines take ``visible``."""
    from rich.markup import escape

    return escape(visible(str(text)))


def warn_skipped(report: Any) -> None:
    """Say on stderr which lines a reader skipped (a ``ReadReport``), if any."""
    if line := report.summary():
        typer.secho(f"warning: {visible(line)}", fg="yellow", err=True)


MCP_SERVERS_ENV = "TOOLGYM_MCP_SERVERS"
"""Where the ``mcp`` plugin reads the MCP servers a run names (``toolgym.plugins.mcp.servers``)."""
MCP_HELP = (
    "An MCP server whose tools to add, in one line: NAME=URL (streamable HTTP) or NAME[@KIND]=COMMAND "
    "(stdio, run inside a sandbox of kind KIND, default mcp). Repeat for more; adds to $TOOLGYM_MCP_SERVERS."
)
MCP_ALLOW_ENV = "TOOLGYM_MCP_ALLOW"
"""The egress allowlist of HTTP MCP servers (``toolgym.plugins.mcp.servers``)."""
MCP_ALLOW_HELP = (
    "A place HTTP MCP servers may be reached at: HOST, HOST:PORT, *.DOMAIN or an IP address (loopback and "
    "this host's own addresses only by IP). Repeat for more; replaces each server's default (its URL's "
    "own host and port); adds to $TOOLGYM_MCP_ALLOW."
)


def key_values(items: list[str], flag: str) -> dict[str, object]:
    """``KEY=VALUE`` options (``--env-arg``, ``--backend-arg``), each value read as JSON where it
    parses and kept as text where it does not."""
    from toolgym.core.errors import ConfigError

    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} takes KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def name_mcp_servers(specs: list[str] | None, allow: list[str] | None = None) -> None:
    """Add ``--mcp`` servers to those ``$TOOLGYM_MCP_SERVERS`` names, and ``--mcp-allow`` patterns to
    ``$TOOLGYM_MCP_ALLOW``, for this process and the workers it starts; the registry loaded next
    lists their tools."""
    if specs:
        before = os.environ.get(MCP_SERVERS_ENV, "")
        lines = json.loads(before) if before.lstrip().startswith("[") else before.splitlines()
        os.environ[MCP_SERVERS_ENV] = json.dumps([line for line in [*lines, *specs] if line.strip()])
    if allow:
        before = os.environ.get(MCP_ALLOW_ENV, "")
        words = json.loads(before) if before.lstrip().startswith("[") else re.split(r"[\s,]+", before)
        os.environ[MCP_ALLOW_ENV] = json.dumps([w for w in [*words, *allow] if str(w).strip()])
    if specs or allow:
        get_registry(reload=True)  # a registry loaded before (plugin commands) has not listed them


def registry_or_exit() -> Registry:
    """The plugin registry; broken plugins are reported on stderr, the rest still work."""
    reg = get_registry()
    for err in reg.errors:
        typer.secho(f"warning: {visible(str(err))}", fg="yellow", err=True)
    return reg


async def open_sandbox_backend(reg: Registry, name: str | None = None, **options: Any) -> Any:
    """The named sandbox backend, or the best available one (highest priority that works here)."""
    from toolgym.core.sandbox import open_sandbox_backend as open_backend

    return open_backend(reg, name, **options)
