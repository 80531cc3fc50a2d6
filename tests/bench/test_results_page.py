"""The results page's sentences are computed from the runs: verdicts, spread, and how many points
one held-out episode is worth."""

from __future__ import annotations

from pathlib import Path

from bench.results_page import Run, findings, read_run, table, warm_start_lines


def _run(est: str, seed: int, before: float, after: float, episodes: int = 96) -> Run:
    records = [
        {"step": 0, "heldout": {"success": before, "episodes": episodes}},
        {"step": 8, "heldout": {"success": after, "episodes": episodes}},
    ]
    return Run("alfworld", est, seed, Path("."), "cmd", 60.0, records)


def test_findings_state_the_means_the_verdict_and_the_resolution() -> None:
    runs = [_run("grpo", s, 0.01, a) for s, a in enumerate((0.03, 0.02, 0.03))]
    runs += [_run("gigpo", s, 0.01, a) for s, a in enumerate((0.01, 0.01, 0.05))]
    text = findings(runs)
    assert "GRPO: held-out success rose above the warm start in 3 of 3 seed(s)" in text
    assert "GiGPO: held-out success rose above the warm start in 1 of 3 seed(s)" in text
    assert (
        "GiGPO 2.3% vs GRPO 2.7% after RL (-0.3 points; std over seeds 2.3% vs 0.6%): GiGPO does not beat GRPO here."
        in text
    )
    assert "one held-out episode is 1.0 points (96 tasks)" in text
    one_seed = findings([_run("grpo", 0, 0.0, 0.1, 20), _run("gigpo", 0, 0.0, 0.2, 20)])
    assert (
        "GiGPO is ahead, but with one seed on a side: no claim either way" in one_seed
        and "is 5.0 points" in one_seed
    )
    assert "one seed each: no spread" in one_seed
    # two GRPO seeds against one GiGPO seed: no spread for the difference, and the text says why
    uneven = findings(
        [_run("grpo", 0, 0.0, 0.1, 20), _run("grpo", 1, 0.0, 0.1, 20), _run("gigpo", 0, 0.0, 0.2, 20)]
    )
    assert (
        "1 seed(s) of GiGPO, 2 of GRPO: no spread for the difference" in uneven
        and "one seed each" not in uneven
    )
    # a lead inside two standard errors of the difference is no win; a lead well outside is
    close = [_run("grpo", s, 0.27, a) for s, a in enumerate((0.229, 0.260, 0.312))]
    close += [_run("gigpo", s, 0.27, a) for s, a in enumerate((0.302, 0.292, 0.271))]
    assert "no claim that it beats GRPO" in findings(close) and "GiGPO beats GRPO here" not in findings(close)
    clear = [_run("grpo", s, 0.1, a) for s, a in enumerate((0.10, 0.11, 0.12))]
    clear += [_run("gigpo", s, 0.1, a) for s, a in enumerate((0.30, 0.31, 0.32))]
    assert "GiGPO beats GRPO here" in findings(clear)


def test_arpo_findings_compare_tool_calls_with_grpo() -> None:
    def run(est: str, seed: int, calls: float) -> Run:
        records = [
            {"step": 0, "heldout": {"success": 0.5, "episodes": 64}},
            {"step": 1, "step_groups": {"tool_calls_per_trajectory": calls}},
            {
                "step": 2,
                "step_groups": {"tool_calls_per_trajectory": calls},
                "heldout": {"success": 0.6, "episodes": 64},
            },
        ]
        return Run("math_python", est, seed, Path("."), "cmd", 60.0, records)

    text = findings([run("grpo", 0, 1.0), run("grpo", 1, 1.2), run("arpo", 0, 0.5), run("arpo", 1, 0.6)])
    assert "tool calls per training trajectory, ARPO 0.55 vs GRPO 1.10 (50% of GRPO's" in text
    assert "tool calls" not in findings([run("grpo", 0, 1.0), run("gigpo", 0, 1.0)])


def test_the_warm_start_line_names_its_decoding_and_recipe_options() -> None:
    recipe = {
        "episodes": 12,
        "env": "alfworld-verl",
        "mistake_rate": 0.1,
        "hidden_size": 64,
        "num_layers": 2,
        "sft_val_tasks": 24,
        "sft_target": 0.3,
    }
    info = {
        "recipe": recipe,
        "scripted_success": 0.8,
        "rows": 100,
        "sft_steps": 50,
        "validation": [[50, 0.25]],
    }
    assert "greedy success on 24" in warm_start_lines({"a": info})[0]
    recipe.update(sft_val_temperature=0.4, think_hint=True, expert_only=True, invalid_rate=0.3)
    line = warm_start_lines({"a": info})[0]
    assert "sampled (T = 0.4) success on 24" in line and "(think_hint, expert_only, invalid_rate 0.3)" in line


