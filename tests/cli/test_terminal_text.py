"""Model, tool and environment text never drives the operator's terminal.

A trajectory whose every text carries escape sequences (OSC 52 clipboard write, OSC 8 hidden link,
screen clear, CSI, C1 controls, bidi overrides, BEL, backspace, carriage return) and a rich markup
link is shown by ``toolgym show`` (list and one trajectory, tokens too, on a real terminal's
console and off one); ``tools try`` prints such a tool's output; a collection whose episodes fail
with such an error ends on one error line. None of the raw sequences reaches the output.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.cli.helpers import Runner
from tests.trajectories.helpers import synthetic_trajectory
from toolgym import Action, EnvSpec, StepResult, hookimpl, tool
from toolgym.core.env.contract import Env
from toolgym.core.trajectory import Status, Trajectory
from toolgym.trajectories.store import write_all

PAYLOADS = {
    "osc52": "\x1b]52;c;ZWNobyBwd25lZA==\x07",  # write the clipboard
    "osc8": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",  # a hidden link
    "clear": "\x1b[2J\x1b[H",
    "csi": "\x1b[31;1m\x1b[8m",
    "c1_csi": "\x9b2J",
    "c1_osc": "\x9d52;c;Zm9v\x9c",
    "bidi": "\u202eevil\u202c \u2066x\u2069 \u202a\u202b\u202d",
    "bel": "\x07",
    "backspace": "rm -rf /\x08\x08\x08\x08\x08\x08\x08\x08ls",
    "cr": "harmless\rEVIL LINE",
    "del": "\x7f",
}
MARKUP_LINK = "[link=https://evil.example/]innocent[/link]"
EVIL = "".join(PAYLOADS.values()) + MARKUP_LINK
FORBIDDEN = (
    [chr(c) for c in range(0x20) if chr(c) not in "\n\t"]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
)


def _raw_left(text: str, *, styled: bool = False) -> list[str]:
    """The forbidden characters in ``text`` (with ``styled``: ESC only as rich's own SGR ``ESC[...m``
    and OSC 8 is forbidden outright, since rich emits no links here)."""
    if styled:
        import re

        assert "\x1b]" not in text, "an OSC sequence (clipboard, hyperlink) reached the terminal"
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return sorted({f"U+{ord(c):04X}" for c in text if c in FORBIDDEN})


def _evil_trajectory() -> Trajectory:
    t = synthetic_trajectory(3)
    t.trajectory_id = "evil" + "0" * 12
    t.model = "model" + EVIL
    t.task = "task" + EVIL
    t.prompt = [{"role": "user" + EVIL, "content": "prompt " + EVIL}]
    t.status, t.status_reason = Status.ERROR, "reason " + EVIL
    t.truncated, t.terminated, t.truncation_reason = True, False, "limit " + EVIL
    for s in t.segments:
        s.text += EVIL
    for step in t.steps:
        step.action = "action " + EVIL
        step.observation = "observation " + EVIL
        step.error = "error " + EVIL
        step.tool_calls[0].name = "tool" + EVIL
        step.tool_calls[0].arguments = {"code": EVIL}
    return t


@pytest.fixture
def evil_dataset(tmp_path: Path) -> Path:
    out = tmp_path / "evil"
    write_all(out, [_evil_trajectory()])
    return out


def test_visible_shows_every_control_character_and_keeps_newlines_and_tabs() -> None:
    from toolgym.core.util.terminal import visible

    shown = visible(EVIL + "\tkept\nkept\r\nkept")
    assert _raw_left(shown) == []
    assert shown.endswith("\tkept\nkept\nkept")
    assert "␛]52;c;" in shown and "\\x9b2J" in shown and "\\u202e" in shown and "harmless␍EVIL" in shown
    assert visible(shown) == shown and visible("plain text") == "plain text"


@pytest.mark.parametrize("tokens", [False, True])
def test_show_prints_no_raw_control_sequence(cli: Runner, evil_dataset: Path, tokens: bool) -> None:
    listed = cli("show", evil_dataset)
    one = cli("show", evil_dataset, "evil", *(["--tokens"] if tokens else []))
    assert listed.code == 0 and one.code == 0, (listed.err, one.err)
    for result in (listed, one):
        assert _raw_left(result.out + result.err) == [], result.out
    assert "␛]52;c;" in one.out and "\\u202e" in one.out and "harmless␍EVIL" in one.out, "shown, not dropped"
    assert "[link=" in one.out, "markup stays text"


def test_show_on_a_real_terminal_renders_styles_but_no_payload() -> None:
    from toolgym.trajectories.show import render_trajectory, summary_table

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="truecolor", width=160)
    traj = _evil_trajectory()
    console.print(render_trajectory(traj, tokens=True))
    console.print(summary_table([traj.model_dump(mode="json")]))
    assert _raw_left(buf.getvalue(), styled=True) == []
    assert "\x1b[" in buf.getvalue(), "styles still render"


@tool
async def evil_echo(text: str) -> str:
    """Return the text with escape sequences around it."""
    return EVIL + text + EVIL


class _EvilEnv(Env):
    """Every reset fails with an error that quotes escape sequences."""

    parser = "env_action"

    async def reset(self, *, seed: int, options: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        raise RuntimeError("the tool said " + EVIL)

    async def step(self, action: Action) -> StepResult:
        raise AssertionError("never reached")


class _EvilPlugin:
    @hookimpl
    def toolgym_tools(self) -> list[Any]:
        return [evil_echo]

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("evil-env", _EvilEnv)]


@pytest.fixture
def evil_cli(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> Runner:
    from tests.core.helpers import TestPlugin
    from toolgym.cli import common
    from toolgym.core.builtin import parsers as builtin
    from toolgym.core.registry import Registry

    registry = Registry.load(
        entry_points=False, plugins=[("parsers", builtin), ("test", TestPlugin()), ("evil", _EvilPlugin())]
    )
    monkeypatch.setattr(common, "get_registry", lambda: registry)
    return cli


def test_tools_try_prints_the_output_visibly(evil_cli: Runner) -> None:
    r = evil_cli("tools", "try", "evil_echo", "--args", '{"text": "middle"}')
    assert r.code == 0, r.err
    assert _raw_left(r.out + r.err) == [] and "middle" in r.out and "␛]52" in r.out


def test_a_collection_that_stops_on_an_error_prints_it_visibly(evil_cli: Runner, tmp_path: Path) -> None:
    r = evil_cli(
        "collect",
        "--env",
        "evil-env",
        "--model",
        "scripted",
        "--sandbox-backend",
        "none",
        "--no-progress",
        "-n",
        "2",
        "--fail-fast",
        "2",
        "--out",
        tmp_path / "out",
    )
    assert r.code == 1 and "the tool said" in r.err, r.err
    assert _raw_left(r.out + r.err) == [], r.err
