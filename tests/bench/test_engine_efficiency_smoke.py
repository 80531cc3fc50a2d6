"""bench/engine_efficiency.py runs end to end on a tiny workload and prints the fast path's CPU per
turn beside the reference path's, measured in the same run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    assert "vs reference render path" in line and "ms (runs" in line
