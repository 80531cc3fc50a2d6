"""``toolgym report``: the files it writes, what renders in headless Chromium (a screenshot is kept
under test-artifacts/), and bounded memory when reading, reporting and exporting a dataset."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.trajectories.helpers import REPO, dataset_registry, synthetic_trajectory
from toolgym.cli import app
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.trajectory import Status
from toolgym.trajectories.export_sft import write_sft
from toolgym.trajectories.report import build_report
from toolgym.trajectories.store import TrajectoryWriter, iter_trajectories

CHROMIUM = Path(os.environ.get("TOOLGYM_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of 12 adder episodes (tool calls with screenshots) plus one failed counter episode."""
    data = tmp_path_factory.mktemp("adder")
    opts = CollectOptions(
        env="adder", out=data, model="scripted", episodes=6, group_size=2, sandbox_backend="none"
    )
    asyncio.run(collect(opts, registry=dataset_registry()))
    failed = synthetic_trajectory(99).model_copy(
        update={"status": Status.ERROR, "status_reason": "RuntimeError: environment exploded"}
    )
    with TrajectoryWriter(data, shard=7) as w:
        w.write(failed)
    out = tmp_path_factory.mktemp("report")
    import toolgym.core.registry as registry

    registry._default = dataset_registry()
    res = CliRunner().invoke(
        app, ["report", str(data), "--out", str(out), "--sample", "5", "--tokenizer", "tiny"]
    )
    registry._default = None
    assert res.exit_code == 0, res.output
    assert "report of 13 trajectories (6 episode pages)" in " ".join(res.output.split())
    return out


def test_report_files(report: Path) -> None:
    assert sorted(p.name for p in (report / "plots").iterdir()) == [
        "reward_distribution.png",
        "success_by_env.png",
        "success_by_turns.png",
        "tool_latency.png",
    ]
    assert all(
        p.read_bytes().startswith(b"\x89PNG") and p.stat().st_size > 5000
        for p in (report / "plots").iterdir()
    )
    pages = sorted((report / "episodes").glob("*.html"))
    assert len(pages) == 6  # 5 sampled episodes + the failed one
    assert len((report / "episodes.csv").read_text().splitlines()) == 14
    index = (report / "index.html").read_text()
    assert index.count("<tr data-status=") == 6 and "data-status='error'" in index
    adder = next(p.read_text() for p in pages if "adder #" in p.read_text())
    assert (
        "→ add</b>" in adder and "<img class=shot src='../files/" in adder
    )  # the tool call and its screenshot
    assert (
        "class='tok m1' title='id " in adder and "logprob" not in adder.split("class='tok m1'")[1][:60]
    )  # scripted: no logprobs
    shots = list((report / "files").rglob("screen.png"))
    assert len(shots) == 5 and shots[0].read_bytes().startswith(b"\x89PNG")


def _chromium(*args: str) -> str:
    if not CHROMIUM.exists():  # CI runs as root: install it rather than skip
        subprocess.run(["bash", str(REPO / "scripts" / "ensure-chromium.sh")], check=True, timeout=900)
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def _body(dom: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", dom)
    assert tag, dom[:500]
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', tag.group(1)))


def test_report_renders_in_headless_chromium(report: Path) -> None:
    body = _body(_chromium("--dump-dom", (report / "index.html").as_uri()))
    assert (
        body["ready"] == "1" and body["images"] == body["images-loaded"] == "4"
    )  # the script ran; every plot loaded
    dom = _chromium("--dump-dom", (report / "index.html").as_uri())
    assert re.search(r'<span id="visible-count">6</span>', dom)
    page = next(p for p in (report / "episodes").glob("*.html") if "adder #" in p.read_text())
    ep = _body(_chromium("--dump-dom", page.as_uri()))
    assert (
        ep["ready"] == "1"
        and ep["steps"] == "2"
        and int(ep["masked"]) > 10
        and ep["shots"] == ep["shots-loaded"] == "1"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-index.png"
    shot.unlink(missing_ok=True)
    _chromium(f"--screenshot={shot}", "--window-size=1280,1600", (report / "index.html").as_uri())
    _chromium(f"--screenshot={ARTIFACTS / 'report-episode.png'}", "--window-size=1280,1400", page.as_uri())
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] == 1600 and pixels.shape[1] == 1280
    assert pixels[..., :3].std() > 0.05  # not a blank page
    header = pixels[10:40, 10:600, :3].reshape(-1, 3).mean(axis=0)
    assert header[2] > header[0] + 0.1  # the dark blue header band is painted


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _dataset(root: Path, n: int) -> int:
    with TrajectoryWriter(root) as w:
        for i in range(n):
            w.write(synthetic_trajectory(i, tokens_per_turn=150, prompt_tokens=200, env=f"env{i % 3}"))
    return (root / "trajectories.jsonl").stat().st_size


def test_reading_reporting_and_exporting_hold_memory_bounded(tmp_path: Path) -> None:
    from toolgym.trajectories.report.plots import draw_all
    from toolgym.trajectories.report.stats import DatasetStats

    draw_all(DatasetStats(), tmp_path / "warm-up")  # matplotlib's imports and font cache are not data
    _dataset(tmp_path / "half", 600)
    full = _dataset(tmp_path / "full", 1200)
    assert full > 10_000_000
    read = _peak(lambda: sum(1 for _ in iter_trajectories(tmp_path / "full")))
    sft = _peak(lambda: write_sft(iter_trajectories(tmp_path / "full"), tmp_path / "sft.jsonl"))
    report_half = _peak(lambda: build_report(tmp_path / "half", tmp_path / "r-half", sample=10))
    report_full = _peak(lambda: build_report(tmp_path / "full", tmp_path / "r-full", sample=10))
    print(
        f"dataset {full / 1e6:.1f} MB; tracemalloc peaks: read {read / 1e6:.2f} MB, sft {sft / 1e6:.2f} MB, "
        f"report {report_full / 1e6:.2f} MB (half the data: {report_half / 1e6:.2f} MB)"
    )
    assert read < full / 10 and sft < full / 10, "reading and exporting must stream"
    assert report_full < full / 2, "the report must not hold the dataset"
    assert report_full < 1.25 * report_half, "twice the data must not need twice the memory"
    shutil.rmtree(tmp_path / "full")
