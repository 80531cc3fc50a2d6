"""The results page's comparisons: the paired bootstrap recovers a known difference and pairing narrows
its interval on outcomes that go together, the area under a curve is its mean success, the page pairs
runs by seed (and by task where evaluations kept per-task outcomes), and a page written twice from the
same records is the same bytes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.results_page import Run, differences_table, efficiency_table
from bench.results_stats import curve_auc, paired_bootstrap

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "results" / "data" / "results"


def _correlated(seeds: int = 3, tasks: int = 400, lift: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Success 0/1 of B and of A = B's policy with ``lift`` more success, on tasks whose difficulty both
    share (a hard task fails for both): the outcomes go together task by task."""
    rng = np.random.RandomState(0)
    difficulty = rng.rand(seeds, tasks)
    noise = rng.rand(seeds, tasks)
    b = (difficulty + 0.2 * noise < 0.5).astype(float)
    a = (difficulty + 0.2 * noise < 0.5 + lift).astype(float)
    return a, b


def test_the_paired_bootstrap_recovers_a_known_difference_inside_its_interval() -> None:
    a, b = _correlated()
    d = paired_bootstrap(a, b)
    true = float((a - b).mean())
    assert d.mean == pytest.approx(true) and abs(d.mean - 0.1) < 0.02
    assert d.low < true < d.high and d.tasks == 400 and len(d.per_seed) == 3
    # a difference far from zero: the interval excludes zero
    assert d.low > 0.05


def test_pairing_narrows_the_interval_on_outcomes_that_go_together() -> None:
    a, b = _correlated()
    paired = paired_bootstrap(a, b)
    unpaired = paired_bootstrap(a, b, paired=False)
    assert paired.mean == unpaired.mean
    assert (paired.high - paired.low) < 0.7 * (unpaired.high - unpaired.low)
    assert unpaired.low < paired.mean < unpaired.high


def test_the_bootstrap_is_fixed_by_its_seed() -> None:
    a, b = _correlated(tasks=50)
    assert paired_bootstrap(a, b) == paired_bootstrap(a, b)
    assert paired_bootstrap(a, b, seed=1) != paired_bootstrap(a, b)


def test_one_number_per_seed_is_a_seeds_only_bootstrap() -> None:
    """Three seeds' aggregates: each resample is a mean of three drawn seeds, so the 95 % interval is the
    range of the per-seed differences (all three drawn at the minimum has probability 1/27 > 2.5 %)."""
    d = paired_bootstrap([[0.46], [0.321], [0.392]], [[0.421], [0.373], [0.392]])
    assert d.tasks == 1 and d.per_seed == pytest.approx((0.039, -0.052, 0.0))
    assert (d.low, d.high) == pytest.approx((-0.052, 0.039)) and d.mean == pytest.approx(-0.013 / 3)
    with pytest.raises(ValueError, match="equal seeds x tasks"):
        paired_bootstrap([[0.1], [0.2]], [[0.1]])


def test_the_area_under_a_curve_is_its_mean_success_over_the_steps_it_spans() -> None:
    assert curve_auc([(0, 0.3), (5, 0.3), (20, 0.3)]) == pytest.approx(0.3)
    assert curve_auc([(0, 0.0), (10, 0.5), (20, 1.0)]) == pytest.approx(0.5)
    # trapezoids weighted by their width, whatever the order given: (5·(0+1)/2 + 15·1) / 20
    assert curve_auc([(20, 1.0), (0, 0.0), (5, 1.0)]) == pytest.approx(0.875)
    assert curve_auc([(0, 0.4)]) == 0.4 and curve_auc([]) != curve_auc([])


def _run(est: str, seed: int, curve: list[float], per_task: list[int] | None = None) -> Run:
    records: list[dict[str, Any]] = [
        {"step": 5 * i, "heldout": {"success": v, "episodes": 4}} for i, v in enumerate(curve)
    ]
    if per_task is not None:
        records[-1]["heldout"]["per_task"] = {f"t{i}": o for i, o in enumerate(per_task)}
    rl = {"env_kwargs": {}, "eval": {"env_kwargs": {"split": "eval_in_distribution"}}}
    return Run("alfworld", est, seed, Path("."), "cmd", 60.0, records, None, rl)


