"""Sandbox latency: warm tool-call round trip, acquire from the warm pool, cold create-to-ready.

Each figure is printed beside its baseline, measured in the same run on the same image:
``docker exec`` of the same command in the same container (round trip), and
``docker run --rm IMAGE true`` (cold start). Goals: round trip p50 ≤ 5 ms and ≥ 20× faster than
``docker exec``; acquire p50 ≤ 10 ms; cold create-to-ready p50 ≤ 1 s. "release to ready again" is the time a
released sandbox takes to come back to the pool (reset inside, checked from the host).

    python bench/sandbox_latency.py [--backend docker|local] [--calls 300] [--cold 10] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time

from toolgym.sandboxes import open_backend


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def line(name: str, samples: list[float], baseline: list[float] | None = None, unit: float = 1e3) -> None:
    p50, p99 = pct(samples, 50) * unit, pct(samples, 99) * unit
    text = f"{name:<34s} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms   (n={len(samples)})"
    if baseline:
        b50 = pct(baseline, 50) * unit
        text += f"   | baseline p50 {b50:8.2f} ms, p99 {pct(baseline, 99) * unit:8.2f} ms -> {b50 / p50:5.1f}x faster"
    print(text, flush=True)


def docker_cli(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run(["docker", *args], check=True, capture_output=True)
    return time.perf_counter() - start


async def main(backend_name: str, calls: int, cold: int, baseline_calls: int) -> None:
    backend = open_backend(backend_name, warm={"python": 2}, max_idle=4)
    try:
        await backend.prewarm("python", 2)
        sb = await backend.acquire("python", episode_id="bench")
        for _ in range(20):  # warm up the channel and the page cache
            await sb.run(["true"])
        round_trips = []
        for _ in range(calls):
            start = time.perf_counter()
            result = await sb.run(["true"])
            round_trips.append(time.perf_counter() - start)
            assert result.exit_code == 0
        py = await sb.python()
        await py.execute("0")
        py_trips = []
        for i in range(calls // 2):
            start = time.perf_counter()
            await py.execute(f"{i} + 1")
            py_trips.append(time.perf_counter() - start)
        exec_trips: list[float] = []
        if backend_name == "docker":
            container = sb.handle["container"]
            exec_trips = [docker_cli("exec", container, "true") for _ in range(baseline_calls)]
        await backend.release(sb)

        print(f"\n== {backend_name} backend ==")
        line("run(['true']) round trip", round_trips, exec_trips or None)
        line("python session execute('i + 1')", py_trips)
        if exec_trips:
            line("baseline: docker exec CONTAINER true", exec_trips)

        acquires = []
        for _ in range(30):
            await backend.settle()
            start = time.perf_counter()
            got = await backend.acquire("python")
            acquires.append(time.perf_counter() - start)
            await backend.release(got)
        line("acquire from the warm pool", acquires)

        recycles = []  # release -> reset, checked from the host, back in the idle list
        for _ in range(20):
            await backend.settle()
            got = await backend.acquire("python")
            await (await got.python()).execute("x = 1")
            start = time.perf_counter()
            await backend.release(got)
            await backend.settle()
            recycles.append(time.perf_counter() - start)
        line("release to ready again (reset)", recycles)

        unpooled = open_backend(backend_name, max_idle=0)  # no warm pool: every acquire creates
        try:
            await unpooled.release(await unpooled.acquire("python"))  # start-up sweep, image check
            colds = []
            for _ in range(cold):
                await unpooled.settle()
                start = time.perf_counter()
                fresh = await unpooled.acquire("python")
                colds.append(time.perf_counter() - start)
                await unpooled.release(fresh)
        finally:
            await unpooled.aclose()
        runs: list[float] = []
        if backend_name == "docker":
            image = backend.profile("python").image_for("python")
            runs = [docker_cli("run", "--rm", "--network", "none", image, "true") for _ in range(cold)]
        line("cold create-to-ready", colds, runs or None)
        if runs:
            line("baseline: docker run --rm IMAGE true", runs)
        print(f"mean round trip {statistics.mean(round_trips) * 1e3:.2f} ms; counters {backend.counters}")
    finally:
        await backend.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument("--baseline-calls", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="a few calls only (checks that it runs)")
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.cold, args.baseline_calls = 20, 2, 3
    asyncio.run(main(args.backend, args.calls, args.cold, args.baseline_calls))
