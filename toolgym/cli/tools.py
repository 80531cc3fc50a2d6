"""``toolgym tools``: list, describe and try tools."""

from __future__ import annotations

import asyncio
import json
import time

import typer

from toolgym.cli.common import MCP_ALLOW_HELP, MCP_HELP, console, name_mcp_servers, registry_or_exit, shown
from toolgym.core.util.terminal import visible

app = typer.Typer(no_args_is_help=True, help="List, inspect and try the tools of installed plugins.")


@app.command("list")
def list_tools(
    as_json: bool = typer.Option(False, "--json", help="Print the tools' schemas as JSON."),
    mcp: list[str] = typer.Option(None, "--mcp", help=MCP_HELP),
    mcp_allow: list[str] = typer.Option(None, "--mcp-allow", help=MCP_ALLOW_HELP),
) -> None:
    """List every tool the installed plugins provide (and the named MCP servers')."""
    name_mcp_servers(mcp, mcp_allow)
    reg = registry_or_exit()
    tools = sorted(reg.tools.values(), key=lambda t: t.name)
    if as_json:
        rows = [
            {
                "name": t.name,
                "plugin": t.plugin,
                "sandbox": t.sandbox,
                "timeout_s": t.timeout_s,
                "schema": t.schema,
            }
            for t in tools
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("tool", "plugin", "sandbox", "description")
    for t in tools:
        table.add_row(*(shown(x) for x in (t.name, t.plugin, t.sandbox or "-", t.description)))
    console().print(table)


@app.command("show")
def show_tool(
    name: str,
    mcp: list[str] = typer.Option(None, "--mcp", help=MCP_HELP),
    mcp_allow: list[str] = typer.Option(None, "--mcp-allow", help=MCP_ALLOW_HELP),
) -> None:
    """Print one tool's JSON schema."""
    name_mcp_servers(mcp, mcp_allow)
    reg = registry_or_exit()
    typer.echo(json.dumps(reg.tool(name).schema, indent=2))


@app.command("try")
def try_tool(
    name: str,
    args: str = typer.Option("{}", "--args", help="The arguments, as a JSON object."),
    backend: str = typer.Option(None, "--sandbox-backend", help="Sandbox backend for tools that need one."),
    mcp: list[str] = typer.Option(None, "--mcp", help=MCP_HELP),
    mcp_allow: list[str] = typer.Option(None, "--mcp-allow", help=MCP_ALLOW_HELP),
) -> None:
    """Run one call of a tool by hand and print its result and timing."""
    name_mcp_servers(mcp, mcp_allow)
    reg = registry_or_exit()
    t = reg.tool(name)
    try:
        arguments = json.loads(args)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--args is not valid JSON: {exc.msg}") from None

    async def run() -> None:
        from toolgym.cli.common import open_sandbox_backend

        sandbox = None
        sb_backend = None
        if t.sandbox is not None:
            sb_backend = await open_sandbox_backend(reg, backend)
            sandbox = await sb_backend.acquire(t.sandbox, episode_id="tools-try")
        try:
            start = time.perf_counter()
            out = await t.call(arguments, sandbox=sandbox)
            elapsed = time.perf_counter() - start
        finally:
            if sb_backend is not None:
                if sandbox is not None:
                    await sb_backend.release(sandbox)
                await sb_backend.aclose()
        typer.echo(visible(out.text))  # the tool's output: never raw control sequences on the terminal
        typer.secho(
            f"[{'error' if out.error else 'ok'} in {elapsed * 1000:.1f} ms]",
            fg="red" if out.error else "green",
            err=True,
        )

    asyncio.run(run())
