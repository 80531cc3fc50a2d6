"""``toolgym envs``: list environments and tasks."""

from __future__ import annotations

import json

import typer

from toolgym.cli.common import console, registry_or_exit, shown

app = typer.Typer(no_args_is_help=True, help="List the environments and tasks of installed plugins.")


@app.command("list")
def list_envs(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List every environment and task the installed plugins provide."""
    reg = registry_or_exit()
    specs = sorted(reg.envs.values(), key=lambda s: s.name)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {"name": s.name, "plugin": s.plugin, "description": s.description, "tags": list(s.tags)}
                    for s in specs
                ],
                indent=2,
            )
        )
        return
    from rich.table import Table

    table = Table("environment", "plugin", "tags", "description")
    for s in specs:
        table.add_row(*(shown(x) for x in (s.name, s.plugin, ", ".join(s.tags), s.description)))
    console().print(table)
