"""``bench/warmstart_sweep.py --smoke``: two toy WebShop variants built side by side, each measured on
the held-out tasks of a local config the way the learning table's "before" column is (toy sizes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_sweep_builds_variants_and_measures_them_held_out(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "warmstart_sweep.py"),
            "--smoke",
            "--env",
            "webshop",
            "--jobs",
            "2",
            "--heldout",
            "webshop_grpo",
            "--heldout-tasks",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "sweep.json").read_text())
    assert [v["name"] for v in summary["variants"]] == ["base", "wide"]
    for variant in summary["variants"]:
        assert variant["sft_steps"] == 2 and variant["recipe"]["env"] == "webshop-verl"
        held = variant["heldout"]
        assert held["config"] == "webshop_grpo" and held["tasks"] == 2 and 0.0 <= held["success"] <= 1.0
        assert held["split"] == "validation"  # recipe choices look at validation, never at test
        assert Path(variant["dir"], "READY").is_file()
    assert summary["variants"][1]["recipe"]["hidden_size"] == 96
    assert "held-out" in proc.stdout


def test_held_out_evaluation_refuses_a_config_whose_sandboxes_are_missing(tmp_path: Path) -> None:
    """math_python runs Python in sandboxes: measured without them, every tool call fails and the
    figure is the missing sandbox's, not the model's (seen: 0 % on 480 tasks in 6 s, no error)."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "warmstart_sweep.py"),
            "--eval-model",
            str(tmp_path / "no-model"),
            "--heldout",
            "math_python_grpo",
            "--heldout-tasks",
            "2",
            "--heldout-set",
            "toolgym.sandbox_backend=none",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode != 0 and not proc.stdout.strip()
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "python" in last and "sandbox_backend is none" in last, proc.stderr[
        -2000:
    ]


def test_a_test_split_the_config_does_not_name_is_one_line_listing_those_it_does(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "warmstart_sweep.py"),
            "--eval-model",
            str(tmp_path / "no-model"),
            "--heldout",
            "alfworld_grpo",
            "--test",
            "unseen_rooms",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "no test split 'unseen_rooms'" in last
    assert "in_distribution, out_of_distribution" in last
