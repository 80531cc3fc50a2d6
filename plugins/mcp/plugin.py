"""Registers the tools of the MCP servers a run names (``--mcp``, ``$TOOLGYM_MCP_SERVERS``), as any
third-party tool plugin would. Nothing is listed, and the ``mcp`` SDK is not imported, when no
server is named."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from toolgym import DEFAULT_PROFILES, ConfigError, SandboxProfile, Tool, hookimpl, register_profile
from toolgym.plugins.mcp.servers import DEFAULT_KIND, McpServer, load_servers

if DEFAULT_KIND not in DEFAULT_PROFILES:
    # No network (an HTTP server is reached from the host, through the egress decision of
    # ``egress.py``); the interpreter that holds the server's pipes starts with the sandbox, off the
    # path of the episode's first call.
    register_profile(DEFAULT_KIND, SandboxProfile(prestart_python=True))


@hookimpl
def toolgym_tools() -> list[Tool]:
    servers = load_servers()
    if not servers:
        return []
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError(
            "MCP servers are named but the MCP SDK is not installed: pip install 'toolgym[mcp]'"
        ) from None
    return list_in_thread(servers)


def list_in_thread(servers: list[McpServer]) -> list[Tool]:
    """Every server's tools, listed at once on an event loop of their own (the hook is synchronous
    and may be called from inside a running loop). One server that cannot be listed fails them all,
    with every failure named: a run must not start with some of the tools it was told to have."""
    from toolgym.plugins.mcp.client import list_server_tools

    box: dict[str, Any] = {}

    async def run() -> list[Any]:
        return await asyncio.gather(*(list_server_tools(s) for s in servers), return_exceptions=True)

    def target() -> None:
        try:
            box["results"] = asyncio.run(run())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="toolgym-mcp-list", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    tools: list[Tool] = []
    problems: list[str] = []
    for result in box["results"]:
        if isinstance(result, BaseException):
            problems.append(
                str(result) if isinstance(result, ConfigError) else f"{type(result).__name__}: {result}"
            )
        else:
            tools.extend(result)
    if problems:
        raise ConfigError("; ".join(problems))
    return tools
