"""What plugins add to toolgym's own commands: command groups of the ``toolgym`` CLI and rows of
``toolgym sandbox audit``.

The CLI imports no plugin: it asks the registry for these specs and loads a group's module only
when that group runs, so a plugin's command, like its tools, is found through its entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CliCommand:
    """A command group a plugin adds to the ``toolgym`` command line."""

    name: str
    """The sub-command (``toolgym NAME ...``); toolgym's own command names win over a plugin's."""
    entry: str
    """``"module:attr"`` of a ``typer.Typer`` app, imported only when the command runs or help is shown."""
    help: str
    """One line for ``toolgym --help``."""
    plugin: str = ""
    """The plugin that provides it (set by the registry)."""


AuditRun = Callable[..., Coroutine[Any, Any, list[Any]]]
"""``async run(*, options, sandbox_backend, progress) -> rows``: ``options`` holds the audit command's
values named in :attr:`AuditCheck.options`; ``sandbox_backend`` is ``(name, factory)`` when the
check's ``kind`` is among the audited kinds, else None; ``progress`` is called with each row."""


@dataclass
class AuditCheck:
    """Rows a plugin adds to ``toolgym sandbox audit`` (rows of :mod:`toolgym.sandboxes.audit.rows`)."""

    name: str
    """Unique among audit checks (the SQL tool's is ``sql``)."""
    run: AuditRun
    kind: str | None = None
    """The sandbox kind whose sandboxes the check also probes when that kind is audited (``--kind``)."""
    options: Sequence[str] = field(default_factory=tuple)
    """Names of ``toolgym sandbox audit`` options the check reads (e.g. ``sql_dsn``)."""
    plugin: str = ""
    """The plugin that provides it (set by the registry)."""
