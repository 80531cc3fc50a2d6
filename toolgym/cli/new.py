"""``toolgym new``: scaffold a plugin package."""

from __future__ import annotations

from pathlib import Path

import typer

from toolgym.cli.common import console

app = typer.Typer(no_args_is_help=True, help="Scaffold a pip-installable plugin package with a passing test.")


@app.command("tool")
def new_tool(
    name: str, out: Path = typer.Option(Path("."), "--out", "-o", help="Where to create the package.")
) -> None:
    """A tool plugin (an async function with a schema from its signature)."""
    _made("tool", name, out)


@app.command("env")
def new_env(
    name: str, out: Path = typer.Option(Path("."), "--out", "-o", help="Where to create the package.")
) -> None:
    """An environment plugin (reset/step/anchor and a scripted solver)."""
    _made("env", name, out)


def _made(kind: str, name: str, out: Path) -> None:
    from toolgym.scaffold import scaffold

    root = scaffold(kind, name, out)
    console().print(f"created {root}\n  cd {root} && pip install -e . && pytest")
