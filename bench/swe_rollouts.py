"""SWE-scale rollouts: N concurrent SWE episodes on the shipped tasks with a simulated model.

The model is the SWE oracle replayed with a latency per turn (``--model sim:LATENCY --backend-arg
replay=scripted`` in ``toolgym collect``: view, fix, run the tests, submit; every episode is
graded). Per concurrency N (``--concurrency 32 64``; ``--smoke``: 4), ``--waves`` × N episodes
run with at most N live, each in its own Docker sandbox from the warm pool (reset and reused
between episodes). Reported per row:

- episodes/s over the whole run (wall clock, pool start included);
- where the episodes' time went, as shares of the summed episode time: the model (its latency),
  sandboxes (reset/checkout, tool calls, diff digests, acquiring a sandbox), grading (the
  ``submit`` step: fresh checkout, patches, tests, parsing) and the rest (the engine, tokenizing);
- grading time p50/p99; peak host memory: this process's peak RSS and the machine's memory in use
  at its peak minus at the start (containers included; other jobs on a shared machine count too);
- sandboxes created vs reused (the pool's counters); the 1-minute load average after the row.

Baseline in the same run: the same episodes with every tool call a fresh ``docker exec`` in the
same pooled containers (``bench/_exec_sandbox.py``), as frameworks that exec per call do. With
``--ray`` a further row (at the first N) runs the toolgym path over 2 Ray workers (``toolgym collect --ray``;
per-worker pools, so no pool counters).

    .venv/bin/python bench/swe_rollouts.py [--concurrency 32 64] [--latency 2] [--waves 2] [--ray]
    .venv/bin/python bench/swe_rollouts.py --smoke [--json rows.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._exec_sandbox import ExecPerCallBackend
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Trajectory
from toolgym.sandboxes import open_backend


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else 0.0


def mem_used_mb() -> float:
    info = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


class MemoryWatch:
    """Samples the machine's memory in use every half second while the run lasts."""

    def __init__(self) -> None:
        self.start = mem_used_mb()
        self.peak = self.start
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            self.peak = max(self.peak, mem_used_mb())
            await asyncio.sleep(0.5)

    def __enter__(self) -> MemoryWatch:
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def grading_s(t: Trajectory) -> float:
    return sum(c.duration_s for s in t.steps for c in s.tool_calls if c.name == "submit")


def summarize(
    name: str, trajs: list[Trajectory], wall: float, mem: MemoryWatch, counters: dict[str, int] | None
) -> dict[str, Any]:
    ok = [t for t in trajs if t.status.value == "ok"]
    total = sum(t.timings.total_s for t in trajs) or 1.0
    model = sum(t.timings.llm_s for t in trajs)
    grade = sum(grading_s(t) for t in trajs)
    sandbox = sum(t.timings.env_s for t in trajs) - grade  # env steps and reset (which acquires the sandbox)
    return {
        "name": name,
        "episodes": len(trajs),
        "failed": len(trajs) - len(ok),
        "solved": sum(t.reward >= 1 for t in ok),
        "eps": len(trajs) / wall,
        "wall": wall,
        "model": model / total,
        "sandbox": sandbox / total,
        "grading": grade / total,
        "other": max(0.0, 1 - (model + sandbox + grade) / total),
        "g50": pct([grading_s(t) for t in ok], 50),
        "g99": pct([grading_s(t) for t in ok], 99),
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "host": mem.peak - mem.start,
        "created": counters.get("created") if counters else None,
        "reused": counters.get("reused") if counters else None,
    }


async def run_local(
    name: str, n: int, episodes: int, latency: float, *, exec_per_call: bool
) -> dict[str, Any]:
    pool = open_backend("docker", max_idle=n, create_concurrency=8)
    backend: Any = ExecPerCallBackend(pool) if exec_per_call else pool
    cfg = EngineConfig(max_turns=30, max_live_episodes=n, max_llm_calls=n, max_sandboxes=n, env_timeout_s=900)
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(ChatFormat(load_tiny_tokenizer("qwen")), latency_s=latency),
        config=cfg,
        sandbox_backend=backend,
    )
    got: list[Trajectory] = []
    engine.on_trajectory = got.append
    try:
        with MemoryWatch() as mem:
            t0 = time.perf_counter()
            await engine.run(plan_episodes("swe", num_tasks=episodes, group_size=1))
            wall = time.perf_counter() - t0
    finally:
        await pool.aclose()
    return summarize(name, got, wall, mem, dict(pool.counters))


