"""``bench/verl_vs_local.py --smoke``: both trainers run from the demo's warm start (verl's own trainer
on the CPU with a local Ray), the page and the curves are written, and a rerun keeps the runs it has.
One unit with the other Ray tests under xdist (``tests/conftest.py``: ``SERIAL``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="the verl side needs verl: pip install toolgym[verl]")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def bench(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "verl_vs_local.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=out.parent,
    )


def test_verl_vs_local_smoke(tmp_path: Path) -> None:
    out = tmp_path / "vvl"
    done = bench(out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for trainer in ("local", "verl"):
        result = json.loads((out / f"{trainer}-seed0" / "result.json").read_text())
        assert [s for s, _ in result["curve"]] == [0, 1], result  # held-out before RL and after its one step
        assert (
            all(0.0 <= v <= 1.0 for _, v in result["curve"]) and result["step_s"] and result["step_s"][0] > 0
        )
    page = (out / "verl_vs_local.md").read_text()
    assert "| local |" in page and "| verl |" in page and "## Protocol" in page
    assert (out / "verl_vs_local_learning_curves.png").stat().st_size > 0
    again = bench(out)
    assert again.returncode == 0 and again.stdout.count("kept from") == 2, again.stdout[-2000:]
