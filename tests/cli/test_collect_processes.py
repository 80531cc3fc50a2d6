"""``toolgym collect --processes N``: one dataset written by N processes (a shard each), one progress
display, the same ids as one process, resumable under another count, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.collect.processes import auto_processes, merge_stats
from toolgym.core.rollout.stats import EngineStats


def collect(out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolgym", "collect", "--env", "keychain", "--model", "scripted", "-n", "24"]
        + ["--out", str(out), "--no-progress", *more],
        capture_output=True,
        text=True,
        timeout=300,
    )


def ids(folder: Path) -> set[str]:
    return {
        json.loads(line)["trajectory_id"]
        for path in folder.glob("trajectories*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    }


def test_two_processes_write_one_dataset_with_the_ids_of_one_process(tmp_path: Path) -> None:
    two, one = tmp_path / "two", tmp_path / "one"
    done = collect(two, "--processes", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "24 trajectories written" in done.stderr
    assert sorted(p.name for p in two.glob("trajectories*.jsonl")) == [
        "trajectories-00000.jsonl",
        "trajectories-00001.jsonl",
    ]
    assert (two / "toolgym-0.log").is_file() and (two / "toolgym-1.log").is_file()
    assert collect(one, "--processes", "1").returncode == 0
    assert ids(two) == ids(one) and len(ids(one)) == 24
    verify = subprocess.run(
        [sys.executable, "-m", "toolgym", "verify", str(two)], capture_output=True, text=True, timeout=120
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    again = collect(two, "--processes", "3")  # resumes under another count: nothing left to run
    assert (
        again.returncode == 0
        and "0 trajectories written" in again.stderr
        and "24 already there" in again.stderr
    )


def test_a_failing_process_fails_the_run_and_names_its_log(tmp_path: Path) -> None:
    done = collect(tmp_path / "bad", "--processes", "2", "--model", str(tmp_path / "no_such_model"))
    assert done.returncode != 0
    assert "collection processes failed" in done.stderr and "toolgym-0.log" in done.stderr, done.stderr[
        -2000:
    ]


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (["--processes", "0"], "a count of 1 or more, or auto"),
        (["--processes", "two"], "a count of 1 or more, or auto"),
        (["--processes", "2", "--shard", "0/2"], "does not combine with --ray or --shard"),
    ],
)
def test_bad_process_counts_are_one_line(tmp_path: Path, more: list[str], message: str) -> None:
    done = collect(tmp_path / "x", *more)
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_auto_starts_a_process_per_2000_live_episodes_at_most_one_per_core() -> None:
    assert auto_processes(32, cpus=2) == 1
    assert auto_processes(2000, cpus=2) == 1
    assert auto_processes(2001, cpus=2) == 2
    assert auto_processes(10_000, cpus=2) == 2
    assert auto_processes(10_000, cpus=16) == 5


def test_the_display_sums_every_process() -> None:
    a = EngineStats(total=10, done=4, running=2, failed=1, reward_sum=3.0, turns=9)
    b = EngineStats(total=12, done=6, running=1, failed=0, reward_sum=6.0, turns=11)
    merged = merge_stats([a, b], started_at=0.0)
    assert (merged.total, merged.done, merged.running, merged.failed, merged.turns) == (22, 10, 3, 1, 20)
    assert merged.mean_reward == pytest.approx(9.0 / 9)
