"""Engine efficiency: many concurrent episodes against a simulated LLM with a fixed latency.

Reports achieved / ideal throughput (ideal: every turn costs exactly the model latency, so
EPISODES×TURNS turns take TURNS×LATENCY seconds), the engine's CPU time per turn (process CPU
time over the run, divided by the turns), and peak RSS per live episode. The baseline measured
in the same run is the same workload with the LLM latency only (asyncio.sleep per turn, no
engine), which shows the floor set by the event loop itself on this machine.

CPU per turn is also measured for the reference path in the same run: the render path the fast one
is tested against (``ChatFormat.reference``: Jinja's own ``Template.render``, every tool schema
dumped to JSON afresh each turn, uncached pieces tokenized whole) and the tool path as it was (a
call's arguments validated by the parser and again by the tool, a timer armed for every step and
every tool call, even those that finish without waiting; see :func:`reference_path`). The two
alternate ``--repeat`` times each and the medians are printed side by side, with every run's figure
(process CPU time, so other load on the machine does not count, though it still slows the caches).
Wall-clock rows are the fast path's median run.

    python bench/engine_efficiency.py [--episodes 1000] [--turns 8] [--latency 2.0] [--repeat 3] [--processes 2]

``--processes N`` runs the same workload a second time split over N processes (an engine each,
``episodes / N`` live episodes, as ``toolgym collect --processes N`` splits a run) and prints both
rows: wall-clock throughput against ideal, CPU per turn summed over the processes, memory per live
episode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import CALL_TEXT, bench_registry, peak_rss_mb, rss_mb
from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core import tools
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.llm.testing import SimulatedBackend
from toolgym.core.rollout import episode
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tools import Tool


@contextlib.contextmanager
def reference_path(on: bool) -> Iterator[None]:
    """The engine as it was before its shortcuts, as the baseline: the reference render path, tool
    arguments validated twice (``Tool.check`` only validates, so ``Tool.call`` validates again), and
    ``asyncio.timeout`` around every environment step and tool call (no ``within``). The records
    are the same either way (``tests/core/test_render_fast_path.py``,
    ``tests/core/test_checked_arguments.py``)."""
    if not on:
        yield
        return

    async def with_timer(awaitable: Any, timeout_s: float | None) -> Any:
        async with asyncio.timeout(timeout_s):
            return await awaitable

    def validate_only(self: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
        self.validate(arguments)
        return arguments

    saved = (ChatFormat.reference, tools.within, episode.within, Tool.check)
    ChatFormat.reference, tools.within, episode.within = True, with_timer, with_timer
    Tool.check = validate_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        ChatFormat.reference, tools.within, episode.within, Tool.check = saved  # type: ignore[method-assign]


async def sleep_only(episodes: int, turns: int, latency: float) -> float:
    async def one() -> None:
        for _ in range(turns):
            await asyncio.sleep(latency)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(episodes)))
    return time.perf_counter() - start


async def run_engine(
    episodes: int, turns: int, latency: float, start_at: float | None = None
) -> dict[str, float]:
    """The workload through the engine; ``start_at`` (epoch seconds): begin then, after the warm-up
    (processes that run together start their clocks together)."""
    tokenizer = load_tiny_tokenizer("qwen")
    backend = SimulatedBackend(tokenizer=tokenizer, text=CALL_TEXT, latency_s=latency)
    cfg = EngineConfig(
        max_live_episodes=episodes, max_llm_calls=episodes, max_turns=turns + 1, max_tokens_per_turn=128
    )
    done = []
    engine = RolloutEngine(
        registry=bench_registry(),
        policy=ModelPolicy(backend, cfg),
        config=cfg,
        env_kwargs={"turns": turns},
        on_trajectory=done.append,
    )
    # warm up (template compilation, tokenizer) outside the measurement
    await RolloutEngine(
        registry=bench_registry(),
        policy=ModelPolicy(SimulatedBackend(tokenizer=tokenizer, text=CALL_TEXT, latency_s=0), cfg),
        config=cfg,
        env_kwargs={"turns": 2},
    ).run(plan_episodes("bench", num_tasks=4, group_size=1))
    gc.collect()
    if start_at is not None:
        await asyncio.sleep(max(0.0, start_at - time.time()))
    rss0 = rss_mb()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await engine.run(plan_episodes("bench", num_tasks=episodes, group_size=1))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    total_turns = sum(len(t.steps) for t in done)
    assert total_turns == episodes * turns and all(t.status.value == "ok" for t in done), (
        "every episode must run all its turns"
    )
    return {
        "wall": wall,
        "cpu": cpu,
        "turns": total_turns,
        "rss_per_episode_kb": (peak_rss_mb() - rss0) * 1024 / episodes,
    }


def _one_process(episodes: int, turns: int, latency: float, start_at: float, results: object) -> None:
    """One of N processes: wait for the common start, run its share, send its figures."""
    r = asyncio.run(run_engine(episodes, turns, latency, start_at))
    results.put({**r, "ended": time.time()})  # type: ignore[attr-defined]


def run_processes(n: int, episodes: int, turns: int, latency: float) -> dict[str, float]:
    """The workload split over ``n`` processes started together: wall from the first start to the
    last end, CPU summed."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start_at = time.time() + 15.0  # every process imported and warmed up before the clock starts
    shares = [episodes // n + (1 if k < episodes % n else 0) for k in range(n)]
    procs = [ctx.Process(target=_one_process, args=(m, turns, latency, start_at, results)) for m in shares]
    for p in procs:
        p.start()
    got = [results.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    return {
        "wall": max(g["ended"] for g in got) - start_at,
        "cpu": sum(g["cpu"] for g in got),
        "turns": sum(g["turns"] for g in got),
        "rss_per_episode_kb": sum(g["rss_per_episode_kb"] * m for g, m in zip(got, shares, strict=True))
        / episodes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per model call")
    ap.add_argument("--processes", type=int, default=1, help="also run the workload split over N processes")
    ap.add_argument(
        "--repeat", type=int, default=3, help="engine runs per render path (alternating; medians printed)"
    )
    args = ap.parse_args()
    ideal = args.turns * args.latency
    base = asyncio.run(sleep_only(args.episodes, args.turns, args.latency))
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(max(1, args.repeat)):
        for reference in (False, True):
            with reference_path(reference):
                runs[reference].append(asyncio.run(run_engine(args.episodes, args.turns, args.latency)))

    def cpu_ms(rows: list[dict[str, float]]) -> list[float]:
        return [row["cpu"] / row["turns"] * 1000 for row in rows]

    fast_ms, ref_ms = cpu_ms(runs[False]), cpu_ms(runs[True])
    r = runs[False][0]  # the first run: peak RSS grows only while it is new
    wall = statistics.median(row["wall"] for row in runs[False])
    ideal_tput = r["turns"] / ideal
    print(
        f"workload: {args.episodes} concurrent episodes × {args.turns} turns, model latency {args.latency:g}s per call"
    )
    print(f"baseline (sleep only, no engine): {base:.2f}s wall = {ideal / base:.3f} of ideal")
    print(
        f"engine: {wall:.2f}s wall (median), {r['turns'] / wall:.0f} turns/s vs ideal {ideal_tput:.0f} turns/s "
        f"→ achieved/ideal = {ideal / wall:.3f} (goal ≥ 0.9)"
    )
    print(
        f"engine CPU per turn: {statistics.median(fast_ms):.3f} ms (runs {', '.join(f'{x:.3f}' for x in fast_ms)}) "
        f"vs reference path {statistics.median(ref_ms):.3f} ms (runs {', '.join(f'{x:.3f}' for x in ref_ms)}) "
        f"→ {statistics.median(ref_ms) / statistics.median(fast_ms):.2f}× less (goal ≤ 0.15 ms)"
    )
    print(f"peak RSS per live episode: {r['rss_per_episode_kb']:.1f} KB (first run)")
    if args.processes > 1:
        m = run_processes(args.processes, args.episodes, args.turns, args.latency)
        print(
            f"{args.processes} processes: {m['wall']:.2f}s wall, {m['turns'] / m['wall']:.0f} turns/s "
            f"→ achieved/ideal = {ideal / m['wall']:.3f} (one process: {ideal / wall:.3f}); "
            f"CPU per turn {m['cpu'] / m['turns'] * 1000:.3f} ms (summed); "
            f"RSS per live episode {m['rss_per_episode_kb']:.1f} KB"
        )


if __name__ == "__main__":
    main()
