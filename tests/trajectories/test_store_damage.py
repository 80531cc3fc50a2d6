"""Damaged data: torn, invalid and duplicate lines; a full disk; resume after each.

A crash (or a filesystem that lost the end of a block) can leave a last record cut in half, with or
without its newline. The writer must find it when it opens the file again, keep its bytes in a side
file (``<file>.quarantine``), cut it from the data, and let the collection re-run that episode.
Readers meet damaged lines anywhere: they skip each one and report where it was and why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import Runner, cli, remount, tmpfs
from toolgym.core.trajectory import Status, Trajectory
from toolgym.trajectories.store import (
    ReadReport,
    TrajectoryWriter,
    completed_ids,
    iter_raw,
    iter_trajectories,
    quarantine_path,
)

__all__ = ["cli"]  # the fixture

BASE = (
    "collect",
    "--env",
    "counter",
    "--model",
    "sim:0",
    "--backend-arg",
    "text=count[1]",
    "--sandbox-backend",
    "none",
    "--no-progress",
)


def _trajs(n: int, status: Status = Status.OK) -> list[Trajectory]:
    return [
        Trajectory(trajectory_id=f"t{i}", group_id=f"g{i}", task="counter", status=status) for i in range(n)
    ]


def _write(root: Path, trajs: list[Trajectory]) -> Path:
    with TrajectoryWriter(root) as w:
        for t in trajs:
            w.write(t)
    return root / "trajectories.jsonl"


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        pytest.param(
            lambda line: line[: len(line) // 2] + b"\n", "torn, ends in a newline", id="torn-with-newline"
        ),
        pytest.param(lambda line: line[: len(line) // 2], "torn, no newline", id="torn-no-newline"),
        pytest.param(lambda line: line[:-2] + b"\n", "missing its closing brace", id="one-brace-short"),
        pytest.param(
            lambda line: b'{"schema_version": 1, "note": "no id"}\n',
            "valid JSON, not a trajectory",
            id="json-not-trajectory",
        ),
        pytest.param(lambda line: b"\x00\x00\x00\x00garbage\n", "binary garbage", id="garbage"),
    ],
)
def test_bad_last_record_is_quarantined_and_rerun(tmp_path: Path, tail, why: str) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, _trajs(3))
    lines = path.read_bytes().splitlines(keepends=True)
    bad = tail(lines[-1])
    path.write_bytes(b"".join(lines[:-1]) + bad)
    # not counted as done, so a resumed collection runs that episode again
    assert completed_ids(tmp_path) == {"t0", "t1"}, why
    w = TrajectoryWriter(tmp_path)
    w.close()
    assert path.read_bytes() == b"".join(lines[:-1]), why
    assert w.quarantined == [quarantine_path(path)]
    kept = quarantine_path(path).read_bytes()
    assert kept.rstrip(b"\n") == bad.rstrip(b"\n"), why  # the bytes are kept, not lost
    report = ReadReport()
    assert [t.trajectory_id for t in iter_trajectories(tmp_path, report=report)] == ["t0", "t1"]
    assert report.bad == []


def test_good_last_record_is_left_alone(tmp_path: Path) -> None:
    path = _write(tmp_path, _trajs(3))
    before = path.read_bytes()
    w = TrajectoryWriter(tmp_path)
    w.close()
    assert path.read_bytes() == before and w.quarantined == []
    assert not quarantine_path(path).exists()
    assert completed_ids(tmp_path) == {"t0", "t1", "t2"}


def test_failures_file_tail_is_quarantined_too(tmp_path: Path) -> None:
    _write(tmp_path, _trajs(2, Status.ERROR))
    fails = tmp_path / "failures.jsonl"
    fails.write_bytes(fails.read_bytes()[:-30] + b"\n")
    w = TrajectoryWriter(tmp_path)
    w.close()
    assert w.quarantined == [quarantine_path(fails)]
    assert len(fails.read_bytes().splitlines()) == 1


def test_readers_skip_and_report_bad_lines_anywhere(tmp_path: Path) -> None:
    path = _write(tmp_path, _trajs(5))
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:20] + b"\n"  # torn in the middle of the file
    lines[3] = b'{"trajectory_id": "t3", "group_id": "g3"}\n'  # JSON, but no task: not a valid trajectory
    path.write_bytes(b"".join(lines))
    report = ReadReport()
    assert [r["trajectory_id"] for r in iter_raw(tmp_path, report=report)] == ["t0", "t2", "t3", "t4"]
    assert [(b.path.name, b.lineno) for b in report.bad] == [("trajectories.jsonl", 2)]
    report = ReadReport()
    assert [t.trajectory_id for t in iter_trajectories(tmp_path, report=report)] == ["t0", "t2", "t4"]
    assert [(b.lineno, b.reason.split(" ")[0]) for b in report.bad] == [(2, "not"), (4, "not")]
    assert "not valid JSON" in report.bad[0].reason and "not a valid trajectory" in report.bad[1].reason
    assert "skipped 2 unreadable lines" in report.summary()


def test_readers_skip_duplicate_lines_and_count_them(tmp_path: Path) -> None:
    path = _write(tmp_path, _trajs(3))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines, lines[0], lines[2]]))
    report = ReadReport()
    assert [t.trajectory_id for t in iter_trajectories(tmp_path, report=report)] == ["t0", "t1", "t2"]
    assert report.duplicates == 2 and report.bad == []
    assert completed_ids(tmp_path) == {"t0", "t1", "t2"}


def test_collect_resumes_a_torn_last_record(cli: Runner, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert cli(*BASE, "-n", "6", "--out", out).code == 0
    data = out / "trajectories.jsonl"
    lines = data.read_bytes().splitlines(keepends=True)
    torn_id = json.loads(lines[-1])["trajectory_id"]
    data.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2] + b"\n")
    assert cli("verify", out).code == 1  # the damage is visible before the resume
    again = cli(*BASE, "-n", "6", "--out", out)
    assert again.code == 0, again.text
    assert "1 trajectories written" in again.text and "5 already there" in again.text
    assert "quarantine" in again.text
    ids = [json.loads(x)["trajectory_id"] for x in data.read_bytes().splitlines()]
    assert sorted(ids) == sorted({*ids}) and torn_id in ids and len(ids) == 6
    assert quarantine_path(data).exists()
    assert cli("verify", out).code == 0


def test_full_disk_stops_at_the_first_write_error_and_resumes(cli: Runner, tmp_path: Path) -> None:
    """A small tmpfs fills up mid-collection: one clear line, exit 1, every stored line intact;
    with space back, the same command finishes the run without duplicates."""
    with tmpfs(tmp_path / "disk", "160k") as disk:
        out = disk / "run"
        cmd = (*BASE, "-n", "60", "--concurrency", "4", "--out", out)
        done = cli(*cmd)
        assert done.code == 1, done.text
        assert "No space left on device" in done.text and "run the same command again" in done.text
        assert "Traceback" not in done.text and "never retrieved" not in done.text
        errors = [ln for ln in done.err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, done.err
        report = ReadReport()
        kept = [t.trajectory_id for t in iter_trajectories(out, report=report)]
        assert report.bad == [] and 0 < len(kept) < 60
        assert (out / "trajectories.jsonl").read_bytes().endswith(b"\n")
        remount(disk, "4m")
        again = cli(*cmd)
        assert again.code == 0, again.text
        ids = [json.loads(x)["trajectory_id"] for x in (out / "trajectories.jsonl").read_bytes().splitlines()]
        assert len(ids) == 60 and len(set(ids)) == 60
        assert set(kept) <= set(ids)
        assert json.loads((out / "manifest.json").read_text())["state"] == "complete"


def test_lone_surrogates_are_stored_and_read_back(tmp_path: Path) -> None:
    """A chat API's JSON or a tool's surrogateescape-decoded output can hold lone surrogates, which
    UTF-8 cannot encode: the record must still be written (as JSON escapes) and read back equal."""
    weird = "a\ud800b\udcff c"
    traj = Trajectory(
        trajectory_id="s0",
        group_id="g",
        task="counter",
        messages=[{"role": "tool", "content": weird}],
        status_reason=weird,
    )
    with TrajectoryWriter(tmp_path) as w:
        w.write(traj)
        w.write(_trajs(1)[0])
    report = ReadReport()
    back = list(iter_trajectories(tmp_path, report=report))
    assert report.bad == [] and [t.trajectory_id for t in back] == ["s0", "t0"]
    assert back[0] == traj
    assert completed_ids(tmp_path) == {"s0", "t0"}


def test_a_value_json_cannot_hold_is_written_as_its_repr(tmp_path: Path) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque thing>"

    traj = Trajectory(
        trajectory_id="o0", group_id="g", task="counter", metadata={"left_by_a_plugin": Opaque()}
    )
    with TrajectoryWriter(tmp_path) as w:
        w.write(traj)
    back = next(iter_trajectories(tmp_path))
    assert back.metadata == {"left_by_a_plugin": "<opaque thing>"}
