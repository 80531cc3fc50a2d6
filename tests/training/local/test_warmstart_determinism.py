"""Warm starts that do not hinge on float noise: a build runs its recipe's fixed SFT budget
(validation is a report; the early stop is opt-in), and two builds on one machine give bit-identical
weights. ``bench/warmstart_repro.py`` measures the same at full size, with held-out success."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolgym.training.warmstart import build as warmstart
from toolgym.training.warmstart.floats import weights_digest

ROOT = Path(__file__).resolve().parents[3]
RECORDS = ROOT / "docs" / "results" / "data" / "results"

SMOKE = [
    "--set",
    "episodes=6",
    "--set",
    "sft_max_steps=4",
    "--set",
    "sft_check_every=2",
    "--set",
    "sft_val_tasks=1",
    "--set",
    "max_turns=20",
    "--set",
    "env_kwargs={history_length: 2, max_steps: 20, split: train}",
    "--threads",
    "1",
]


def _two_builds(tmp_path: Path, env_name: str, args: list[str]) -> tuple[list[Path], list[dict[str, Any]]]:
    """Two builds of ``env_name``'s recipe at once, each in its own process, cache (its own tokenizer or
    tiny model too) and hash seed: their output folders and ``warmstart.json``."""
    procs = []
    for k in (1, 2):
        env = {
            **os.environ,
            "TOOLGYM_CACHE": str(tmp_path / f"cache{k}"),
            "PYTHONHASHSEED": str(k),  # set and dict order must not matter
            "OMP_WAIT_POLICY": "PASSIVE",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        cmd = [sys.executable, "-m", "toolgym", "warmstart", "--env", env_name, *args]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-2000:]
        outs.append(Path(stdout.strip().splitlines()[-1]))
    return outs, [json.loads((out / "warmstart.json").read_text()) for out in outs]


def test_two_builds_in_two_processes_give_bit_identical_weights(tmp_path: Path) -> None:
    """The same state dict bit for bit, the same losses, and all 4 budgeted steps (validation at 2 and 4)."""
    outs, infos = _two_builds(tmp_path, "alfworld", SMOKE)
    assert [info["sft_steps"] for info in infos] == [4, 4]  # the budget, whatever validation said
    assert [step for step, _ in infos[0]["validation"]] == [2, 4]
    assert infos[0]["sft_losses"] == infos[1]["sft_losses"]
    assert infos[0]["floats"]["threads"] == 1 and infos[0]["floats"]["deterministic_algorithms"]
    assert (outs[0] / "tokenizer.json").read_bytes() == (outs[1] / "tokenizer.json").read_bytes()
    assert weights_digest(outs[0]) == weights_digest(outs[1])


def test_two_vision_builds_give_bit_identical_weights(tmp_path: Path) -> None:
    """The vision recipe's data are real browser episodes, served by a host server whose port differs in
    every process: the pages' text must not carry it (nor a clock) into the SFT rows. Both builds saw the
    same scripted screenshots and tokens: equal losses from the first step, equal weights (Docker: the
    browser needs its image)."""
    args = ["--set", "episodes=8", "--set", "sft_max_steps=3", "--set", "sft_val_tasks=0", "--threads", "1"]
    outs, infos = _two_builds(tmp_path, "miniwob_screenshot", args)
    assert [info["rows"] for info in infos] == [8, 8] and infos[0]["scripted_success"] == 1.0
    assert infos[0]["sft_losses"] == infos[1]["sft_losses"] and len(infos[0]["sft_losses"]) == 3
    assert weights_digest(outs[0]) == weights_digest(outs[1])


@pytest.mark.parametrize("name", sorted(n for n, r in warmstart.RECIPES.items() if r.model is None))
def test_a_default_build_is_the_pages_build_with_a_fixed_budget(name: str) -> None:
    """The shipped recipe is the recipe of the warm start docs/results.md used, with its early stop
    replaced by the steps that build ran (alfworld 3,500, math_python 400, webshop 1,250). The
    vision recipe's page (docs/results/miniwob_pixels.md) states its own recipe."""
    record = json.loads((RECORDS / f"warmstart-{name}.json").read_text())
    page = warmstart.WarmStartRecipe(**record["recipe"])
    shipped = warmstart.recipe(name)
    assert shipped.sft_target is None and shipped.sft_max_steps == record["sft_steps"]
    assert dataclasses.replace(page, sft_target=None, sft_max_steps=record["sft_steps"]) == shipped


def _fake_build(cache: Path, r: warmstart.WarmStartRecipe, steps: int) -> Path:
    out = cache / "warmstart" / f"{r.name}-{r.key()}"
    out.mkdir(parents=True)
    (out / "warmstart.json").write_text(json.dumps({"recipe": dataclasses.asdict(r), "sft_steps": steps}))
    (out / "READY").write_text("ok\n")
    return out


def test_an_early_stop_build_that_ran_the_budget_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build made with an early stop is the fixed-budget build when it ran exactly that budget (same
    batches, same rates; validation never touches the weights), so caches made before stay in use; one
    that stopped elsewhere, or whose decay ramp ended at another budget, is another model."""
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    shipped = warmstart.recipe("math_python")
    assert warmstart.find_built(shipped) is None
    _fake_build(tmp_path, warmstart.recipe("math_python", sft_max_steps=1200, sft_target=0.3), 350)
    assert warmstart.find_built(shipped) is None  # stopped at 350 of a 400-step budget
    old = _fake_build(tmp_path, warmstart.recipe("math_python", sft_max_steps=1200, sft_target=0.25), 400)
    assert warmstart.find_built(shipped) == old == warmstart.cached("math_python")
    assert (
        warmstart.find_built(warmstart.recipe("math_python", sft_target=0.3)) is None
    )  # an early stop: its own
    alfworld = warmstart.recipe("alfworld")  # decays over its last 700 steps: only the same budget matches
    _fake_build(tmp_path, warmstart.recipe("alfworld", sft_max_steps=4200, sft_target=0.9), 3500)
    assert warmstart.find_built(alfworld) is None
    kept = _fake_build(tmp_path, warmstart.recipe("alfworld", sft_target=0.9), 3500)
    assert warmstart.find_built(alfworld) == kept
    new = _fake_build(tmp_path, shipped, 400)
    assert warmstart.find_built(shipped) == new  # its own entry first


def test_an_early_stop_needs_validation_tasks() -> None:
    from toolgym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="sft_val_tasks"):
        warmstart.build(warmstart.recipe("alfworld", sft_target=0.5, sft_val_tasks=0), threads=1, force=True)
