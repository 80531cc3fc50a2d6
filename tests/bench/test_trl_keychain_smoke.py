"""``bench/trl_keychain.py --smoke``: TRL's GRPOTrainer and the local trainer both run from the demo's warm
start, the page and its curves are written, and a rerun keeps the runs it has."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.required import need_module

need_module("trl")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def bench(out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "trl_keychain.py"), "--smoke", "--out", str(out), *more],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out.parent,
    )


def test_trl_keychain_smoke(tmp_path: Path) -> None:
    out = tmp_path / "trlk"
    done = bench(out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("trl-seed0", "local-grpo-seed0"):
        result = json.loads((out / name / "result.json").read_text())
        assert [s for s, _ in result["curve"]] == [0, 2], result  # held-out before RL and after its 2 steps
        assert all(0.0 <= v <= 1.0 for _, v in result["curve"]) and len(result["step_s"]) == 2
        assert set(result["phases"]) == {"rollout", "update"}, result
    page = (out / "trl_keychain.md").read_text()
    assert "| TRL | GRPO |" in page and "| local | GRPO |" in page and "## Protocol" in page
    assert (out / "trl_keychain_learning_curves.png").stat().st_size > 0
    again = bench(out, "--report-only")
    assert again.returncode == 0 and again.stdout.count("kept from") == 2, again.stdout[-2000:]
