"""``bench/miniwob_pixels.py --smoke``: every part of the pixels benchmark at toy sizes, in a real
Chromium (Docker's browser sandbox): the tiny-qwen3-vl warm start built by its recipe from scripted
coordinate clicks on screenshots, the warm start's held-out evaluation, the blind baseline, one RL step
of GRPO and of GiGPO, the records and the page (the warm start shortened once more by ``--warm-set``);
a rerun keeps what it has and ``--report-only`` rewrites the same page from the records alone. 44 to 55 s on 2 shared cores once the toy warm start is in the
toolgym cache (building it adds about 30 s); minutes when the host is loaded far past its cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandboxes.helpers import ensure_images, require

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SHORTER = ("--warm-set", "sft_max_steps=3", "--warm-set", "sft_check_every=3")
"""The smoke's warm start shortened once more, through the recipe option the benchmark offers."""


def bench(out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "miniwob_pixels.py"), "--smoke", "--out", str(out), *more],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out.parent,
    )


def test_miniwob_pixels_smoke(tmp_path: Path) -> None:
    require("docker")
    ensure_images("browser")
    out = tmp_path / "pixels"
    done = bench(out, *SHORTER)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = out / "records"
    warm = json.loads((records / "warmstart.json").read_text())
    assert warm["recipe"]["model"] == "tiny-qwen3-vl" and warm["rows"] > 0 and warm["sft_steps"] == 3
    assert json.loads((records / "before.json").read_text())["heldout"]["episodes"] == 2
    blind = json.loads((records / "blind.json").read_text())
    assert blind["episodes"] == 2 and set(blind["points"]) <= {"click-test", "focus-text"}
    for est in ("grpo", "gigpo"):
        run = json.loads((records / f"{est}-seed0.json").read_text())
        assert [s["step"] for s in run["steps"]] == [1] and run["after"]["episodes"] == 2, run
        assert run["steps"][0]["sample_s"] > 0 and run["episodes"]["episodes"] == 2
        assert run["episodes"]["llm_s"] > 0 and run["episodes"]["env_s"] > 0
    page = (out / "miniwob_pixels.md").read_text()
    assert "| **GRPO** | mean ± std (1) |" in page and "| **GiGPO** | mean ± std (1) |" in page
    assert "Blind baseline" in page and "## Where an RL step's time goes" in page
    again = bench(out, *SHORTER)
    assert again.returncode == 0 and again.stdout.count("kept from") == 4, again.stdout[-2000:]
    (out / "miniwob_pixels.md").unlink()
    report = bench(out, "--report-only", *SHORTER)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert (out / "miniwob_pixels.md").read_text() == page
