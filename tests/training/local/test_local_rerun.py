"""A rerun into a directory with a metrics.jsonl but no checkpoint keeps the old record, and the
held-out evaluation before RL says when it starts and ends."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.training.local.progress import set_aside


def test_set_aside_renames_by_last_write_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    assert set_aside(path) is None
    path.write_text("\n")
    assert set_aside(path) is None and not path.exists()  # nothing recorded: nothing to keep
    names = []
    for n in range(2):
        path.write_text(f'{{"step": {n}}}\n')
        os.utime(path, (1_700_000_000, 1_700_000_000))
        kept = set_aside(path)
        assert kept is not None and not path.exists() and kept.read_text() == f'{{"step": {n}}}\n'
        names.append(kept.name)
    assert names[0].startswith("metrics-20231114-") and names[0].endswith(".jsonl")
    assert names[1] == names[0].replace(".jsonl", "-2.jsonl")


def test_a_rerun_without_a_checkpoint_keeps_the_old_metrics(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    old = '{"step": 0, "heldout": {"success": 0.25}}\n{"step": 1, "train_success": 0.5}\n'
    (out / "metrics.jsonl").write_text(old)
    done = CliRunner().invoke(
        app,
        [
            "train",
            "--trainer",
            "local",
            "--config",
            "keychain_gigpo",
            "verl.data.train_batch_size=2",
            "toolgym.group_size=2",
            "toolgym.val.num_tasks=2",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.trainer.total_training_steps=1",
            f"verl.trainer.default_local_dir={out}",
        ],
    )
    assert done.exit_code == 0, done.output
    kept = list(out.glob("metrics-*.jsonl"))
    assert len(kept) == 1 and kept[0].read_text() == old
    lines = done.output.splitlines()
    said = [ln for ln in lines if kept[0].name in ln]
    assert len(said) == 1 and "no checkpoint to resume from" in said[0]
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]
    # the evaluation before RL says when it starts (how many tasks) and when it ends (success)
    start = lines.index("held-out evaluation before RL: 2 tasks …")
    end = next(i for i, ln in enumerate(lines) if ln.startswith("held-out success before RL: "))
    assert start < end and "(2 tasks, " in lines[end]
