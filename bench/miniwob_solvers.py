"""MiniWoB++: scripted-solver success over many seeds per task, and the cost of a browser step.

For every task with a scripted solver, ``--seeds`` instances (default 100) are played through the
rollout engine in Docker browser sandboxes, ``--concurrency`` at once, each under the task's own
time limit (core.js's clock runs in the page in real time, as in the benchmark). Printed per task:
success rate (raw reward > 0, as core.js computed it), mean turns, and the environment step time
p50/p99 (one browser tool call plus the environment's read of the page), beside the tool call
alone (``browser_*`` inside the step) measured in the same run, and how much of the task's time
limit the won episodes used (p50/max, from core.js's time-discounted reward). The host's load
average is sampled through the run (the machine may be shared).

The table so far is written to ``--out`` (JSON, default ``bench/results/miniwob_solvers.json``)
every 16 episodes and at the end, with the seeds played per task and each lost episode's seed and
reason, so an interrupted run still says which seeds of each task it finished.

    python bench/miniwob_solvers.py                              # 16 tasks x 100 seeds
    python bench/miniwob_solvers.py --seeds 30 --concurrency 4
    python bench/miniwob_solvers.py --seeds 34 --first-seed 1056 --out bench/results/part2.json   # seeds 1056-1599
    python bench/miniwob_solvers.py --smoke                      # 2 tasks x 5 seeds, no file
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.plugins.miniwob.tasks import task_list
from toolgym.sandboxes.docker.backend import DockerBackend

OUT = Path(__file__).resolve().parent / "results" / "miniwob_solvers.json"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


class Tally:
    """The run's trajectories by task, the load averages seen, and the table they make."""

    def __init__(self, tasks: tuple[str, ...], args: argparse.Namespace) -> None:
        self.tasks, self.args = tasks, args
        self.by_task: dict[str, list[Any]] = defaultdict(list)
        self.errors: list[dict[str, Any]] = []
        self.loads: list[float] = []
        self.start = time.perf_counter()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")

    def add(self, t: Any) -> None:
        if t.status != "ok":
            self.errors.append(
                {
                    "task": self.tasks[t.seed % len(self.tasks)],
                    "seed": t.seed,
                    "status": str(t.status),
                    "reason": t.status_reason,
                }
            )
        else:
            self.by_task[t.metadata["env_info"]["miniwob_task"]].append(t)

    @property
    def done(self) -> int:
        return sum(map(len, self.by_task.values())) + len(self.errors)

    def rows(self) -> dict[str, dict[str, Any]]:
        out = {}
        for task in self.tasks:
            rows = self.by_task.get(task, [])
            wins = sum(bool(t.steps and t.steps[-1].info.get("success")) for t in rows)
            lost = [
                {
                    "seed": t.seed,
                    "reason": t.steps[-1].info.get("page_reason") or t.steps[-1].info.get("miniwob_reason"),
                    "turns": len(t.steps),
                }
                for t in rows
                if not (t.steps and t.steps[-1].info.get("success"))
            ]
            out[task] = {
                "episodes": len(rows),
                "wins": wins,
                "success": wins / len(rows) if rows else None,
                "perfect": sum(bool(t.steps and t.steps[-1].info.get("raw_reward") == 1.0) for t in rows),
                "seeds": sorted(t.seed for t in rows),
                "turns_mean": statistics.mean(len(t.steps) for t in rows) if rows else None,
                "step_ms": [s.env_s * 1e3 for t in rows for s in t.steps],
                "tool_ms": [c.duration_s * 1e3 for t in rows for s in t.steps for c in s.tool_calls],
                "time_used_s_p50_max": _time_used(rows),
                "lost": sorted(lost, key=lambda r: r["seed"]),
            }
        return out

    def write(self, path: Path | None, finished: bool) -> None:
        if path is None:
            return
        rows = self.rows()
        steps = [v for r in rows.values() for v in r.pop("step_ms")]
        tools = [v for r in rows.values() for v in r.pop("tool_ms")]
        wins, n = sum(r["wins"] for r in rows.values()), sum(r["episodes"] for r in rows.values())
        report = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "started_at": self.started_at,
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "finished": finished,
            "wall_s": round(time.perf_counter() - self.start, 1),
            "seeds_per_task": self.args.seeds,
            "first_seed": self.args.first_seed,
            "concurrency": self.args.concurrency,
            "cpus": os.cpu_count(),
            "load_avg_1min": {
                "min": min(self.loads, default=None),
                "max": max(self.loads, default=None),
                "mean": round(statistics.mean(self.loads), 2) if self.loads else None,
                "samples": len(self.loads),
            },
            "episodes": n,
            "errors": self.errors,
            "success": wins / n if n else None,
            "step_ms_p50_p99": [round(pct(steps, 50), 1), round(pct(steps, 99), 1)],
            "tool_ms_p50_p99": [round(pct(tools, 50), 1), round(pct(tools, 99), 1)],
            "tasks": rows,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        tmp.replace(path)


