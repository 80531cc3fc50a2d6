"""``bench/learning_table.py --smoke``: speed figures beside their baseline, both estimators' runs, the
results page and the PNG, all produced by the benchmark itself (toy sizes, about a minute)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_learning_table_smoke_writes_results_and_curves(tmp_path: Path) -> None:
    out = tmp_path / "table"
    # --jobs 2: the two estimators' runs side by side (separate processes, separate outputs; half the wait)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning_table.py"),
            "--smoke",
            "--jobs",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "plain HF generate (baseline)" in proc.stdout and "step groups repeat_rate" in proc.stdout

    speed = json.loads((out / "speed.json").read_text())
    assert speed["episodes"] == 4 and speed["step_s"] > 0 and speed["tokens"] > 0
    assert speed["sampler_tokens_per_s"] > 0 and speed["hf_tokens_per_s"] > 0

    page = (out / "results.md").read_text()
    assert "| GRPO | 1 | 2 |" in page and "| GiGPO | 1 | 2 |" in page
    assert (
        "Pick" in page
        and "Pick2" in page
        and "anchor repeat rate" in page
        and "toolgym train --trainer local" in page
    )
    for estimator in ("grpo", "gigpo"):
        records = [
            json.loads(ln)
            for ln in (out / f"alfworld-{estimator}-seed0" / "metrics.jsonl").read_text().splitlines()
        ]
        assert [r["step"] for r in records] == [0, 1, 2]

    import matplotlib.image

    image = matplotlib.image.imread(out / "results_learning_curves.png")
    assert image.ndim == 3 and image.shape[0] > 100

    # --report-only rewrites the page from the runs, with the commands that started them even when its
    # own arguments differ (runs of several budgets on one page)
    command = (out / "alfworld-grpo-seed0" / "command.txt").read_text().strip()
    assert command in page
    (out / "results.md").unlink()
    # ... and with --final-eval-tasks it first evaluates the warm start and each run's last checkpoint on more tasks
    again = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning_table.py"),
            "--smoke",
            "--report-only",
            "--steps",
            "7",
            "--final-eval-tasks",
            "3",
            "--out",
            str(out),
            "--note",
            "ran alone",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rewritten = (out / "results.md").read_text()
    assert command in rewritten and "--steps 7" not in rewritten and "| GRPO | 1 | 2 | 3 |" in rewritten
    assert "> **Note.** ran alone" in rewritten and "ran alone" not in page
    final = json.loads((out / "alfworld-grpo-seed0" / "final_eval.json").read_text())
    assert (
        final["tasks"] == 3
        and final["step"] == 2
        and final["before"]["episodes"] == final["after"]["episodes"] == 3
    )
    assert (
        final["warm_start"]
        == json.loads((out / "alfworld-grpo-seed0" / "run.json").read_text())["run"]["model_dir"]
    )
    assert sorted(p.name.rsplit("-", 1)[1] for p in out.glob("final-eval-alfworld-*-3-*.json")) == [
        "in_distribution.json",
        "out_of_distribution.json",
    ]  # one warm-start evaluation per test split for both estimators
    # the final evaluation reads the config's test splits (the in-run evaluations its validation split)
    assert final["split"] == "eval_in_distribution" and final["test"] == "in_distribution"
    assert {k: v["split"] for k, v in final["splits"].items()} == {
        "in_distribution": "eval_in_distribution",
        "out_of_distribution": "eval_out_of_distribution",
    }
    assert final["before"] == final["splits"]["in_distribution"]["before"]
    assert all(len(v["after"]["per_task"]) == 3 for v in final["splits"].values())
    assert (
        "## Test splits" in rewritten
        and "| out_of_distribution | `eval_out_of_distribution` | 3 |" in rewritten
    )
    assert "`validation` (validation)" in rewritten and "`eval_in_distribution` (test)" in rewritten
    assert "--final-eval-tasks 3" in rewritten  # the reproduce line names the final evaluation

    # the page's records (default: data/NAME/ beside the page): kilobytes, no checkpoints or trajectories,
    # and enough to write the same page again on a machine that has none of the runs
    records = out / "data" / "results"
    kept = sorted(p.relative_to(records).as_posix() for p in records.rglob("*") if p.is_file())
    assert (
        "alfworld-grpo-seed0/metrics.jsonl" in kept
        and "alfworld-gigpo-seed0/final_eval.json" in kept
        and "speed.json" in kept
    )
    assert (
        not [p for p in kept if "step-" in p or "trajector" in p]
        and sum((records / p).stat().st_size for p in kept) < 200_000
    )
    for run in out.glob("alfworld-*"):
        shutil.rmtree(run)
    moved = tmp_path / "elsewhere"
    shutil.copytree(records, moved)
    from_records = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning_table.py"),
            "--smoke",
            "--report-only",
            "--final-eval-tasks",
            "3",
            "--out",
            str(moved),
            "--records",
            str(moved),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert from_records.returncode == 0, from_records.stdout[-3000:] + from_records.stderr[-3000:]
    assert (moved / "results.md").read_text() == rewritten  # the note too: the records keep it


def test_a_finished_run_extended_to_more_steps_adds_its_wall_time(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Asking for more RL steps than a finished run has resumes it (the trainer continues from its last
    checkpoint); the run's wall time is then the earlier one plus the extension's, not the extension's alone."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("learning_table", ROOT / "bench" / "learning_table.py")
    table = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(table)  # type: ignore[union-attr]
    out = tmp_path / "webshop-grpo-seed0"
    out.mkdir()
    (out / "wall_s.txt").write_text("100.0")
    records = [
        {"step": 0, "heldout": {"success": 0.2, "episodes": 2}},
        {"step": 2, "heldout": {"success": 0.3, "episodes": 2}},
    ]
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    calls: list[list[str]] = []
    monkeypatch.setattr(
        table.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0)
    )
    args = argparse.Namespace(
        out=tmp_path,
        steps=4,
        tasks=2,
        group=2,
        eval_tasks=2,
        test_freq=2,
        device="cpu",
        smoke=False,
        jobs=1,
        model={},
        estimators={},
        envs=["webshop"],
        seeds=[0],
        final_eval_tasks=0,
        final_eval_envs=["alfworld", "webshop"],
        set=[],
    )
    _, shown, wall = table.train(args, "webshop", "grpo", 0)
    assert calls and "verl.trainer.total_training_steps=4" in shown
    assert 100.0 <= wall < 110.0 and float((out / "wall_s.txt").read_text()) == round(wall, 1)
    args.steps = 2  # a run that already has the steps asked for is reused, not run again
    assert (
        table.train(args, "webshop", "grpo", 0)[2] == float((out / "wall_s.txt").read_text())
        and len(calls) == 1
    )


def test_a_final_evaluation_with_errored_episodes_is_refused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An errored episode scores 0: a held-out figure with more than 1 % of them measures the errors
    (a sandbox that was not there), so the benchmark stops instead of writing it."""
    import argparse
    import importlib.util

    import pytest

    spec = importlib.util.spec_from_file_location("learning_table", ROOT / "bench" / "learning_table.py")
    table = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(table)  # type: ignore[union-attr]
    args = argparse.Namespace(final_eval_tasks=100, device="cpu", jobs=1)

    def answer(failed: int) -> None:
        line = json.dumps(
            {"tasks": 100, "success": 0.3, "score": 0.3, "failed": failed, "seconds": 1.0, "by_type": {}}
        )
        monkeypatch.setattr(
            table.subprocess,
            "run",
            lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=line + "\n", stderr=""),
        )

    answer(1)
    assert table.evaluate_model(args, "math_python_grpo", Path("m"), ["test"])["test"]["failed"] == 1
    answer(2)
    with pytest.raises(SystemExit, match="2 of 100 episodes ended in an error"):
        table.evaluate_model(args, "math_python_grpo", Path("m"), ["test"])


