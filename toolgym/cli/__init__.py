"""The ``toolgym`` command line.

Each command group lives in its own module under ``toolgym.cli`` and exposes a ``typer.Typer``
named ``app`` (groups) or a function named ``command`` (single commands). Modules are imported
only when their command runs, so ``toolgym --help`` stays fast and a missing optional dependency
breaks only its own command.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from toolgym import __version__

# name → (module under toolgym.cli, one-line help). Groups expose `app`, commands expose `command`.
GROUPS: dict[str, tuple[str, str]] = {
    "tools": ("tools", "List, inspect and try the tools of installed plugins."),
    "envs": ("envs", "List the environments and tasks of installed plugins."),
    "export": ("export", "Export a trajectory dataset to other formats."),
    "new": ("new", "Scaffold a pip-installable plugin package with a passing test."),
    "sandbox": ("sandbox", "Build sandbox images, check the host, list and clean up sandboxes."),
}
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "Serve a local model over SGLang and OpenAI-compatible HTTP (for tests and demos)."),
    "serve-env": (
        "serve_env",
        "Serve an environment over OpenEnv's protocol, for OpenEnv clients (TRL's too).",
    ),
    "collect": ("collect", "Run episodes of an environment with a model and store their trajectories."),
    "verify": ("verify", "Check the token-faithfulness invariants of a stored dataset."),
    "show": ("show", "List a dataset or render one trajectory in the terminal."),
    "report": ("report", "Write a static HTML report of a dataset: episodes, tokens, rewards and plots."),
    "reverify": (
        "reverify",
        "Re-score a stored dataset with the current reward functions and report what changed.",
    ),
    "dedup": ("dedup", "Copy a dataset without duplicate trajectories (by id or by prompt)."),
    "train": ("train", "Train a policy on an environment with RL (verl, or the local reference trainer)."),
    "demo": ("demo", "Run the embedded demo: scripted data, SFT warm start, GiGPO on a tool task, on a CPU."),
    "warmstart": (
        "warmstart",
        "Build (once; cached) the warm-started tiny model an environment's local RL configs start from.",
    ),
}


def plugin_commands() -> dict[str, Any]:
    """The command groups installed plugins add (``toolgym_cli_commands``), by name; toolgym's own
    names win. The registry is loaded only here: ``toolgym collect ...`` never pays for it."""
    from toolgym.core.registry import get_registry

    own = {*GROUPS, *COMMANDS}
    return {name: spec for name, spec in get_registry().cli_commands.items() if name not in own}


class LazyGroup(TyperGroup):
    def list_commands(self, ctx):  # type: ignore[no-untyped-def]
        return sorted({*super().list_commands(ctx), *GROUPS, *COMMANDS, *plugin_commands()})

    def get_command(self, ctx, name):  # type: ignore[no-untyped-def]
        if name in GROUPS:
            module = importlib.import_module(f"toolgym.cli.{GROUPS[name][0]}")
            group = typer.main.get_group(module.app)
            group.name = name
            group.help = group.help or GROUPS[name][1]
            return group
        if name in COMMANDS:
            module = importlib.import_module(f"toolgym.cli.{COMMANDS[name][0]}")
            sub = typer.Typer(add_completion=False)
            sub.command(name=name, help=COMMANDS[name][1])(module.command)
            return typer.main.get_command(sub)
        found = super().get_command(ctx, name)
        if found is not None:
            return found
        spec = plugin_commands().get(name)
        if spec is None:
            return None
        from toolgym.core.env.spec import load_object

        group = typer.main.get_group(load_object(spec.entry))
        group.name = name
        group.help = group.help or spec.help
        return group


app = typer.Typer(
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=True,  # `toolgym --install-completion`: once, for every command
    help="toolgym: train tool-using LLM agents with reinforcement learning.",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:  # eager: runs while the options are parsed, before a command is required
        typer.echo(f"toolgym {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="Log more to stderr: -v for INFO, -vv for DEBUG."
    ),
    log_level: str = typer.Option(
        None,
        "--log-level",
        metavar="LEVEL",
        help="Log level on stderr: DEBUG, INFO, WARNING (default) or ERROR; "
        "also TOOLGYM_LOG_LEVEL. Runs keep a DEBUG log in their output folder.",
    ),
) -> None:
    from toolgym import logs
    from toolgym.core.errors import ConfigError

    try:
        logs.configure(logs.level_for(verbose, log_level))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def main() -> None:
    from toolgym.collect.redact import redact_url
    from toolgym.core.errors import ToolgymError
    from toolgym.core.util.terminal import visible

    try:
        app()
    except ToolgymError as exc:
        typer.secho(f"error: {visible(redact_url(str(exc)))}", fg="red", err=True)
        sys.exit(getattr(exc, "exit_code", 2))  # 2: bad input; errors of a run that started set 1
    except OSError as exc:  # a path that cannot be read or written, a full disk: one line, not a traceback
        if os.environ.get("TOOLGYM_DEBUG"):
            raise
        typer.secho(f"error: {visible(os_error_message(exc))}", fg="red", err=True)
        sys.exit(2 if exc.errno in _PATH_ERRNOS else 1)


_PATH_ERRNOS = {
    errno.ENOENT,
    errno.EEXIST,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENAMETOOLONG,
}


def os_error_message(exc: OSError) -> str:
    """One sentence for an I/O error: what failed on which path, and what to do."""
    where = f" ({exc.filename})" if exc.filename else ""
    what = exc.strerror or type(exc).__name__
    hint = (
        "free space and run again"
        if exc.errno == errno.ENOSPC
        else "check the path (set TOOLGYM_DEBUG=1 for the traceback)"
    )
    return f"{what}{where}; {hint}"