def test_warm_start_line_names_the_validation_split_vocabulary_and_device() -> None:
    """A warm start validated on goals its data never saw says so, with its vocabulary and where it was
    built; one validated on its own data's split says that instead."""
    recipe = {
        "episodes": 800,
        "env": "webshop-verl",
        "mistake_rate": 0.1,
        "hidden_size": 64,
        "num_layers": 2,
        "sft_val_tasks": 32,
        "sft_target": 0.35,
        "sft_val_temperature": 0.4,
        "vocab_size": 4096,
        "env_kwargs": {"split": "eval"},
        "val_env_kwargs": {"split": "train"},
    }
    info = {
        "recipe": recipe,
        "scripted_success": 0.7,
        "rows": 2430,
        "sft_steps": 3000,
        "validation": [[3000, 0.1875]],
        "seconds": 220.0,
        "device": "cuda",
    }
    (line,) = warm_start_lines({"webshop": info})
    assert "`train`-split (unseen by the `eval`-split data)" in line and "4096-word vocabulary" in line
    assert "Built on cuda in 4 min" in line and "19%" in line
    same = {**info, "recipe": {**recipe, "val_env_kwargs": {}, "vocab_size": 1024}, "device": "cpu"}
    (line,) = warm_start_lines({"webshop": same})
    assert (
        "32 eval-split validation tasks" in line and "1024-word vocabulary" in line and "Built on cpu" in line
    )


def test_tool_calls_column_is_a_dash_where_the_environment_has_no_tools() -> None:
    from bench.results_page import _tool_calls

    def run(calls: float | None) -> Run:
        groups = {} if calls is None else {"tool_calls_per_trajectory": calls}
        return Run("webshop", "grpo", 0, Path("."), "cmd", 60.0, [{"step": 1, "step_groups": groups}])

    assert _tool_calls([run(0.0), run(0.0)]) == "–" and _tool_calls([run(None)]) == "–"
    assert _tool_calls([run(0.8), run(0.9)]) != "–"


def test_a_final_evaluation_on_more_tasks_fills_the_table_and_a_stale_one_is_ignored(tmp_path: Path) -> None:
    """``final_eval.json`` (the warm start and the last checkpoint on more held-out tasks) replaces the
    in-run figures in the table and the verdicts, which still name the in-run count; one written
    before the run was extended to more steps is not used."""
    import json

    out = tmp_path / "run"
    out.mkdir()
    records = [
        {"step": 0, "heldout": {"success": 0.10, "episodes": 96}},
        {"step": 10, "heldout": {"success": 0.08, "episodes": 96}},
    ]
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    final = {
        "tasks": 480,
        "step": 10,
        "before": {"success": 0.11, "episodes": 480, "by_type": {"pick_and_place_simple": 0.2}},
        "after": {"success": 0.15, "episodes": 480, "by_type": {"pick_and_place_simple": 0.3}},
    }
    (out / "final_eval.json").write_text(json.dumps(final))
    run = read_run("alfworld", "gigpo", 0, out, "cmd", 60.0)
    assert run.held_before["success"] == 0.11 and run.held_after["success"] == 0.15 and run.held_tasks == 480
    text = findings([run])
    assert (
        "rose above the warm start in 1 of 1 seed(s) on 480 held-out tasks (per seed 11.0% → 15.0%)" in text
    )
    assert (
        "at the last in-run evaluation on 96 tasks: 0 of 1" in text
        and "one held-out episode is 0.2 points (480 tasks)" in text
    )
    assert "| GiGPO | 1 | 10 | 480 | 30.0 |" in table([run]) and "**15.0**" in table([run])
    final["step"] = 5  # evaluated at step 5, then the run went on to step 10: stale
    (out / "final_eval.json").write_text(json.dumps(final))
    stale = read_run("alfworld", "gigpo", 0, out, "cmd", 60.0)
    assert (
        stale.final is None
        and stale.held_after["success"] == 0.08
        and "| GiGPO | 1 | 10 | 96 |" in table([stale])
    )


def _split_run(est: str, seed: int, eval_split: str, final: dict | None) -> Run:  # type: ignore[type-arg]
    records = [
        {"step": 0, "heldout": {"success": 0.2, "episodes": 96}},
        {"step": 20, "heldout": {"success": 0.3, "episodes": 96}},
    ]
    rl = {"env_kwargs": {}, "eval": {"env_kwargs": {"split": eval_split}}}
    return Run("alfworld", est, seed, Path("."), "cmd", 60.0, records, final, rl)


def _record(success: float, split: str) -> dict:  # type: ignore[type-arg]
    return {"success": success, "episodes": 480, "split": split}


