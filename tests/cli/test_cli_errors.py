"""Every way a user can get the CLI's input wrong, with the one-line message and the exit code.

Exit codes: 0 success; 1 the command ran but the data or the run failed (invariant violations,
unreadable lines under ``verify``, a collection stopped by a repeated error or a write error);
2 the input was wrong (an option, a path, a file that is not a dataset). No case may end in a raw
traceback: the runner lets any exception other than SystemExit fail the test.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from tests.cli.helpers import Runner, tmpfs

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
    "-n",
    "2",
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dataset(cli: Runner, tmp_path: Path) -> Path:
    out = tmp_path / "good"
    done = cli(*BASE, "-n", "3", "--out", out)
    assert done.code == 0, done.text
    return out


@pytest.fixture
def damaged(dataset: Path, tmp_path: Path) -> Path:
    """The good dataset with its second line cut in half (but still ending in a newline)."""
    out = tmp_path / "damaged"
    shutil.copytree(dataset, out)
    path = out / "trajectories.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][: len(lines[1]) // 2] + b"\n"
    path.write_bytes(b"".join(lines))
    return out


# (case id, argv with {out} {data} {bad} {tmp} {file} {port} placeholders, exit code, fragments of the message)
TABLE: list[tuple[str, tuple[str, ...], int, tuple[str, ...]]] = [
    ("collect-ok", (*BASE, "--out", "{out}"), 0, ("2 trajectories written",)),
    ("collect-no-env", ("collect", "--out", "{out}"), 2, ("give --env NAME",)),
    (
        "collect-unknown-env",
        ("collect", "--env", "nope", "--out", "{out}"),
        2,
        ("unknown environment 'nope'",),
    ),
    ("collect-unknown-option", (*BASE, "--out", "{out}", "--bogus"), 2, ("No such option: --bogus",)),
    (
        "env-arg-unknown-key",
        (*BASE, "--env-arg", "no_such_key=1", "--out", "{out}"),
        2,
        ("--env-arg no_such_key", "counter", "takes:", "target"),
    ),
    (
        "env-arg-no-equals",
        (*BASE, "--env-arg", "target", "--out", "{out}"),
        2,
        ("--env-arg takes KEY=VALUE",),
    ),
    (
        "sandbox-backend-unknown",
        (*BASE, "--sandbox-backend", "podman", "--out", "{out}"),
        2,
        ("--sandbox-backend 'podman' is not a sandbox backend", "auto, none"),
    ),
    (
        "server-unreachable",
        (
            "collect",
            "--env",
            "counter",
            "--model",
            "http://127.0.0.1:{port}",
            "--tokenizer",
            "tiny",
            "--sandbox-backend",
            "none",
            "--no-progress",
            "-n",
            "12",
            "--concurrency",
            "4",
            "--out",
            "{out}",
        ),
        1,
        ("collection stopped", "failed with the same error", "cannot reach"),
    ),
    (
        "backend-arg-unknown",
        (*BASE, "--backend-arg", "bogus=1", "--out", "{out}"),
        2,
        ("--backend-arg bogus", "takes no option"),
    ),
    ("out-is-a-file", (*BASE, "--out", "{file}"), 2, ("--out", "is a file", "give a directory")),
    ("out-below-a-file", (*BASE, "--out", "{file}/sub"), 2, ("--out", "is a file", "give a directory")),
    ("group-size-zero", (*BASE, "-k", "0", "--out", "{out}"), 2, ("--group-size", "at least 1", "got 0")),
    (
        "temperature-negative",
        (*BASE, "--temperature", "-1", "--out", "{out}"),
        2,
        ("--temperature", "got -1"),
    ),
    (
        "on-rewrite-unknown",
        (*BASE, "--on-rewrite", "bogus", "--out", "{out}"),
        2,
        ("--on-rewrite", "new_sequence"),
    ),
    ("episodes-zero", (*BASE, "-n", "0", "--out", "{out}"), 2, ("--episodes must be at least 1",)),
    ("shard-invalid", (*BASE, "--shard", "3/2", "--out", "{out}"), 2, ("--shard takes K/N",)),
    (
        "dedup-unknown",
        (*BASE, "--dedup", "bogus", "--out", "{out}"),
        2,
        ("--dedup must be 'none' or 'prompt'",),
    ),
    (
        "out-holds-another-run",
        (*BASE, "--temperature", "0.5", "--out", "{data}"),
        2,
        ("holds a different run", "sampling"),
    ),
    ("verify-ok", ("verify", "{data}"), 0, ("all invariants hold",)),
    ("verify-not-a-dataset-file", ("verify", "{file}"), 2, ("is not a dataset",)),
    ("verify-empty-directory", ("verify", "{tmp}/empty"), 2, ("holds no dataset",)),
    ("verify-missing", ("verify", "{tmp}/missing"), 2, ("does not exist",)),
    ("verify-bad-parquet", ("verify", "{tmp}/bad.parquet"), 2, ("is not a Parquet file",)),
    (
        "verify-damaged",
        ("verify", "{bad}"),
        1,
        (
            "trajectories.jsonl:2",
            "skipped 1 unreadable line",
            "checked 2 trajectories",
            "1 unreadable line(s) skipped",
        ),
    ),
    ("show-ok", ("show", "{data}"), 0, ("counter",)),
    ("show-damaged", ("show", "{bad}"), 0, ("skipped 1 unreadable line", "trajectories.jsonl:2")),
    ("show-not-a-dataset", ("show", "{file}"), 2, ("is not a dataset",)),
    ("show-unknown-id", ("show", "{data}", "nosuchid"), 2, ("no trajectory with id 'nosuchid'",)),
    (
        "export-sft-damaged",
        ("export", "sft", "{bad}", "--out", "{tmp}/sft.jsonl"),
        0,
        ("wrote 2 conversations", "skipped 1 unreadable line"),
    ),
    (
        "export-parquet-damaged",
        ("export", "parquet", "{bad}", "--out", "{tmp}/d.parquet"),
        0,
        ("wrote 2 trajectories", "skipped 1 unreadable line"),
    ),
    (
        "export-verl-damaged",
        ("export", "verl", "{bad}", "--out", "{tmp}/v.parquet"),
        0,
        ("task instances", "skipped 1 unreadable line"),
    ),
    (
        "report-damaged",
        ("report", "{bad}", "--out", "{tmp}/report"),
        0,
        ("report of 2 trajectories", "skipped 1 unreadable line"),
    ),
    ("report-not-a-directory", ("report", "{file}"), 2, ("is not a directory",)),
    (
        "report-out-below-a-file",
        ("report", "{data}", "--out", "{file}/report"),
        2,
        ("Not a directory", "notes.txt"),
    ),
    ("export-out-is-a-directory", ("export", "sft", "{data}", "--out", "{tmp}"), 2, ("Is a directory",)),
]


@pytest.mark.parametrize(("args", "code", "fragments"), [pytest.param(a, c, f, id=i) for i, a, c, f in TABLE])
def test_cli_input(
    cli: Runner,
    tmp_path: Path,
    dataset: Path,
    damaged: Path,
    args: tuple[str, ...],
    code: int,
    fragments: tuple[str, ...],
) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("not a dataset\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.parquet").write_bytes(b"this is not parquet")
    subs = {
        "{out}": str(tmp_path / "out"),
        "{data}": str(dataset),
        "{bad}": str(damaged),
        "{tmp}": str(tmp_path),
        "{file}": str(afile),
        "{port}": str(_closed_port()),
    }
    argv = []
    for a in args:
        for k, v in subs.items():
            a = a.replace(k, v)
        argv.append(a)
    done = cli(*argv)
    assert done.code == code, done.text
    for fragment in fragments:
        assert fragment in done.text, done.text
    assert "Traceback" not in done.text and "never retrieved" not in done.text
    if code == 2:  # a usage error is one line naming what was wrong (click's own errors come boxed)
        lines = [ln for ln in done.err.splitlines() if ln.strip() and not ln.startswith("warning: plugin")]
        assert len(lines) == 1 or "No such option" in done.err, done.err


def test_out_unwritable(cli: Runner, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "64k", read_only=True) as ro:
        done = cli(*BASE, "--out", ro / "run")
    assert done.code == 2, done.text
    assert "--out" in done.text and "Read-only file system" in done.text and "Traceback" not in done.text


def test_export_to_a_read_only_place(cli: Runner, tmp_path: Path, dataset: Path) -> None:
    with tmpfs(tmp_path / "ro", "64k", read_only=True) as ro:
        done = cli("export", "parquet", dataset, "--out", ro / "d.parquet")
    assert done.code == 2, done.text
    assert "Read-only file system" in done.text and "Traceback" not in done.text


def test_a_run_where_every_episode_fails_alike_stops_early(cli: Runner, tmp_path: Path) -> None:
    """The environment raises on its first step in every episode: the run stops after the first
    few failures instead of running all 200, says why on stderr, and exits 1; a resume tries again."""
    out = tmp_path / "run"
    done = cli(*BASE, "-n", "200", "--concurrency", "2", "--env-arg", "fail_at=0", "--out", out)
    assert done.code == 1, done.text
    assert "collection stopped" in done.text and "RuntimeError: environment exploded" in done.text
    failed = (out / "failures.jsonl").read_text().splitlines()
    assert 1 <= len(failed) < 20  # stopped early
    again = cli(*BASE, "-n", "200", "--concurrency", "2", "--env-arg", "fail_at=0", "--out", out)
    assert again.code == 1 and "collection stopped" in again.text


def test_fail_fast_zero_runs_everything_and_still_fails(cli: Runner, tmp_path: Path) -> None:
    """``--fail-fast 0`` turns the early stop off: every episode runs; all failed, so exit 1."""
    out = tmp_path / "run"
    done = cli(*BASE, "-n", "12", "--fail-fast", "0", "--env-arg", "fail_at=0", "--out", out)
    assert done.code == 1, done.text
    assert len((out / "failures.jsonl").read_text().splitlines()) == 12
    assert "all 12 episodes failed" in done.text and "RuntimeError: environment exploded" in done.text
