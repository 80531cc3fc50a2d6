"""Helpers of the CLI tests (also used by tests/trajectories): an in-process ``toolgym`` runner over the test registry, and mounts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.core.helpers import test_registry


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        """stdout and stderr with rich's line wrapping undone."""
        return " ".join((self.out + "\n" + self.err).split())


Runner = Callable[..., CliResult]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Runner:
    """Run ``toolgym ARGS`` through the real entry point (``toolgym.cli.main``) in this process,
    with the test plugin's environments; any exception other than SystemExit fails the test (a
    raw traceback is exactly what these tests forbid)."""
    import logging

    from toolgym import cli as cli_pkg
    from toolgym.cli import common

    registry = test_registry()
    monkeypatch.setattr(common, "get_registry", lambda: registry)
    common.console.cache_clear()  # a console sized by an earlier test's COLUMNS is not this one's
    logger = logging.getLogger("toolgym")  # the root options configure it: put it back after the test
    monkeypatch.setattr(logger, "handlers", list(logger.handlers))
    monkeypatch.setattr(logger, "level", logger.level)
    from toolgym import logs

    monkeypatch.setattr(logs, "_scrubbers", [])  # a run's secrets are its own

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["toolgym", *map(str, args)])
        try:
            cli_pkg.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def _can_mount() -> bool:
    return os.geteuid() == 0 and sys.platform.startswith("linux")


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (root only; the test is skipped where mount fails)."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root on Linux")
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)