async def run_ray(n: int, episodes: int, latency: float, workers: int = 2) -> dict[str, Any]:
    from toolgym.collect.ray.driver import RayOptions, collect_ray
    from toolgym.collect.run import CollectOptions
    from toolgym.trajectories.store import iter_trajectories

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        opts = CollectOptions(
            env="swe",
            out=out,
            model=f"sim:{latency}",
            episodes=episodes,
            sandbox_backend="docker",
            backend_options={"replay": "scripted"},
            engine=EngineConfig(
                max_turns=30,
                max_live_episodes=n // workers,
                max_llm_calls=n // workers,
                max_sandboxes=n // workers,
                env_timeout_s=900,
            ),
        )
        with MemoryWatch() as mem:
            t0 = time.perf_counter()
            await collect_ray(opts, RayOptions(address="local", num_workers=workers))
            wall = time.perf_counter() - t0
        trajs = list(iter_trajectories(out))
    return summarize(f"toolgym, Ray {workers} workers", trajs, wall, mem, None)


def header(latency: float) -> None:
    print(
        f"SWE rollouts: shipped tasks, oracle replayed at {latency:g} s per model turn, Docker sandboxes; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start"
    )
    print(
        f"{'N':>3} {'path':<32} {'episodes':>8} {'failed':>6} {'solved':>6} {'ep/s':>6} {'wall s':>7} {'model':>6} "
        f"{'sandbox':>7} {'grading':>7} {'other':>6} {'grade p50':>9} {'p99':>6} {'RSS MB':>7} {'host MB':>8} {'created':>7} "
        f"{'reused':>6} {'load':>5}",
        flush=True,
    )


def row(n: int, r: dict[str, Any]) -> None:
    created = "–" if r["created"] is None else str(r["created"])
    reused = "–" if r["reused"] is None else str(r["reused"])
    print(
        f"{n:>3} {r['name']:<32} {r['episodes']:>8} {r['failed']:>6} {r['solved']:>6} {r['eps']:>6.2f} {r['wall']:>7.1f} "
        f"{r['model']:>6.0%} {r['sandbox']:>7.0%} {r['grading']:>7.0%} {r['other']:>6.0%} {r['g50']:>8.2f}s {r['g99']:>5.2f}s "
        f"{r['rss']:>7.0f} {r['host']:>8.0f} {created:>7} {reused:>6} {r['load']:>5.1f}",
        flush=True,
    )


async def main(args: argparse.Namespace) -> list[tuple[int, dict[str, Any]]]:
    sizes = [args.smoke] if args.smoke else args.concurrency
    rows: list[tuple[int, dict[str, Any]]] = []
    header(args.latency)
    for n in sizes:
        episodes = round(n * args.waves)
        runs = [
            run_local("toolgym (agent channel)", n, episodes, args.latency, exec_per_call=False),
            run_local("baseline: docker exec per call", n, episodes, args.latency, exec_per_call=True),
        ]
        if args.ray and n == sizes[0]:  # Ray starts actors and pools of its own: one row, at the first size
            runs.append(run_ray(n, episodes, args.latency))
        for coro in runs:  # one after the other, each row printed as it is measured
            rows.append((n, {**await coro, "load": os.getloadavg()[0]}))
            row(*rows[-1])
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 64])
    parser.add_argument(
        "--smoke", type=int, nargs="?", const=4, default=0, help="one small row (default 4 episodes at once)"
    )
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model turn")
    parser.add_argument(
        "--waves",
        type=float,
        default=2,
        help="episodes = waves x concurrency (reuse shows past the first wave)",
    )
    parser.add_argument(
        "--ray", action="store_true", help="add a row over 2 Ray workers (at the first concurrency)"
    )
    parser.add_argument("--json", help="also write the rows to this file")
    arguments = parser.parse_args()
    measured = asyncio.run(main(arguments))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps([{"concurrency": n, **r} for n, r in measured], indent=1))