def test_the_page_pairs_runs_by_seed_and_by_task_where_outcomes_were_kept() -> None:
    runs = [
        _run("grpo", 0, [0.25, 0.25, 0.5], [1, 0, 1, 0]),
        _run("grpo", 1, [0.25, 0.5, 0.5], [1, 1, 0, 0]),
        _run("graphgpo", 0, [0.25, 0.75, 0.75], [1, 1, 1, 0]),
        _run("graphgpo", 1, [0.25, 0.5, 0.75], [1, 1, 1, 0]),
        _run("graphgpo", 2, [0.25, 0.5, 1.0], [1, 1, 1, 1]),  # no GRPO seed 2: left out of the pairs
    ]
    text = differences_table(runs)
    after = next(line for line in text.splitlines() if "after RL" in line)
    assert after.startswith("| GraphGPO − GRPO | after RL (4 tasks, step 10) | `eval_in_distribution` | 2 |")
    assert "**+25.0** | +25.0 / +25.0 |" in after and after.endswith("| seeds × 4 tasks |")
    step5 = next(line for line in text.splitlines() if "step 5" in line)
    assert "**+25.0** | +50.0 / +0.0 | [+0.0, +50.0] | seeds |" in step5  # aggregates only: seeds only
    assert "area under the in-run curve (steps 0–10, 4 tasks)" in text
    curves = efficiency_table(runs)
    assert "| GraphGPO | 3 | 4 | `eval_in_distribution` | 25.0 ± 0.0 | 58.3 ± 14.4 |" in curves
    assert differences_table([r for r in runs if r.estimator == "grpo"]) == ""
    # one seed and aggregates only: nothing to resample, so no interval rather than a zero-width one
    one = differences_table([_run("grpo", 0, [0.25, 0.5]), _run("gigpo", 0, [0.25, 0.75])])
    assert (
        "| GiGPO − GRPO | step 5 (4 tasks) | `eval_in_distribution` | 1 | **+25.0** | +25.0 | – | seeds |"
        in one
    )


def test_a_final_evaluation_difference_names_the_final_evaluations_split() -> None:
    """In-run evaluations read ``validation``; the final evaluation reads ``test``: the after-RL
    difference comes from the final evaluation, so its row names ``test``, the curve's rows
    ``validation``."""
    runs = []
    for est, lift in (("grpo", 0.0), ("arpo", 0.25)):
        for seed in (0, 1):
            run = _run(est, seed, [0.5, 0.5 + lift])
            run.rl["eval"]["env_kwargs"]["split"] = "validation"
            record = {"success": 0.5 + lift, "episodes": 4}
            run.final = {"split": "test", "tasks": 4, "step": 5, "before": {"success": 0.5}, "after": record}
            runs.append(run)
    rows = differences_table(runs).splitlines()
    after = next(line for line in rows if "after RL" in line)
    assert after.startswith("| ARPO − GRPO | after RL (4 tasks, final evaluation) | `test` | 2 |")
    assert next(line for line in rows if "step 5" in line).split(" | ")[2] == "`validation`"


def _report(out: Path, records: Path, docs: Path) -> str:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning_table.py"),
            "--report-only",
            "--out",
            str(out),
            "--records",
            str(records),
            "--envs",
            "alfworld",
            "webshop",
            "math_python",
            "--seeds",
            "0",
            "1",
            "2",
            "--estimators",
            "alfworld=grpo,gigpo,graphgpo",
            "--docs",
            str(docs),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return docs.read_text()


@pytest.mark.skipif(not RECORDS.is_dir(), reason="the results page's records are not in this checkout")
def test_the_results_page_rewrites_from_its_records_byte_for_byte(tmp_path: Path) -> None:
    """The page written twice from (a copy of) docs/results/data/results is the same bytes, comparisons
    included: the bootstrap's seed is fixed and nothing reads the clock or the machine."""
    out = tmp_path / "records"
    shutil.copytree(RECORDS, out)
    first = _report(out, out, tmp_path / "one" / "results.md")
    second = _report(out, out, tmp_path / "two" / "results.md")
    assert first == second
    assert (tmp_path / "one" / "results_learning_curves.png").read_bytes() == (
        tmp_path / "two" / "results_learning_curves.png"
    ).read_bytes()
    assert "## Differences between estimators (paired, 95 % interval)" in first
    assert "| GraphGPO − GRPO | step 5 (96 tasks) | `eval_in_distribution` | 3 |" in first
    assert "## Sample efficiency: the in-run held-out curves" in first and "Splits (from each run's" in first
