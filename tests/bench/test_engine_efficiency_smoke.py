"""bench/engine_efficiency.py runs end to end on a tiny workload and prints the fast path's CPU per
turn beside the reference path's, measured in the same run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.engine_efficiency import reference_path
from toolgym.core import tools
from toolgym.core.rollout import episode
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tools import Tool, tool

REPO = Path(__file__).resolve().parents[2]


def test_prints_cpu_per_turn_beside_the_reference_path() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "engine_efficiency.py"),
            *("--episodes", "8", "--turns", "2", "--latency", "0.01", "--repeat", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("engine CPU per turn:"))
    assert "vs reference path" in line and "ms (runs" in line


def test_the_reference_path_is_the_engine_before_its_shortcuts_and_is_put_back() -> None:
    @tool
    def add(a: int) -> int:
        """Add one."""
        return a + 1

    fast = (ChatFormat.reference, tools.within, episode.within, Tool.check)
    assert type(add.check({"a": 1})) is tools.CheckedArguments
    with reference_path(True):
        assert ChatFormat.reference and tools.within is episode.within is not fast[1]
        arguments = {"a": 1}
        assert add.check(arguments) is arguments  # validated, not carried: the call validates again
    assert (ChatFormat.reference, tools.within, episode.within, Tool.check) == fast
