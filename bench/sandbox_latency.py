"""Sandbox latency: warm tool-call round trip, acquire from the warm pool, cold create-to-ready.

Each figure is printed beside its baseline, measured in the same run on the same image:
``docker exec`` of the same command in the same container (round trip), and
``docker run --rm IMAGE true`` (cold start). Goals: round trip p50 ≤ 5 ms and ≥ 20× faster than
``docker exec``; acquire p50 ≤ 10 ms; cold create-to-ready p50 ≤ 1 s.

"release → ready" is the time a released sandbox takes to come back to the pool: the agent's
reset, the host's check from outside, and the next episode's interpreter forked or started and
answering (``prestart``). It and "acquire" are measured in one loop, episode by episode in turn, on
three pools, so the columns share the load of the moment: the current code (the ``python``
profile: interpreters forked from the zygote), the same code **without the zygote** (each
episode's interpreter started anew, ``python_zygote=False``), and the **old path** (the agent's
files as of ``--baseline-rev``, staged from git, with the pool's old acquire: a ping every time and
the holder file rewritten through a truncation). Each row also gives the phases of release → ready.
"acquire after idle" is an acquire of a sandbox idle past ``ping_fresh_s`` (pinged).

    python bench/sandbox_latency.py [--backend docker|local] [--calls 300] [--cold 10] [--recycles 40]
        [--baseline-rev REV] [--only-recycle] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from toolgym.sandboxes import lifecycle, open_backend
from toolgym.sandboxes.agent import AGENT_FILES
from toolgym.sandboxes.pool import PooledBackend

BASELINE_REV = "57a3668"
"""The last commit whose interpreter imported ``ast``, ``socket``, ``typing``, ... at start-up,
whose agent answered a ping in a new thread, and whose pool pinged on every acquire."""


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


def columns_line(name: str, columns: dict[str, list[float]], unit: float = 1e3) -> None:
    """One row: p50 and p90 of each column, and how many times the first column's p50 the
    others' are."""
    first = pct(next(iter(columns.values())), 50)
    cells = []
    for i, (column, samples) in enumerate(columns.items()):
        cell = f"{column} p50 {pct(samples, 50) * unit:7.2f} p90 {pct(samples, 90) * unit:7.2f}"
        if i:
            cell += f" ({pct(samples, 50) / first:4.1f}x)"
        cells.append(cell)
    print(f"{name:<24s} " + " | ".join(cells) + " ms", flush=True)


def docker_cli(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run(["docker", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def stage_agent(rev: str) -> Path:
    """The agent's files as of ``rev``, where every sandbox user can read them."""
    root = Path(tempfile.mkdtemp(prefix=f"agent-{rev}-", dir=lifecycle.state_root()))
    root.chmod(0o755)
    for name in AGENT_FILES:
        shown = subprocess.run(["git", "show", f"{rev}:sandboxes/agent/{name}"], capture_output=True)
        if shown.returncode:  # a file added since
            continue
        (root / name).write_bytes(shown.stdout)
        (root / name).chmod(0o644)
    return root


def old_note_holder(self: PooledBackend, sandbox: Any, episode_id: str, labels: Any) -> None:
    """The holder file as the old pool wrote it (truncated, then written)."""
    try:
        path = lifecycle.state_root() / sandbox.id / "holder.json"
        path.write_text(json.dumps({"episode": episode_id, "labels": dict(labels), "since": time.time()}))
    except OSError:
        pass


def timed(phases: dict[str, list[float]], name: str, call: Callable[..., Awaitable[Any]]) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            phases.setdefault(name, []).append(time.perf_counter() - start)

    return wrapper


COLUMNS = ("zygote", "no zygote", "old path")


async def recycle_pair(backend_name: str, n: int, idle_n: int, rev: str) -> None:
    """release → ready and acquire in each of ``COLUMNS``, episode by episode in turn (see the
    module docstring)."""
    columns: dict[str, dict[str, list[float]]] = {}
    backends: dict[str, PooledBackend] = {}
    old_agent = stage_agent(rev)
    try:
        for column in COLUMNS:
            zygote = {"python": {"python_zygote": False}} if column != "zygote" else None
            backend = open_backend(backend_name, max_idle=2, profiles=zygote)
            phases: dict[str, list[float]] = {}
            if column == "old path":
                backend.ping_fresh_s = 0.0
                backend._note_holder = old_note_holder.__get__(backend)  # type: ignore[method-assign]
                lifecycle._staged = old_agent  # sandboxes made now mount the old agent
            try:
                await backend.prewarm("python", 1)
            finally:
                lifecycle._staged = None
            backend.warm_targets["python"] = 0  # no refills: every sandbox was made above
            backend._host_check = timed(phases, "host check", backend._host_check)  # type: ignore[method-assign]
            columns[column], backends[column] = phases, backend

        async def one(column: str, *, idle_s: float = 0.0) -> None:
            backend, phases = backends[column], columns[column]
            await backend.settle()
            if idle_s:
                await asyncio.sleep(idle_s)
            start = time.perf_counter()
            sb = await backend.acquire("python", episode_id="bench")
            phases.setdefault("acquire after idle" if idle_s else "acquire", []).append(
                time.perf_counter() - start
            )
            sb.reset = timed(phases, "agent reset", sb.reset)  # type: ignore[method-assign]
            sb.prestart = timed(phases, "prestart (interpreter)", sb.prestart)  # type: ignore[method-assign]
            result = await (await sb.python()).execute("x = 1")
            assert result.error is None, result.error
            start = time.perf_counter()
            await backend.release(sb)
            await backend.settle()
            if not idle_s:
                phases.setdefault("release -> ready", []).append(time.perf_counter() - start)
            del sb.reset, sb.prestart

        for column in backends:  # one round each before measuring
            await one(column)
        for phases in columns.values():
            phases.clear()
        for _ in range(n):
            for column in backends:
                await one(column)
        for _ in range(idle_n):
            for column in backends:
                await one(column, idle_s=backends["zygote"].ping_fresh_s + 0.2)
        print(
            f"\n== release -> ready and acquire ({backend_name}; no zygote: this code, each interpreter "
            f"started anew; old path: the agent of {rev}; ms, the others' p50 as a multiple of the first) =="
        )
        for row in (
            "release -> ready",
            "acquire",
            "acquire after idle",
            "agent reset",
            "host check",
            "prestart (interpreter)",
        ):
            if all(columns[c].get(row) for c in COLUMNS):
                columns_line(row, {c: columns[c][row] for c in COLUMNS})
        made = {c: b.counters["created"] for c, b in backends.items()}
        print(f"sandboxes made: {made} (1 each: every episode reused the same one)")
    finally:
        lifecycle._staged = None
        for backend in backends.values():
            await backend.aclose()
        for name in AGENT_FILES:
            (old_agent / name).unlink(missing_ok=True)
        old_agent.rmdir()


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
    parser.add_argument("--recycles", type=int, default=40, help="episodes per column for release -> ready")
    parser.add_argument("--idle-acquires", type=int, default=10, help="acquires after idle, per column")
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision of the old path's agent")
    parser.add_argument("--only-recycle", action="store_true", help="only release -> ready and acquire")
    parser.add_argument("--smoke", action="store_true", help="a few calls only (checks that it runs)")
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.cold, args.baseline_calls, args.recycles, args.idle_acquires = 20, 2, 3, 3, 1
    if not args.only_recycle:
        asyncio.run(main(args.backend, args.calls, args.cold, args.baseline_calls))
    asyncio.run(recycle_pair(args.backend, args.recycles, args.idle_acquires, args.baseline_rev))
