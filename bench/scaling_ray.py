"""Scaling over Ray workers: throughput with 1, 2 and 4 rollout actors against a simulated LLM
server with a fixed latency, and memory per live episode.

Workload: every episode makes TURNS tool-calling model calls; each model call waits LATENCY
seconds at the server (``toolgym.collect.ray.simllm``, SGLang's /generate over HTTP, a separate
process); each worker runs at most PER_WORKER episodes at once. So one worker is latency-bound at
PER_WORKER / (TURNS × LATENCY) episodes/s, and n workers ideally at n times that.

- throughput(n): episodes / (last finish − first start), leaving out the actors' start-up and the
  first wave of episodes (warm-up), i.e. steady state; the start-up is printed apart;
- scaling efficiency(n) = throughput(n) / (n × throughput(1));
- baseline measured in the same run: the same per-worker load on one plain in-process engine
  (no Ray), and the ideal PER_WORKER / (TURNS × LATENCY);
- each figure is the best of ``--repeats`` runs, which filters out bursts of other load on a
  shared machine (the load average is printed);
- memory per live episode: a worker's peak RSS minus its RSS after setup, divided by its peak of
  live episodes, on a separate run with MEMORY_LIVE episodes in one worker (RSS is the process's;
  the driver's own growth per in-flight episode is printed too);
- with ``--sandboxes N`` (needs Docker): memory of N idle python sandboxes and after a Python cell;
- with ``--remote-engine tcp://HOST:PORT``: the agent round trip over the attach channel beside the
  local UNIX socket's (the baseline).

    python bench/scaling_ray.py [--workers 1 2 4] [--per-worker 32] [--latency 0.5] [--turns 4]
                                [--sandboxes 8] [--remote-engine tcp://127.0.0.1:PORT]

Ray actors are processes: on a machine with fewer cores than workers they share cores (this
benchmark's load is mostly waiting, so it still scales; say so when quoting it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import CALL_TEXT, bench_registry, rss_mb
from toolgym import hookimpl
from toolgym.collect.run import CollectOptions, make_policy
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes

ROOT = Path(__file__).resolve().parent.parent


class Timeline:
    """Observer on the driver: when each episode started and finished (wall clock)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    @hookimpl
    def toolgym_trajectory_done(self, trajectory: Any) -> None:
        self.spans.append((trajectory.created_at - trajectory.timings.total_s, trajectory.created_at))

    def throughput(self, skip: int = 0) -> float:
        """Episodes/s of all but the ``skip`` first-started ones (the first wave, which pays for
        warming up: connections, template compilation), from the first kept start to the last end."""
        kept = sorted(self.spans)[skip:]
        return len(kept) / (max(e for _, e in kept) - kept[0][0])


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolgym.collect.ray.simllm",
            "--port",
            "0",
            "--latency",
            str(latency),
            "--text",
            CALL_TEXT,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise RuntimeError(f"the simulated LLM server did not start: {line!r}")
    return proc, line.split()[3]


def engine_config(live: int, turns: int) -> EngineConfig:
    return EngineConfig(
        max_live_episodes=live, max_llm_calls=live, max_turns=turns + 1, max_tokens_per_turn=128
    )


def options(out: Path, url: str, episodes: int, live: int, turns: int) -> CollectOptions:
    return CollectOptions(
        env="bench",
        out=out,
        model=url,
        backend="sglang",
        tokenizer="tiny",
        episodes=episodes,
        engine=engine_config(live, turns),
        sandbox_backend="none",
        env_kwargs={"turns": turns},
    )


async def plain_engine(url: str, episodes: int, live: int, turns: int) -> float:
    """Episodes/s of one in-process engine (no Ray) on the same workload."""
    cfg = engine_config(live, turns)
    policy = make_policy(url, backend="sglang", tokenizer="tiny", config=cfg)
    timeline = Timeline()
    engine = RolloutEngine(
        registry=bench_registry(),
        policy=policy,
        config=cfg,
        env_kwargs={"turns": turns},
        on_trajectory=lambda t: timeline.toolgym_trajectory_done(t),
    )
    await engine.run(plan_episodes("bench", num_tasks=episodes, group_size=1))
    await policy.backend.aclose()  # type: ignore[attr-defined]
    return timeline.throughput(skip=live)


