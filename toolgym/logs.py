"""Logging for the command line: configured once, at the root command, never on import.

The library's modules log through ``logging.getLogger(__name__)`` and configure nothing (a library
must not). The CLI sets the level of the ``toolgym`` logger from ``--verbose`` (``-v``: INFO, ``-vv``:
DEBUG), ``--log-level`` or ``TOOLGYM_LOG_LEVEL`` (default WARNING) and writes records to stderr;
a run that has an output folder (``collect``) also keeps every record at DEBUG in ``toolgym.log``
beside its outputs, whatever the terminal's level.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_TERMINAL = "toolgym-terminal"
_scrubbers: list[Callable[[str], str]] = []


class _ScrubbingFormatter(logging.Formatter):
    """Every line, traceback included, passes the run's scrubbers (secrets in a model URL, an API
    key a server echoes in its errors) before it reaches the terminal or a log file."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for scrub in _scrubbers:
            text = scrub(text)
        return text


def add_scrubber(scrub: Callable[[str], str]) -> None:
    """Blank what ``scrub`` blanks in every record of ``toolgym.*`` from now on (a run's secrets)."""
    if scrub not in _scrubbers:
        _scrubbers.append(scrub)


def level_for(verbose: int, log_level: str | None) -> int:
    """The terminal's level: ``--log-level`` wins, then ``-v``/``-vv``, then ``TOOLGYM_LOG_LEVEL``."""
    name = (log_level or os.environ.get("TOOLGYM_LOG_LEVEL") or "").upper()
    if log_level and name not in LEVELS:
        raise ValueError(f"--log-level {log_level!r} is not a level; use one of {', '.join(LEVELS)}")
    if log_level:
        return getattr(logging, name)
    if verbose:
        return logging.DEBUG if verbose > 1 else logging.INFO
    return getattr(logging, name) if name in LEVELS else logging.WARNING


def _sync(logger: logging.Logger) -> None:
    """The logger passes what its most talkative handler wants (records still propagate, so an
    application's or a test's own root handlers see them too)."""
    logger.setLevel(min((h.level for h in logger.handlers), default=logging.WARNING))


def configure(level: int) -> None:
    """Records of ``toolgym.*`` at ``level`` or above go to stderr: the stderr of now (a caller
    may have replaced it since an earlier call, and closed the old one), through one handler."""
    logger = logging.getLogger("toolgym")
    for old in [h for h in logger.handlers if h.get_name() == _TERMINAL]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_TERMINAL)
    handler.setFormatter(_ScrubbingFormatter(FORMAT))
    handler.setLevel(level)
    logger.addHandler(handler)
    _sync(logger)


def log_to_file(folder: Path, name: str = "toolgym.log") -> Path:
    """Keep every ``toolgym.*`` record (DEBUG and up) in ``folder/name`` too, appended; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = (folder / name).resolve()
    logger = logging.getLogger("toolgym")
    if not any(isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path for h in logger.handlers):
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(_ScrubbingFormatter(FORMAT))
        handler.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    _sync(logger)
    return path
