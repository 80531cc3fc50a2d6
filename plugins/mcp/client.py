"""An MCP server's tools as toolgym tools: list them once, call them from any episode.

:func:`list_server_tools` connects (a stdio server in a sandbox of its kind, taken and given back
for the purpose; an HTTP server over the SDK's streamable-HTTP client), lists the tools and turns
each into an :class:`McpTool`: an ordinary :class:`~toolgym.core.tools.Tool` whose parameters are
the server's ``inputSchema``, validated with JSON Schema before anything is sent. A call returns a
``ToolOutput`` like every other tool's, so its text enters the trajectory as the chat template's
tool delta.

Sessions. A stdio server runs once per episode sandbox: started on the episode's first call to
any of its tools, kept for the episode's later calls (its state lasts, as the ``python`` tool's
does), killed by the sandbox's reset. Each call opens the SDK's ``ClientSession`` over the bridge
and adopts the handshake made at start, so no task outlives a call. An HTTP call is one MCP
session of its own (connect, handshake, call, end): episodes never share a session, and state a
server keeps per session does not carry from one call to the next. The HTTP client runs on the
host, but every connection it makes passes the sandboxes' egress decision against the server's
allowlist first (``egress.py``): a host off the list, or a name that resolves to loopback, link-local
or this host's addresses without the list naming them, is refused, and the call or listing says so.

Failures are the model's observation, never a crashed episode: egress refused, a server that will
not start, exits or crashes mid-call, outlives ``timeout_s`` (it is then stopped; the next call
starts it afresh), answers with more than ``max_message_bytes``, refuses the call, or returns a
result that contradicts its own output schema gives an error ``ToolOutput`` that says which. A tool whose
``inputSchema`` is not a valid JSON Schema for an object is left out when listed, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev set
import mcp_types
import pydantic
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from toolgym import ConfigError, Tool, ToolArgumentError, ToolExecutionError, ToolOutput
from toolgym.plugins.mcp.bridge import SandboxProcess, ServerGone, sandbox_stdio_client
from toolgym.plugins.mcp.egress import EgressNetwork, egress_transport
from toolgym.plugins.mcp.results import (
    describe,
    error_output,
    innermost,
    is_schema_lie,
    schema_lie,
    to_output,
)
from toolgym.plugins.mcp.servers import McpServer

log = logging.getLogger("toolgym.plugins.mcp")

STOP_MARGIN_S = 15.0
"""Time past ``timeout_s`` that a call may take to stop a hung server and say so."""


class _AnyArguments(pydantic.BaseModel):
    """Placeholder ``args_model``: an MCP tool's arguments are checked against its JSON Schema."""

    model_config = pydantic.ConfigDict(extra="allow")


