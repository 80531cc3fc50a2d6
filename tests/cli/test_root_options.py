"""The root command's options: ``--version`` answers without a command; ``--verbose``/``--log-level``
set what reaches stderr; a collection keeps a DEBUG log beside its outputs."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import Runner
from tests.cli.test_cli_errors import BASE
from toolgym import __version__, logs


def test_version_without_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolgym", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"toolgym {__version__}"), done.stderr


@pytest.mark.parametrize(
    "verbose, level, env, want",
    [
        (0, None, None, logging.WARNING),
        (1, None, None, logging.INFO),
        (2, None, None, logging.DEBUG),
        (0, "error", None, logging.ERROR),
        (2, "warning", None, logging.WARNING),
        (0, None, "DEBUG", logging.DEBUG),
    ],
)
def test_the_terminal_level(
    verbose: int, level: str | None, env: str | None, want: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("TOOLGYM_LOG_LEVEL", env)
    else:
        monkeypatch.delenv("TOOLGYM_LOG_LEVEL", raising=False)
    assert logs.level_for(verbose, level) == want


def test_a_bad_level_is_one_sentence(cli: Runner) -> None:
    result = cli("--log-level", "loud", "tools", "list")
    assert result.code == 2 and "'loud' is not a level; use one of DEBUG, INFO, WARNING, ERROR" in result.text


def test_verbose_reaches_stderr_and_collect_keeps_a_debug_log(
    cli: Runner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    quiet = cli(*BASE, "--out", str(out))
    assert quiet.code == 0, quiet.text
    assert "INFO toolgym.collect.run: collect counter with sim:0" not in quiet.err
    log = (out / "toolgym.log").read_text()
    assert (
        "INFO toolgym.collect.run: collect counter with sim:0" in log
        and f"log: {out / 'toolgym.log'}" in quiet.text
    )
    loud = cli("-v", *BASE, "--out", str(tmp_path / "b"))
    assert loud.code == 0 and "INFO toolgym.collect.run: collect counter with sim:0" in loud.err


def test_plugin_texts_with_brackets_list_literally(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A docstring with ``[/x]`` crashed ``tools list`` (a closing markup tag), and ``[id]`` vanished."""
    from toolgym import hookimpl, tool
    from toolgym.cli import common
    from toolgym.core.builtin import parsers as builtin
    from toolgym.core.registry import Registry

    @tool()
    async def bracketed(x: str) -> str:
        """Elements carry [id] numbers; close with [/x] and [bold]never bold[/bold]."""
        return x

    class Plugin:
        @hookimpl
        def toolgym_tools(self) -> list:
            return [bracketed]

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("brackets", Plugin())])
    monkeypatch.setattr(common, "get_registry", lambda: registry)
    monkeypatch.setenv("COLUMNS", "300")
    common.console.cache_clear()
    result = cli("tools", "list")
    assert result.code == 0, result.text
    assert "Elements carry [id] numbers; close with [/x] and [bold]never bold[/bold]." in result.text


def test_flag_names_agree_across_commands(cli: Runner, tmp_path: Path) -> None:
    """``new tool -o`` as ``collect -o``; ``index search`` and ``index serve`` both take ``--topk``/``-k``."""
    made = cli("new", "tool", "shout", "-o", str(tmp_path))
    assert made.code == 0 and any(tmp_path.iterdir()), made.text
    for sub in ("search", "serve"):
        helped = cli("index", sub, "--help")
        assert helped.code == 0 and "--topk" in helped.text and "-k" in helped.text, helped.text


def test_shell_completion_is_offered_once_at_the_root(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real entry point, in this process: one ``python -m toolgym`` per command took 40 s."""
    from toolgym.cli import COMMANDS, GROUPS

    monkeypatch.setenv("COLUMNS", "200")

    def help_of(*args: str) -> str:
        done = cli(*args, "--help")
        assert done.code == 0, done.text
        return done.out

    assert "--install-completion" in help_of()
    offering = [name for name in (*GROUPS, *COMMANDS) if "--install-completion" in help_of(name)]
    assert not offering, f"commands that offer completion of their own (the root does it for all): {offering}"
