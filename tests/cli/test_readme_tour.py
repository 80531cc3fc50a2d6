"""Every command of the README's quick tour runs, in the tour's order, from a fresh directory.

The commands are read from the README itself; :data:`TOUR` must list each of them (a command added
to the tour without an entry here fails the test, so none goes untested). Commands that run for
many minutes by design (a warm-start build, a learning run) run here with extra arguments that keep
their code path and cut their size; the entry says which and why. Everything else runs verbatim.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TOUR: dict[str, tuple[list[str], str]] = {
    "toolgym envs list": ([], "math-python"),
    "toolgym tools list": ([], "python"),
    'toolgym tools try python --args \'{"code": "print(2**64)"}\'': ([], "18446744073709551616"),
    "toolgym collect --task math-python --model scripted --episodes 8 --group-size 4 --out runs/math": (
        [],
        "",
    ),
    "toolgym collect --env miniwob --model scripted --env-arg observation=both --episodes 8 --out runs/miniwob-shots": (
        [],
        "",
    ),
    "toolgym verify runs/math": ([], ""),
    "toolgym show runs/math": ([], ""),
    "toolgym report runs/math": ([], ""),
    "toolgym export sft runs/math -o math-sft.jsonl": ([], ""),
    # 2 RL steps on 4 tasks instead of the config's 40 steps on 16 (the same trainer, warm start and task)
    "toolgym train --trainer local --config keychain_gigpo": (
        [
            "verl.trainer.total_training_steps=2",
            "verl.data.train_batch_size=4",
            "verl.actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "toolgym.val.num_tasks=8",
            "verl.trainer.test_freq=0",
            "verl.trainer.default_local_dir=runs/keychain",
        ],
        "",
    ),
    "toolgym train --config alfworld_gigpo --dry-run": ([], ""),
    # the recipe's code path on a few episodes and SFT steps (the shipped recipe takes about half an hour)
    "toolgym warmstart --env alfworld": (
        [
            "--set",
            "episodes=4",
            "--set",
            "sft_max_steps=2",
            "--set",
            "sft_check_every=2",
            "--set",
            "sft_val_tasks=2",
        ],
        "",
    ),
    # --smoke: every part of the table (runs, final evaluation, page, curves) at toy sizes
    "python bench/learning_table.py --envs alfworld --seeds 0 --steps 20": (
        ["--smoke", "--out", "runs/table"],
        "",
    ),
}
"""README command → (arguments appended here, a string its output must contain)."""


def tour_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"## A quick tour\n.*?```bash\n(.*?)```", text, re.S)
    assert block, "the README has no quick tour"
    lines = [ln.split("  #")[0].strip() for ln in block.group(1).splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#") and not ln.startswith("source ")]


def test_the_table_lists_exactly_the_tour() -> None:
    commands = tour_commands()
    assert commands, "no command found in the quick tour"
    assert sorted(commands) == sorted(TOUR), (
        "the quick tour and this test's table differ: add the new commands to TOUR (how they run here)"
    )


def test_every_tour_command_runs(tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    for command in tour_commands():
        extra, expect = TOUR[command]
        argv = shlex.split(command) + extra
        if argv[0] == "toolgym":
            argv = [sys.executable, "-m", "toolgym", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, str(REPO / argv[1]), *argv[2:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{out[-3000:]}"
        assert expect in out, f"`{command}` did not print {expect!r}:\n{out[-2000:]}"
    assert (tmp_path / "math-sft.jsonl").stat().st_size > 0
    assert any((tmp_path / "runs" / "miniwob-shots" / "images").iterdir())