def test_estimators_adds_graphgpo_rows_and_refuses_an_estimator_the_env_lacks(tmp_path: Path) -> None:
    """``--estimators alfworld=grpo,gigpo,graphgpo`` puts a GraphGPO row (and curve) beside the pair;
    an estimator the environment's configs do not have is one clear line, before anything runs."""
    for estimator, after in (("grpo", 0.2), ("gigpo", 0.25), ("graphgpo", 0.3)):
        out = tmp_path / f"alfworld-{estimator}-seed0"
        out.mkdir()
        records = [
            {"step": 0, "heldout": {"success": 0.1, "episodes": 8}},
            {"step": 5, "heldout": {"success": after, "episodes": 8}},
        ]
        (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
        (out / "wall_s.txt").write_text("60.0")
    base = [
        sys.executable,
        str(ROOT / "bench" / "learning_table.py"),
        "--report-only",
        "--no-speed",
        "--envs",
        "alfworld",
        "--seeds",
        "0",
        "--out",
        str(tmp_path),
        "--docs",
        str(tmp_path / "results.md"),
    ]
    proc = subprocess.run(
        [*base, "--estimators", "alfworld=grpo,gigpo,graphgpo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    page = (tmp_path / "results.md").read_text()
    assert "from 3 run(s)" in proc.stdout and "| GraphGPO | 1 | 5 |" in page
    assert "GraphGPO 30.0% vs GRPO 20.0% after RL" in page
    default = subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=ROOT)  # the pair alone
    assert (
        default.returncode == 0
        and "from 2 run(s)" in default.stdout
        and "GraphGPO" not in (tmp_path / "results.md").read_text()
    )
    bad = subprocess.run(
        [*base, "--estimators", "alfworld=arpo"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert (
        bad.returncode != 0
        and "--estimators alfworld=arpo" in bad.stderr
        and "alfworld=grpo,gigpo,graphgpo" in bad.stderr
    )


def test_set_gives_every_run_the_same_override_and_refuses_other_keys(tmp_path: Path) -> None:
    """``--set`` (an ablation: one change to every run) reaches each run's command and the page's
    reproduce line; a key outside toolgym.* / verl.* is one clear line before anything runs."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("learning_table", ROOT / "bench" / "learning_table.py")
    table = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(table)  # type: ignore[union-attr]
    change = "verl.actor_rollout_ref.actor.loss_agg_mode=episode-mean-token-mean"
    args = argparse.Namespace(
        out=tmp_path,
        steps=4,
        tasks=2,
        group=2,
        eval_tasks=2,
        test_freq=2,
        device="cpu",
        smoke=False,
        jobs=1,
        model={},
        estimators={},
        envs=["webshop"],
        seeds=[0],
        final_eval_tasks=0,
        final_eval_envs=["alfworld", "webshop"],
        set=[change],
    )
    assert table.train_command(args, "webshop", "grpo", 0, tmp_path)[0][-1] == change
    assert table.reproduce_command(args).endswith(f"--set {change}")
    bad = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning_table.py"),
            "--report-only",
            "--out",
            str(tmp_path),
            "--set",
            "loss_agg_mode=episode-mean-token-mean",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert bad.returncode != 0 and "--set takes toolgym.KEY=VALUE or verl.KEY=VALUE" in bad.stderr


def test_the_warm_start_line_is_the_runs_own_warm_start_not_the_cached_one(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A page rewritten from its records after the shipped recipe changed describes the warm start its
    runs started from: that model's ``warmstart.json``, else the records' copy if it names that model,
    else no line. Never the newer one the cache holds now."""
    import argparse
    import dataclasses
    import importlib.util
    from types import SimpleNamespace

    from toolgym.training.warmstart import build as warmstart

    spec = importlib.util.spec_from_file_location("learning_table", ROOT / "bench" / "learning_table.py")
    table = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(table)  # type: ignore[union-attr]
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path / "cache"))
    shipped = warmstart.recipe("alfworld")
    cached = warmstart.cache_dir(shipped)  # the shipped recipe's build, in the cache now
    cached.mkdir(parents=True)
    (cached / "READY").write_text("ok\n")
    (cached / "warmstart.json").write_text(
        json.dumps({"recipe": dataclasses.asdict(shipped), "sft_steps": 3500})
    )
    older = warmstart.recipe("alfworld", sft_max_steps=2800, sft_decay_steps=0)
    records = tmp_path / "records"
    run_dir = records / "alfworld-grpo-seed0"
    run_dir.mkdir(parents=True)
    gone = (
        tmp_path / "elsewhere" / f"alfworld-{older.key()}"
    )  # the model the run started from, not on this machine
    (run_dir / "run.json").write_text(json.dumps({"run": {"model_dir": str(gone)}}))
    (records / "warmstart-alfworld.json").write_text(
        json.dumps({"recipe": dataclasses.asdict(older), "sft_steps": 2800})
    )
    args = argparse.Namespace(out=records, smoke=False, envs=["alfworld"], model={})
    run = SimpleNamespace(env="alfworld", out=run_dir)
    assert table.warm_start_infos(args)["alfworld"]["sft_steps"] == 3500  # no runs: the cached one
    assert (
        table.warm_start_infos(args, [run])["alfworld"]["sft_steps"] == 2800
    )  # the records' copy names the run's model
    gone.mkdir(parents=True)
    (gone / "warmstart.json").write_text(json.dumps({"recipe": dataclasses.asdict(older), "sft_steps": 2801}))
    assert (
        table.warm_start_infos(args, [run])["alfworld"]["sft_steps"] == 2801
    )  # the model's own, where it is here
    (gone / "warmstart.json").unlink()
    (records / "warmstart-alfworld.json").write_text(
        json.dumps({"recipe": dataclasses.asdict(shipped), "sft_steps": 3500})
    )
    assert "alfworld" not in table.warm_start_infos(args, [run])  # a record of another model: no line at all


def test_a_record_without_its_checkpoint_gets_the_warm_starts_figures_on_the_test_splits_it_lacks(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Records keep no checkpoints: a run recorded before ALFWorld's out-of-distribution split was
    evaluated gets the warm start's figures there (a named rebuild of it when the original is not on
    this machine, which each figure's file names), its own after-RL side is left unmeasured, and the
    page shows both."""
    import argparse
    import importlib.util

    import pytest

    spec = importlib.util.spec_from_file_location("learning_table", ROOT / "bench" / "learning_table.py")
    table = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(table)  # type: ignore[union-attr]
    out = tmp_path / "alfworld-grpo-seed0"
    out.mkdir()
    records = [
        {"step": 0, "heldout": {"success": 0.2, "episodes": 96}},
        {"step": 20, "heldout": {"success": 0.3, "episodes": 96}},
    ]
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    gone = tmp_path / "cache" / "alfworld-old"  # the warm start the run started from, not on this machine
    rl = {"env_kwargs": {}, "eval": {"env_kwargs": {"split": "eval_in_distribution"}}}
    (out / "run.json").write_text(json.dumps({"rl": rl, "run": {"model_dir": str(gone)}}))
    old = {"tasks": 4, "step": 20, "warm_start": str(gone), "before": {"success": 0.25, "episodes": 4}}
    (out / "final_eval.json").write_text(json.dumps({**old, "after": {"success": 0.5, "episodes": 4}}))
    calls: list[tuple[str, list[str]]] = []

    def fake(args, config, model, tests):  # type: ignore[no-untyped-def]
        calls.append((str(model), list(tests)))
        return {t: {"test": t, "split": f"split-of-{t}", "success": 0.25, "episodes": 4} for t in tests}

    monkeypatch.setattr(table, "evaluate_model", fake)
    args = argparse.Namespace(out=tmp_path, final_eval_tasks=4, model={}, jobs=1, device="cpu")
    with pytest.raises(SystemExit, match="not on this machine"):
        table.final_eval(args, "alfworld", "grpo", out, 20)
    rebuild = tmp_path / "alfworld-new"
    args.model = {"alfworld": str(rebuild)}
    table.final_eval(args, "alfworld", "grpo", out, 20)
    assert calls == [(str(rebuild), ["in_distribution", "out_of_distribution"])]
    kept = json.loads((tmp_path / "final-eval-alfworld-alfworld-old-4-out_of_distribution.json").read_text())
    assert kept["model"] == str(rebuild) and kept["split"] == "split-of-out_of_distribution"
    assert json.loads((out / "final_eval.json").read_text())["after"]["success"] == 0.5  # the record stays
    table.final_eval(args, "alfworld", "grpo", out, 20)
    assert len(calls) == 1  # kept, not measured again

    from bench.results_page import read_run, test_table

    run = read_run("alfworld", "grpo", 0, out, "cmd", 60.0)
    page = test_table([run], table.warm_start_test_figures(args, [run]))
    assert (
        "| out_of_distribution | `split-of-out_of_distribution` | 4 | 25.0 | not measured (no checkpoint kept) |"
        in page
    )
    assert "measured on a rebuild of the runs' warm start" in page and "alfworld-new" in page