class McpTool(Tool):
    """A tool of an MCP server. ``validate`` checks the server's ``inputSchema`` (JSON Schema) and
    passes the arguments on whole, so that any argument name (``ctx``, ``sandbox``) reaches the server."""

    server: McpServer
    remote_name: str
    output_schema: dict[str, Any] | None
    _validator: Any

    def validate(self, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
        arguments, _ = self.json_object(arguments)
        problems = sorted(self._validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
        if problems:
            raise ToolArgumentError(
                f"invalid arguments for {self.name}: " + "; ".join(describe(e) for e in problems[:5])
            )
        return {"arguments": arguments}


def make_tool(server: McpServer, listed: mcp_types.Tool) -> McpTool:
    """The toolgym tool of one listed MCP tool; ``ConfigError`` when its name or schemas are not valid."""
    name = f"{server.tool_prefix}{listed.name}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(
            f"{server.label}: {name!r} is not a valid tool name (letters, digits, _ - ., at most 64)"
        )
    schema = dict(listed.input_schema or {"type": "object"})
    if schema.get("type") != "object":
        raise ConfigError(
            f"{server.label}: tool {listed.name!r} has an inputSchema that is not an object schema"
        )
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    output_schema = listed.output_schema
    try:
        validator.check_schema(schema)
        if output_schema is not None:
            jsonschema.validators.validator_for(output_schema, default=validator).check_schema(output_schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(
            f"{server.label}: tool {listed.name!r} declares an invalid JSON Schema ({exc.message})"
        ) from None
    schema.setdefault("properties", {})
    stdio = server.transport == "stdio"

    async def run_in_sandbox(arguments: dict[str, Any], *, sandbox: Any) -> ToolOutput:
        return await call_stdio(server, listed.name, arguments, sandbox, output_schema)

    async def run_over_http(arguments: dict[str, Any]) -> ToolOutput:
        return await call_http(server, listed.name, arguments, output_schema)

    tool = McpTool(
        name=name,
        description=(
            listed.description or listed.title or f"The {listed.name} tool of {server.label}."
        ).strip(),
        parameters=schema,
        fn=run_in_sandbox if stdio else run_over_http,
        args_model=_AnyArguments,
        sandbox=server.sandbox if stdio else None,
        timeout_s=(server.start_timeout_s if stdio else 0.0) + server.timeout_s + STOP_MARGIN_S,
        injected=frozenset({"sandbox"}) if stdio else frozenset(),
        is_async=True,
    )
    tool.server, tool.remote_name, tool.output_schema = server, listed.name, output_schema
    tool._validator = validator(schema)
    return tool


def make_tools(server: McpServer, listed: list[mcp_types.Tool]) -> list[McpTool]:
    """A tool for each listed tool whose name and schemas are valid; each one left out is logged."""
    tools = []
    for item in listed:
        try:
            tools.append(make_tool(server, item))
        except ConfigError as exc:
            log.warning("%s; the tool is left out", exc)
    return tools


# -- stdio: a server inside the episode's sandbox ----------------------------------------------------


@dataclass(slots=True)
class _Running:
    process: SandboxProcess
    handshake: mcp_types.InitializeResult


@dataclass(slots=True)
class _SandboxServers:
    lock: asyncio.Lock
    """One call at a time per sandbox: each call reads what the server wrote since the last one."""
    running: dict[str, _Running]


_servers: weakref.WeakKeyDictionary[Any, _SandboxServers] = weakref.WeakKeyDictionary()
"""The servers started in each sandbox (by server name). Weak: a destroyed sandbox drops its entry."""


@asynccontextmanager
async def _stdio_session(server: McpServer, process: SandboxProcess) -> AsyncIterator[ClientSession]:
    async with sandbox_stdio_client(process, max_message_bytes=server.max_message_bytes) as (read, write):
        async with ClientSession(read, write) as session:
            yield session


async def _start(server: McpServer, sandbox: Any) -> _Running:
    process = await SandboxProcess.start(
        sandbox,
        server.command,
        env=server.env,
        cwd=server.cwd,
        label=server.label,
        timeout_s=server.start_timeout_s,
    )
    try:
        async with asyncio.timeout(server.start_timeout_s):
            async with _stdio_session(server, process) as session:
                handshake = await session.initialize()
    except BaseException as exc:
        await process.stop()
        if isinstance(exc, TimeoutError):
            raise ToolExecutionError(
                f"{server.label} did not finish MCP's handshake within {server.start_timeout_s:g}s"
            ) from None
        if isinstance(exc, Exception):
            raise ToolExecutionError(_failure(server, process, innermost(exc), "starting")) from None
        raise
    return _Running(process, handshake)


def _failure(server: McpServer, process: SandboxProcess | None, exc: BaseException, doing: str) -> str:
    if process is not None and process.ended:
        return f"{process.exit_note()} while {doing}"
    if process is not None and process.failure is not None:
        return f"{process.failure} while {doing}"
    if isinstance(exc, MCPError):
        return f"{server.label} failed while {doing}: {exc.message}"
    return f"{server.label} failed while {doing}: {type(exc).__name__}: {exc}"


async def call_stdio(
    server: McpServer, remote: str, arguments: dict[str, Any], sandbox: Any, output_schema: Any
) -> ToolOutput:
    """Call ``remote`` on the server of this sandbox, starting it first when it is not running."""
    if sandbox is None:
        raise ToolExecutionError(f"{server.label} runs in a {server.sandbox!r} sandbox; none was given")
    here = _servers.setdefault(sandbox, _SandboxServers(asyncio.Lock(), {}))
    async with here.lock:
        return await _call_locked(server, remote, arguments, sandbox, output_schema, here.running)


async def _call_locked(
    server: McpServer,
    remote: str,
    arguments: dict[str, Any],
    sandbox: Any,
    output_schema: Any,
    table: dict[str, _Running],
) -> ToolOutput:
    for attempt in (1, 2):
        running = table.get(server.name)
        if running is None:
            running = table[server.name] = await _start(server, sandbox)
        process = running.process
        process.failure, process.sent = None, False
        try:
            async with asyncio.timeout(server.timeout_s):
                async with _stdio_session(server, process) as session:
                    session.adopt(running.handshake)
                    result = await session.call_tool(remote, arguments)
        except TimeoutError:
            table.pop(server.name, None)
            await process.stop()
            return error_output(
                server,
                f"{server.label} did not answer {remote!r} within {server.timeout_s:g}s; it was stopped, and "
                "the next call starts it afresh (its earlier state is lost)",
                timed_out=True,
            )
        except Exception as exc:
            leaf = innermost(exc)
            if is_schema_lie(leaf):
                return schema_lie(server, remote, leaf)
            if isinstance(process.failure, ServerGone) and not process.sent and attempt == 1:
                table.pop(server.name, None)  # the sandbox was reset before the call reached it: start again
                continue
            if isinstance(leaf, MCPError) and process.failure is None and not process.ended:
                if leaf.code != mcp_types.CONNECTION_CLOSED:
                    return error_output(
                        server, f"{server.label} failed the call to {remote!r}: {leaf.message}"
                    )
            table.pop(server.name, None)
            await process.stop()
            return error_output(
                server,
                _failure(server, process, leaf, f"running {remote!r}")
                + "; the next call starts it afresh (its earlier state is lost)",
                crashed=True,
            )
        return to_output(server, remote, result, output_schema)
    raise AssertionError("unreachable")


# -- HTTP ----------------------------------------------------------------------------------------


@asynccontextmanager
async def _http_session(
    server: McpServer, timeout_s: float, network: EgressNetwork
) -> AsyncIterator[ClientSession]:
    """An initialized session with ``server``, every connection made (or refused) by ``network``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(timeout_s, read=timeout_s)
    async with httpx2.AsyncClient(
        headers=server.headers, timeout=timeout, transport=egress_transport(network), trust_env=False
    ) as client:
        assert server.url is not None
        async with streamable_http_client(
            server.url, http_client=client, max_sse_event_size=server.max_message_bytes
        ) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call_http(
    server: McpServer, remote: str, arguments: dict[str, Any], output_schema: Any
) -> ToolOutput:
    """One call, as one MCP session of its own."""
    network = EgressNetwork(server)
    try:
        async with asyncio.timeout(server.timeout_s):
            async with _http_session(server, server.timeout_s, network) as session:
                result = await session.call_tool(remote, arguments)
    except TimeoutError:
        if network.refused:
            return error_output(
                server, f"{server.label} may not be reached: {network.refused}", egress_refused=True
            )
        return error_output(
            server, f"{server.label} did not answer {remote!r} within {server.timeout_s:g}s", timed_out=True
        )
    except Exception as exc:
        if network.refused:
            return error_output(
                server, f"{server.label} may not be reached: {network.refused}", egress_refused=True
            )
        leaf = innermost(exc)
        if is_schema_lie(leaf):
            return schema_lie(server, remote, leaf)
        if isinstance(leaf, MCPError):
            return error_output(server, f"{server.label} failed the call to {remote!r}: {leaf.message}")
        return error_output(
            server, f"{server.label} could not be reached ({type(leaf).__name__}: {leaf})", crashed=True
        )
    return to_output(server, remote, result, output_schema)


# -- listing -------------------------------------------------------------------------------------


async def _list(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await session.list_tools(
            params=mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def list_server_tools(
    server: McpServer, open_sandboxes: Callable[[], Any] | None = None
) -> list[McpTool]:
    """Connect to ``server`` and make a tool of each tool it lists. ``open_sandboxes``: makes the
    sandbox backend a stdio server is listed in (default: :func:`default_sandboxes`)."""
    if server.transport == "http":
        network = EgressNetwork(server)
        try:
            async with asyncio.timeout(server.start_timeout_s):
                async with _http_session(server, server.start_timeout_s, network) as session:
                    listed = await _list(session)
        except Exception as exc:
            why = f"it may not be reached: {network.refused}" if network.refused else _explain(innermost(exc))
            raise ConfigError(f"{server.label} could not be listed: {why}") from None
        return make_tools(server, listed)
    backend = (open_sandboxes or default_sandboxes)()
    try:
        sandbox = await backend.acquire(server.sandbox, episode_id=f"mcp-list-{server.name}")
        try:
            try:
                running = await _start(server, sandbox)
            except ToolExecutionError as exc:
                raise ConfigError(f"{server.label} could not be listed: {exc}") from None
            try:
                async with asyncio.timeout(server.start_timeout_s):
                    async with _stdio_session(server, running.process) as session:
                        session.adopt(running.handshake)
                        listed = await _list(session)
            except Exception as exc:
                raise ConfigError(
                    f"{server.label} could not be listed: "
                    + _failure(server, running.process, innermost(exc), "listing its tools")
                ) from None
            finally:
                await running.process.stop()
        finally:
            await backend.release(sandbox)
    finally:
        await backend.aclose()
    return make_tools(server, listed)


def _explain(exc: BaseException) -> str:
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def default_sandboxes() -> Any:
    """The sandbox backend ``auto`` picks (Docker when an engine answers, else bubblewrap), opened over
    the sandboxes plugin alone: listing runs while the process-wide registry is being loaded, and
    asking that registry would wait on itself."""
    from toolgym import Registry
    from toolgym.core.sandbox import open_sandbox_backend
    from toolgym.sandboxes import plugin as sandboxes_plugin

    registry = Registry.load(entry_points=False, plugins=[("sandboxes", sandboxes_plugin)])
    return open_sandbox_backend(registry, "auto")
