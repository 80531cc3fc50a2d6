"""``bench/verl_vs_local.py --smoke``: both trainers run from the demo's warm start (verl's own trainer
on the CPU with a local Ray), the page and the curves are written, and a rerun keeps the runs it has.
One unit with the other Ray tests under xdist (``tests/conftest.py``: ``SERIAL``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.required import need_module

need_module("verl")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def bench(out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "verl_vs_local.py"),
            "--smoke",
            "--out",
            str(out),
            "--records",
            str(out / "records"),
            *more,
        ],
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
        assert result["phases"] and all(v >= 0 for v in result["phases"].values()), result
        assert json.loads((out / "records" / f"{trainer}-seed0.json").read_text()) == result
    assert "gen" in json.loads((out / "verl-seed0" / "result.json").read_text())["phases"]
    page = (out / "verl_vs_local.md").read_text()
    assert "| local |" in page and "| verl |" in page and "## Protocol" in page
    assert "## Where a step's time goes" in page and "| verl | **whole step** |" in page
    assert (out / "verl_vs_local_learning_curves.png").stat().st_size > 0
    again = bench(out)
    assert again.returncode == 0 and again.stdout.count("kept from") == 2, again.stdout[-2000:]
    (out / "verl_vs_local.md").unlink()
    report = bench(out, "--report-only")  # the page from the records alone
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert (out / "verl_vs_local.md").read_text() == page