def on_ray(url: str, workers: int, live: int, episodes: int, turns: int) -> dict[str, Any]:
    from toolgym.collect.ray import RayOptions, collect_ray

    registry = bench_registry()
    timeline = Timeline()
    registry.pm.register(timeline, name="timeline")
    with tempfile.TemporaryDirectory() as tmp:
        ray_opts = RayOptions(
            address="local",
            num_workers=workers,
            max_live_per_worker=live,
            registry="bench._common:bench_registry",
            env_vars={"PYTHONPATH": str(ROOT)},
        )
        rss0 = rss_mb()
        started = time.perf_counter()
        result = asyncio.run(
            collect_ray(options(Path(tmp), url, episodes, live, turns), ray_opts, registry=registry)
        )
        wall = time.perf_counter() - started
    assert result.written == episodes and result.failed == 0, f"{result.failed} episodes failed"
    assert len(timeline.spans) == episodes
    return {
        "throughput": timeline.throughput(skip=workers * live if episodes > workers * live else 0),
        "wall": wall,
        "workers": result.workers,
        "startup": wall - (max(e for _, e in timeline.spans) - min(s for s, _ in timeline.spans)),
        "driver_mb": rss_mb() - rss0,
        "max_in_flight": result.dispatch.max_in_flight,
    }


def cpu_ms_per_call(workers: list[dict[str, Any]]) -> float:
    """Worker CPU time per model call (turn), ms: what sizes episodes per core."""
    return 1000 * sum(w["cpu_s"] for w in workers) / max(1, sum(w["turns"] for w in workers))


def per_episode_mb(workers: list[dict[str, Any]]) -> float:
    return (
        sum((w["peak_rss_bytes"] - w["setup_rss_bytes"]) / w["peak_live"] for w in workers)
        / len(workers)
        / 2**20
    )


async def sandbox_memory(count: int) -> tuple[float, float]:
    """Mean MB per python sandbox: idle, and after a Python cell that imports json and builds a list."""
    from toolgym.sandboxes.docker.backend import DockerBackend

    backend = DockerBackend(max_idle=count)
    try:
        sbs = [await backend.acquire("python") for _ in range(count)]
        await asyncio.sleep(1.0)
        idle = [(await sb.stats())["memory_bytes"] or 0 for sb in sbs]
        for sb in sbs:
            await (await sb.python()).execute(
                "import json; data = [json.dumps({'i': i}) for i in range(20000)]"
            )
        busy = [(await sb.stats())["memory_bytes"] or 0 for sb in sbs]
        for sb in sbs:
            await backend.release(sb, broken=True)
    finally:
        await backend.aclose()
    return sum(idle) / count / 2**20, sum(busy) / count / 2**20


