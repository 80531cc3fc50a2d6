"""``toolgym report``: a static HTML report of a trajectory dataset.

Written into ``out``::

    index.html             summary, plots, per-environment and per-tool tables, sampled episodes
    plots/*.png            reward distribution, success by environment and by turn count, tool latency
    episodes/<id>.html     one page per sampled episode: turns, tool calls, observations,
                           screenshots, rewards, tokens coloured by loss mask
    episodes.csv           one line per trajectory (all of them), for spreadsheets
    files/<id>/...         the screenshots and other files the sampled episodes' tool calls made

Streaming: one pass over the dataset accumulates the statistics (a few numbers per environment,
turn count and tool, one float per trajectory) and keeps a uniform random sample of ``sample``
episodes (plus up to ``sample // 4`` failed ones) for their pages, so a dataset of any size is
reported in bounded memory.
"""

from __future__ import annotations

import csv
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.core.trajectory import Trajectory
from toolgym.trajectories.store import ReadReport, dataset_manifest, iter_raw

from .html import episode_page, index_page
from .plots import PLOTS, draw_all
from .stats import DatasetStats, Reservoir

__all__ = ["PLOTS", "ReportResult", "build_report"]

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class ReportResult:
    out: Path
    trajectories: int
    episode_pages: int
    stats: DatasetStats

    @property
    def index(self) -> Path:
        return self.out / "index.html"


def _page_name(trajectory_id: str) -> str:
    return _SAFE.sub("_", trajectory_id)[:120] or "episode"


def _copy_files(traj: Trajectory, root: Path, out: Path) -> dict[str, str]:
    """Copy the files the episode's tool calls made; returns dataset path → path from its page."""
    found: dict[str, str] = {}
    base = root.resolve()
    for step in traj.steps:
        for call in step.tool_calls:
            for rel in call.files:
                src = (root / rel).resolve()
                if not src.is_file() or not src.is_relative_to(base):  # never read outside the dataset
                    continue
                parts = [_SAFE.sub("_", part) for part in Path(rel).parts if part not in ("", ".", "..", "/")]
                dest = out / "files" / _page_name(traj.trajectory_id) / Path(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                found[rel] = f"../{dest.relative_to(out).as_posix()}"
    return found


def build_report(
    root: str | Path,
    out: str | Path,
    *,
    sample: int = 200,
    seed: int = 0,
    success_threshold: float = 1.0,
    tokenizer: Any = None,
    on_progress: Callable[[int], None] | None = None,
    report: ReadReport | None = None,
) -> ReportResult:
    """Write the report of the dataset at ``root`` into ``out`` (see the module docstring); lines
    that cannot be read are skipped and counted in ``report``."""
    root, out = Path(root), Path(out)
    stats = DatasetStats(success_threshold=success_threshold)
    good, failed = Reservoir(sample, seed), Reservoir(max(1, sample // 4) if sample else 0, seed + 1)
    (out / "episodes").mkdir(parents=True, exist_ok=True)
    with (out / "episodes.csv").open("w", newline="", encoding="utf-8") as fh:
        rows = csv.writer(fh)
        rows.writerow(
            [
                "trajectory_id",
                "group_id",
                "env",
                "task_index",
                "sample_index",
                "seed",
                "turns",
                "reward",
                "success",
                "status",
                "token_faithful",
                "total_s",
            ]
        )
        for raw in iter_raw(root, include_failures=True, report=report):
            stats.add(raw)
            (failed if raw.get("status") == "error" else good).offer(raw)
            rows.writerow(
                [
                    raw.get("trajectory_id"),
                    raw.get("group_id"),
                    raw.get("env") or raw.get("task"),
                    raw.get("task_index"),
                    raw.get("sample_index"),
                    raw.get("seed"),
                    len(raw.get("steps") or []),
                    raw.get("reward"),
                    int(stats.success(raw)),
                    raw.get("status"),
                    int(bool(raw.get("token_faithful", True))),
                    (raw.get("timings") or {}).get("total_s"),
                ]
            )
            if on_progress is not None and stats.n % 1000 == 0:
                on_progress(stats.n)
    plots = draw_all(stats, out / "plots")
    episodes = []
    chosen = sorted(
        good.items + failed.items,
        key=lambda r: (str(r.get("env") or r.get("task")), r.get("task_index", 0), r.get("sample_index", 0)),
    )
    for raw in chosen:
        traj = Trajectory.model_validate(raw)
        name = _page_name(traj.trajectory_id)
        files = _copy_files(traj, root, out)
        (out / "episodes" / f"{name}.html").write_text(
            episode_page(traj, files, tokenizer=tokenizer), encoding="utf-8"
        )
        episodes.append(
            {
                "trajectory_id": name,
                "env": traj.env or traj.task,
                "task_index": traj.task_index,
                "sample_index": traj.sample_index,
                "turns": len(traj.steps),
                "reward": traj.reward,
                "status": traj.status.value,
            }
        )
    manifest = dataset_manifest(root)
    (out / "index.html").write_text(
        index_page(stats, manifest, plots, episodes, source=str(root)), encoding="utf-8"
    )
    return ReportResult(out, stats.n, len(episodes), stats)