def test_every_figure_names_its_split_and_role_and_old_records_say_they_predate_validation() -> None:
    from bench.results_page import split_lines, test_table

    splits = {
        "in_distribution": {
            "split": "eval_in_distribution",
            "before": _record(0.25, "eval_in_distribution"),
            "after": _record(0.40, "eval_in_distribution"),
        },
        "out_of_distribution": {
            "split": "eval_out_of_distribution",
            "before": _record(0.10, "eval_out_of_distribution"),
            "after": _record(0.20, "eval_out_of_distribution"),
        },
    }
    final = {
        "tasks": 480,
        "step": 20,
        "warm_start": "/w/alfworld-a",
        "split": "eval_in_distribution",
        "before": splits["in_distribution"]["before"],
        "after": splits["in_distribution"]["after"],
        "splits": splits,
    }
    new = [_split_run("grpo", s, "validation", final) for s in (0, 1)]
    lines = "\n".join(split_lines(new))
    assert "in-run evaluations (96 tasks: the curves, sample efficiency): `validation` (validation)" in lines
    assert "final evaluation (480 tasks: before/after): `eval_in_distribution` (test)" in lines
    assert "predate" not in lines and "before the environment had a validation split" not in lines
    assert "ALFWorld's out-of-distribution split (`eval_out_of_distribution`) steered nothing" in lines
    assert "Before/after on `eval_in_distribution` (test): the final evaluation." in table(new)
    tests = test_table(new)
    assert "| in_distribution | `eval_in_distribution` | 480 | 25.0 | 40.0 ± 0.0 |" in tests
    assert "| out_of_distribution | `eval_out_of_distribution` | 480 | 10.0 | 20.0 ± 0.0 |" in tests

    # a run recorded before validation splits: its in-run and final evaluations read the test split; its
    # checkpoint was not kept, so a split measured later has the warm start's figure only (a rebuild's)
    old_final = {
        "tasks": 480,
        "step": 20,
        "warm_start": "/w/alfworld-a",
        "before": _record(0.25, ""),
        "after": _record(0.4, ""),
    }
    old = [_split_run("grpo", 0, "eval_in_distribution", old_final)]
    lines = "\n".join(split_lines(old))
    assert "`eval_in_distribution` (test) — recorded before the environment had a validation split" in lines
    assert (
        "final evaluation (480 tasks: before/after): `eval_in_distribution` (test; the config's held-out tasks then"
        in lines
    )
    warm = {
        "alfworld": {
            "in_distribution": {**_record(0.25, "eval_in_distribution"), "model": "/c/alfworld-b"},
            "out_of_distribution": {**_record(0.12, "eval_out_of_distribution"), "model": "/c/alfworld-b"},
        }
    }
    tests = test_table(old, warm)
    assert (
        "| out_of_distribution | `eval_out_of_distribution` | 480 | 12.0 | not measured (no checkpoint kept) |"
        in tests
    )
    assert "measured on a rebuild of the runs' warm start" in tests and "alfworld-b" in tests
    # later seeds that kept their checkpoints beside the old ones: the figure names the seeds it is from
    later = [_split_run("grpo", s, "eval_in_distribution", final) for s in (3, 4)]
    assert (
        "| out_of_distribution | `eval_out_of_distribution` | 480 | 10.0 | 20.0 ± 0.0 (seeds 3, 4 of 3: the others "
        "kept no checkpoint) |" in test_table(old + later, warm)
    )
    assert "the rebuild scores 25.0% and the recorded warm start 25.0%" in tests
    assert test_table([_run("grpo", 0, 0.1, 0.2)]) == ""  # no final evaluation: no test-split section


def test_the_warm_start_line_names_the_validation_split_its_checks_ran_on() -> None:
    """ALFWorld's and math-python's warm-start checks run on train's tasks from seed 900,000: the
    environments' validation split, and the line says so."""
    from bench.results_page import VALIDATION_SEED
    from toolgym.plugins.alfworld.generator import VALIDATION_SEED as ALFWORLD
    from toolgym.plugins.qa.math.env import VALIDATION_SEED as MATH

    assert ALFWORLD == MATH == VALIDATION_SEED
    recipe = {
        "env": "alfworld-verl",
        "env_kwargs": {"split": "train"},
        "episodes": 1200,
        "mistake_rate": 0.1,
        "hidden_size": 64,
        "num_layers": 2,
        "sft_val_tasks": 24,
        "val_seed": 900_000,
    }
    info = {
        "recipe": recipe,
        "scripted_success": 0.8,
        "rows": 9411,
        "sft_steps": 3500,
        "validation": [[3500, 0.25]],
    }
    line = warm_start_lines({"alfworld": info})[0]
    assert "24 `validation`-split (train's tasks from seed 900,000) validation tasks at the end: 25%" in line
