"""bench/warmstart_repro.py's baseline: the page's warm start and its held-out figure, from the records."""

from __future__ import annotations

from bench.warmstart_repro import first_difference, record


def test_the_baseline_is_the_pages_warm_start_and_its_heldout_figure() -> None:
    math = record("math_python", 64)
    assert math is not None and math["sft_steps"] == 400
    # the page's 60.9 %: step 0 of its runs, on the 64 validation tasks the config evaluates in-run
    assert math["heldout"] == 0.609375 and math["heldout_tasks"] == 64
    alfworld = record("alfworld", 480)
    assert alfworld is not None and alfworld["heldout_from"].startswith("final-eval-alfworld-alfworld-")
    assert "heldout" not in (record("math_python", 7) or {})  # no record on 7 tasks: no figure to compare


def test_first_difference_names_the_first_step_whose_loss_differs() -> None:
    assert first_difference([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) is None
    assert first_difference([1.0, 2.0, 3.0], [1.0, 2.0000001, 3.0]) == 2
    assert first_difference([1.0, 2.0], [1.0, 2.0, 3.0]) == 3
