"""MiniWoB++: scripted-solver success over many seeds per task, and the cost of a browser step.

For every task with a scripted solver, ``--seeds`` instances (default 100) are played through the
rollout engine in Docker browser sandboxes, ``--concurrency`` at once. Printed per task: success
rate (raw reward > 0, as core.js computed it), mean turns, and the environment step time p50/p99
(one browser tool call plus the environment's read of the page), beside the tool call alone
(``browser_*`` inside the step) measured in the same run.

    python bench/miniwob_solvers.py                 # 16 tasks x 100 seeds
    python bench/miniwob_solvers.py --smoke         # 2 tasks x 5 seeds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

from toolgym.core.chat import ChatFormat
from toolgym.core.config import EngineConfig
from toolgym.core.engine import RolloutEngine, plan_episodes
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.policy import ScriptedPolicy
from toolgym.core.registry import get_registry
from toolgym.plugins.miniwob.tasks import task_list
from toolgym.sandboxes.docker.backend import DockerBackend


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


async def run(tasks: tuple[str, ...], seeds: int, concurrency: int) -> list[Any]:
    backend = DockerBackend(max_idle=concurrency)
    out: list[Any] = []
    engine = RolloutEngine(registry=get_registry(), policy=ScriptedPolicy(ChatFormat(load_tiny_tokenizer("qwen"))),
                           config=EngineConfig(max_live_episodes=concurrency, max_sandboxes=concurrency),
                           sandbox_backend=backend, env_kwargs={"tasks": ",".join(tasks)})
    done = 0

    def progress(t: Any) -> None:
        nonlocal done
        done += 1
        if done % 20 == 0 or done == len(tasks) * seeds:
            print(f"  {done}/{len(tasks) * seeds} episodes", file=sys.stderr, flush=True)

    engine.on_trajectory = lambda t: (out.append(t), progress(t))
    try:
        await engine.run(plan_episodes("miniwob", num_tasks=len(tasks) * seeds, group_size=1))
    finally:
        await backend.aclose()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tasks", default="solvable")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    tasks = task_list(args.tasks)
    if args.smoke:
        tasks, args.seeds = tasks[:2], 5
    start = time.perf_counter()
    trajectories = asyncio.run(run(tasks, args.seeds, args.concurrency))
    wall = time.perf_counter() - start
    by_task: dict[str, list[Any]] = defaultdict(list)
    errors = 0
    for t in trajectories:
        if t.status != "ok":
            errors += 1
            continue
        by_task[t.metadata["env_info"]["miniwob_task"]].append(t)
    print(f"\n{'task':24} {'success':>8} {'turns':>6} {'step p50':>9} {'step p99':>9} {'tool p50':>9} {'tool p99':>9}")
    steps_all, tools_all, wins_all, n_all = [], [], 0, 0
    for task in tasks:
        rows = by_task.get(task, [])
        steps = [s.env_s * 1e3 for t in rows for s in t.steps]
        tools = [c.duration_s * 1e3 for t in rows for s in t.steps for c in s.tool_calls]
        wins = sum(t.steps[-1].info.get("success", False) for t in rows if t.steps)
        steps_all += steps
        tools_all += tools
        wins_all += wins
        n_all += len(rows)
        rate = wins / len(rows) if rows else 0.0
        print(f"{task:24} {rate:8.1%} {statistics.mean(len(t.steps) for t in rows) if rows else 0:6.2f} "
              f"{pct(steps, 50):8.1f}ms {pct(steps, 99):8.1f}ms {pct(tools, 50):8.1f}ms {pct(tools, 99):8.1f}ms")
    print(f"{'all':24} {wins_all / max(n_all, 1):8.1%} {'':6} {pct(steps_all, 50):8.1f}ms {pct(steps_all, 99):8.1f}ms "
          f"{pct(tools_all, 50):8.1f}ms {pct(tools_all, 99):8.1f}ms")
    print(f"\n{n_all} episodes ({errors} errors) in {wall:.1f} s = {n_all / wall:.2f} episodes/s at concurrency "
          f"{args.concurrency}; step = the browser tool call + the environment's read of the page (tool = the call alone)")


if __name__ == "__main__":
    main()
