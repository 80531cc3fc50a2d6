"""Sandbox throughput: E concurrent episodes × C tool calls each (default 64 × 20).

Every episode acquires a sandbox from a warm pool, makes C calls (``run`` of a short command
and a Python-session cell, alternating), and releases it. Printed: calls/s over the whole run
and the p50 / p99 latency of one call, beside a baseline from the same run: the same episodes
making their calls with ``docker exec`` (the Docker API's exec create + start, as an SDK user
would), fewer calls per episode so that it finishes in reasonable time.

    python bench/sandbox_throughput.py [--backend docker|local] [--episodes 64] [--calls 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from toolgym.sandboxes import open_backend


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def main(backend_name: str, episodes: int, calls: int, baseline_calls: int) -> None:
    backend = open_backend(backend_name, max_idle=episodes, create_concurrency=8)
    try:
        started = time.perf_counter()
        await backend.prewarm("python", episodes, timeout_s=600)
        print(f"prewarmed {episodes} sandboxes in {time.perf_counter() - started:.1f} s", flush=True)
        backend.warm_targets["python"] = 0  # measure calls, not refills running beside them
        latencies: list[float] = []

        async def episode(i: int) -> None:
            sb = await backend.acquire("python", episode_id=f"bench-{i}")
            py = await sb.python()
            for k in range(calls):
                start = time.perf_counter()
                if k % 2:
                    r = await py.execute(f"{k} * {i}")
                    assert r.value == str(k * i)
                else:
                    res = await sb.run(["echo", str(k)])
                    assert res.stdout == f"{k}\n"
                latencies.append(time.perf_counter() - start)
            await backend.release(sb)

        start = time.perf_counter()
        await asyncio.gather(*(episode(i) for i in range(episodes)))
        wall = time.perf_counter() - start
        rate = len(latencies) / wall
        print(f"\n== {backend_name}: {episodes} concurrent episodes x {calls} calls ==")
        print(
            f"toolgym sandboxes  {rate:8.1f} calls/s   p50 {pct(latencies, 50) * 1e3:7.2f} ms   "
            f"p99 {pct(latencies, 99) * 1e3:7.2f} ms   ({len(latencies)} calls in {wall:.2f} s)",
            flush=True,
        )

        if backend_name == "docker" and baseline_calls:
            from toolgym.sandboxes.docker import engine

            api = engine.api()
            await backend.settle()
            held = [await backend.acquire("python") for _ in range(episodes)]
            base: list[float] = []

            def one_exec(container: str) -> None:
                t0 = time.perf_counter()
                exec_id = api.exec_create(container, ["echo", "x"], user="1000:1000")
                api.exec_start(exec_id)
                base.append(time.perf_counter() - t0)

            async def baseline_episode(container: str) -> None:
                for _ in range(baseline_calls):
                    await engine.call(one_exec, container)

            start = time.perf_counter()
            await asyncio.gather(*(baseline_episode(sb.handle["container"]) for sb in held))
            bwall = time.perf_counter() - start
            print(
                f"baseline exec      {len(base) / bwall:8.1f} calls/s   p50 {pct(base, 50) * 1e3:7.2f} ms   "
                f"p99 {pct(base, 99) * 1e3:7.2f} ms   ({len(base)} calls in {bwall:.2f} s)"
                f"  -> {rate / (len(base) / bwall):.1f}x the calls/s",
                flush=True,
            )
            for sb in held:
                await backend.release(sb)
    finally:
        await backend.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--baseline-calls", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.backend, args.episodes, args.calls, args.baseline_calls))