async def channel_round_trip(remote: str, image: str, calls: int = 300) -> tuple[float, float, float, float]:
    """Median ms of ``ping`` and of ``run("true")``: over the UNIX-socket channel (local engine) and
    over the attach channel (the engine at ``remote``), same image and profile."""
    import statistics

    from toolgym.sandboxes.docker.backend import DockerBackend
    from toolgym.sandboxes.remote.backend import RemoteDockerBackend

    out: list[float] = []
    for backend in (
        DockerBackend(profiles={"python": {"image": image}}),
        RemoteDockerBackend(host=remote, profiles={"python": {"image": image}}),
    ):
        try:
            sb = await backend.acquire("python")
            for run in (False, True):
                times = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await (sb.run("true") if run else sb.ping())
                    times.append(time.perf_counter() - t0)
                out.append(statistics.median(times) * 1000)
            await backend.release(sb, broken=True)
        finally:
            await backend.aclose()
    return out[0], out[1], out[2], out[3]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--per-worker", type=int, default=32, help="episodes each worker runs at once")
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per model call at the server")
    ap.add_argument("--turns", type=int, default=4, help="model calls per episode")
    ap.add_argument(
        "--waves", type=int, default=6, help="episodes per worker = waves × per-worker (the first is warm-up)"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="runs per worker count; the best counts (filters other load on a shared machine)",
    )
    ap.add_argument(
        "--memory-live", type=int, default=256, help="live episodes in the memory run (one worker)"
    )
    ap.add_argument(
        "--sandboxes", type=int, default=0, help="also measure memory of this many python sandboxes (Docker)"
    )
    ap.add_argument(
        "--remote-engine",
        default=None,
        help="tcp://HOST:PORT of a second Docker engine: compare the attach "
        "channel's round trip with the local UNIX socket's (the engine needs --channel-image)",
    )
    ap.add_argument(
        "--channel-image", default="toolgym/base:bookworm", help="image for the channel comparison"
    )
    args = ap.parse_args()
    import ray

    server, url = start_server(args.latency)
    try:
        ray.init(num_cpus=max(max(args.workers), 1), include_dashboard=False, logging_level=logging.WARNING)
        c, t, lat = args.per_worker, args.turns, args.latency
        ideal1 = c / (t * lat)
        plain = max(asyncio.run(plain_engine(url, c * args.waves, c, t)) for _ in range(args.repeats))
        print(
            f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} · workload: {t} model calls/episode × "
            f"{lat:g}s, {c} episodes at once per worker, {args.waves} waves, best of {args.repeats}"
        )
        print(
            f"baseline: ideal {ideal1:.1f} episodes/s per worker; plain in-process engine {plain:.1f} episodes/s "
            f"({plain / ideal1:.2f} of ideal)"
        )
        base = None
        for n in args.workers:
            runs = [on_ray(url, n, c, n * c * args.waves, t) for _ in range(args.repeats)]
            r = max(runs, key=lambda x: x["throughput"])
            base = base or r["throughput"] / n
            eff = r["throughput"] / (n * base)
            print(
                f"ray {n} worker(s): {r['throughput']:.1f} episodes/s = {r['throughput'] / (n * ideal1):.2f} of ideal, "
                f"scaling efficiency {eff:.2f} · start-up {r['startup']:.1f}s · in flight ≤ {r['max_in_flight']} · "
                f"worker CPU {cpu_ms_per_call(r['workers']):.2f} ms per model call"
                + (
                    f" · {n} workers on {os.cpu_count()} cores (oversubscribed)"
                    if n > (os.cpu_count() or 1)
                    else ""
                )
            )
        mem = on_ray(url, 1, args.memory_live, args.memory_live, t)
        w = mem["workers"][0]
        print(
            f"memory per live episode: {per_episode_mb(mem['workers']) * 1024:.0f} KB "
            f"({args.memory_live} live in one worker; worker RSS {w['setup_rss_bytes'] / 2**20:.0f} MB after setup, "
            f"{w['peak_rss_bytes'] / 2**20:.0f} MB at peak) · driver grew {mem['driver_mb']:.1f} MB"
        )
        if args.sandboxes:
            idle, busy = asyncio.run(sandbox_memory(args.sandboxes))
            print(
                f"memory per python sandbox ({args.sandboxes} measured): {idle:.0f} MB idle, {busy:.0f} MB after a Python cell"
            )
        if args.remote_engine:
            sock_ping, sock_run, att_ping, att_run = asyncio.run(
                channel_round_trip(args.remote_engine, args.channel_image)
            )
            print(
                f"agent round trip, median: UNIX socket (baseline) ping {sock_ping:.3f} ms, run('true') {sock_run:.2f} ms · "
                f"attach stream over TCP ping {att_ping:.3f} ms, run('true') {att_run:.2f} ms"
            )
    finally:
        server.terminate()
        server.wait(10)
        ray.shutdown()


if __name__ == "__main__":
    main()
