"""Helpers shared by CLI commands."""

from __future__ import annotations

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
