"""``bench/swe_rollouts.py --smoke``: both rows (toolgym's agent channel and the docker-exec-per-call
baseline) play and grade every episode, the pool reuses sandboxes, and the figures add up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandboxes.helpers import ensure_images, require

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_swe_rollouts_smoke(tmp_path: Path) -> None:
    require("docker")
    ensure_images("shell")
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "swe_rollouts.py"),
            "--smoke",
            "4",
            "--latency",
            "0.2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "baseline: docker exec per call" in proc.stdout and "load average" in proc.stdout
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == ["toolgym (agent channel)", "baseline: docker exec per call"]
    for r in rows:
        assert r["episodes"] == 8 and r["failed"] == 0 and r["solved"] == 8, (
            r
        )  # the oracle resolves every shipped task
        assert (
            r["eps"] > 0
            and 0 < r["g50"] <= r["g99"]
            and r["model"] > 0
            and r["sandbox"] > 0
            and r["grading"] > 0
        )
        assert abs(r["model"] + r["sandbox"] + r["grading"] + r["other"] - 1) < 0.02, r
        assert r["created"] + r["reused"] == 8 and r["reused"] > 0, (
            r
        )  # the second wave reuses the first's sandboxes
        assert r["rss"] > 0
