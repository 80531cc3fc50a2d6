"""One row per check of ``toolgym sandbox audit``, and how a check reports its outcome.

A check is an async function that returns a short detail when the sandbox held, raises ``Fail``
when something was not contained, ``Residual`` when it found a documented channel that cannot be
closed on this backend (a kernel counter that outlives a reset: the detail says what keeps it
harmless), and ``Skip`` only when the check does not apply to the backend (a remote engine, whose
host-side ``/proc`` this machine cannot see). A residual row is reported, not a failure. Any other exception is a
failure too: a check that could not look cannot vouch for containment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PASS, FAIL, SKIP, RESIDUAL = "pass", "FAIL", "skip", "residual"


class Fail(Exception):
    """Something was not contained; the message says what."""


class Skip(Exception):
    """The check does not apply to this backend; the message says why."""


class Residual(Exception):
    """A known channel this backend cannot close; the message says what carries over and what
    mitigates it."""


@dataclass(frozen=True)
class Row:
    """The outcome of one check."""

    check: str
    """Dotted name: ``isolation.*``, ``limits.*``, ``agent.*``, ``host.*``, ``egress.*``, ``reset.*``;
    ``sql.*`` for the SQL tool's databases (``toolgym.plugins.sql.audit``, which the CLI adds)."""
    backend: str
    """The sandbox backend's registered name (``docker``, ``local``, ``docker-hosts``); ``sqlite`` or
    ``postgresql`` for ``sql.*`` rows run from the host."""
    kind: str
    """The sandbox kind the check ran in (``host`` for a ``sql.*`` row run from the host)."""
    result: str
    """``pass``, ``FAIL``, ``skip`` or ``residual`` (a documented channel left open; not a failure)."""
    detail: str
    """What was seen (on a pass), what leaked (on a failure), or why the check does not apply."""
    seconds: float
    """Wall time of the check."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        return f"{self.check} ({self.kind})"


def outcome(exc: BaseException | None, detail: str = "") -> tuple[str, str]:
    """``(result, detail)`` of a check that returned ``detail`` or raised ``exc``."""
    if exc is None:
        return PASS, detail
    if isinstance(exc, Skip):
        return SKIP, str(exc)
    if isinstance(exc, Residual):
        return RESIDUAL, str(exc)
    if isinstance(exc, Fail):
        return FAIL, str(exc)
    return FAIL, f"the check could not run: {type(exc).__name__}: {exc}"


def failed(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.result == FAIL]