def _time_used(rows: list[Any]) -> list[float] | None:
    """Of the won episodes, the page time from the instance's start to its reward (p50, max), from
    core.js's time-discounted reward: reward = raw * (1 - elapsed / limit)."""
    used = []
    for t in rows:
        info = t.steps[-1].info if t.steps else {}
        if info.get("success") and "env_reward" in info:
            limit_s = t.metadata["env_info"]["time_limit_ms"] / 1000
            used.append(limit_s * (1 - info["env_reward"] / info["raw_reward"]))
    return [round(pct(used, 50), 2), round(max(used), 2)] if used else None


async def sample_load(tally: Tally, every_s: float = 10.0) -> None:
    while True:
        tally.loads.append(round(os.getloadavg()[0], 2))
        await asyncio.sleep(every_s)


async def run(tasks: tuple[str, ...], args: argparse.Namespace, tally: Tally) -> None:
    backend = DockerBackend(max_idle=args.concurrency)
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(ChatFormat(load_tiny_tokenizer("qwen"))),
        config=EngineConfig(max_live_episodes=args.concurrency, max_sandboxes=args.concurrency),
        sandbox_backend=backend,
        env_kwargs={"tasks": ",".join(tasks)},
    )
    total = len(tasks) * args.seeds

    def on_trajectory(t: Any) -> None:
        tally.add(t)
        if tally.done % 16 == 0 or tally.done == total:
            tally.write(args.out, finished=False)
            print(
                f"  {tally.done}/{total} episodes, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True
            )

    engine.on_trajectory = on_trajectory
    sampler = asyncio.create_task(sample_load(tally))
    try:
        await engine.run(plan_episodes("miniwob", num_tasks=total, group_size=1, first_task=args.first_seed))
    finally:
        sampler.cancel()
        await backend.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seeds", type=int, default=100, help="instances per task (seed i plays task i mod #tasks)"
    )
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seed of the first instance (a multiple of the task count keeps seeds even per task), "
        "to split a run over several processes or resume one",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="episodes at once (each its own Chromium)")
    parser.add_argument("--tasks", default="solvable")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results JSON (default bench/results/miniwob_solvers.json; none with --smoke)",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    tasks = task_list(args.tasks)
    if args.smoke:
        tasks, args.seeds = tasks[:2], 5
    elif args.out is None:
        args.out = OUT
    tally = Tally(tasks, args)
    try:
        asyncio.run(run(tasks, args, tally))
    finally:
        tally.write(args.out, finished=tally.done == len(tasks) * args.seeds)
    wall = time.perf_counter() - tally.start
    rows = tally.rows()
    print(
        f"\n{'task':24} {'success':>8} {'turns':>6} {'step p50':>9} {'step p99':>9} {'tool p50':>9} {'tool p99':>9} "
        f"{'time used p50/max':>18}"
    )
    for task, r in rows.items():
        rate = f"{r['success']:8.1%}" if r["episodes"] else f"{'-':>8}"
        print(
            f"{task:24} {rate} {r['turns_mean'] or 0:6.2f} {pct(r['step_ms'], 50):8.1f}ms {pct(r['step_ms'], 99):8.1f}ms "
            f"{pct(r['tool_ms'], 50):8.1f}ms {pct(r['tool_ms'], 99):8.1f}ms "
            f"{'/'.join(f'{v:.1f}' for v in r['time_used_s_p50_max'] or []) + ' s':>18}"
        )
    steps = [v for r in rows.values() for v in r["step_ms"]]
    tools = [v for r in rows.values() for v in r["tool_ms"]]
    wins, n = sum(r["wins"] for r in rows.values()), sum(r["episodes"] for r in rows.values())
    print(
        f"{'all':24} {wins / max(n, 1):8.1%} {'':6} {pct(steps, 50):8.1f}ms {pct(steps, 99):8.1f}ms "
        f"{pct(tools, 50):8.1f}ms {pct(tools, 99):8.1f}ms"
    )
    for task, r in rows.items():
        if r["lost"]:
            print(f"  lost {task}: " + ", ".join(f"seed {x['seed']} ({x['reason']})" for x in r["lost"]))
    loads = tally.loads
    print(
        f"\n{n} episodes ({len(tally.errors)} errors) in {wall:.1f} s = {n / wall:.2f} episodes/s at concurrency "
        f"{args.concurrency}; load average (1 min) {min(loads, default=0):.1f} to {max(loads, default=0):.1f}, mean "
        f"{statistics.mean(loads) if loads else 0:.1f} on {os.cpu_count()} CPUs; step = the browser tool call + the "
        "environment's read of the page (tool = the call alone)"
    )
    if args.out:
        print(f"results: {args.out}")


if __name__ == "__main__":
    main()
