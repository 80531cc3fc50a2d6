"""What the pool's group rule costs: a sandbox is never handed to another episode of a
group it has served. Measured beside the baseline (the same episodes without a group label, so
the pool reuses whatever is idle), interleaved round by round on one backend and image.

Each round runs ``--groups`` groups of ``--n`` episodes, group after group; at most
``--concurrency`` episodes at once. An episode acquires a ``python`` sandbox (timed), runs one
command, holds it about ``--episode-ms`` (0.2 to 1.8 times it, drawn from a fixed seed: a model's
turns, of uneven length, so that a released sandbox's reset often finishes while a sibling runs)
and releases it (reset in the background, as in rollouts). With ``--concurrency`` below
``--n`` a group's later samples start while its earlier ones' sandboxes sit idle: the rule then
passes them over (another idle one, or a new sandbox), the case where it can cost anything. With
``--concurrency`` at least ``--n`` a group's samples run at once and never meet a sibling's sandbox;
with ``--warm`` at least ``--concurrency`` the pool always holds fresh ones to hand out instead.

Printed per way: acquire p50 / p90 / max, sandboxes created, reused, passed over for their group,
and the wall time of the rounds.

    python bench/sandbox_group_separation.py [--backend local|docker] [--groups 6] [--n 4] [--concurrency 2] [--rounds 3] [--episode-ms 500] [--warm 0]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from toolgym.core.sandbox import GROUP_LABEL
from toolgym.core.sandbox_profiles import MiB
from toolgym.sandboxes import open_backend

PROFILE = {
    "memory_bytes": 256 * MiB,
    "pids": 64,
    "workdir_bytes": 32 * MiB,
    "tmp_bytes": 16 * MiB,
    "home_bytes": 8 * MiB,
}


async def one_round(
    backend: Any, *, grouped: bool, groups: int, n: int, concurrency: int, round_no: int, hold_s: float
) -> list[float]:
    slots = asyncio.Semaphore(concurrency)
    waits: list[float] = []
    lengths = random.Random(round_no)

    async def episode(group: int, sample: int, hold: float) -> None:
        async with slots:
            labels = {GROUP_LABEL: f"bench/{round_no}/{group}"} if grouped else {}
            start = time.perf_counter()
            sb = await backend.acquire("python", episode_id=f"{group}-{sample}", labels=labels)
            waits.append(time.perf_counter() - start)
            try:
                await sb.run(["true"])
                await asyncio.sleep(hold)
            finally:
                await backend.release(sb)

    tasks = [
        asyncio.create_task(episode(g, k, hold_s * lengths.uniform(0.2, 1.8)))  # in group order
        for g in range(groups)
        for k in range(n)
    ]
    await asyncio.gather(*tasks)
    await backend.settle()
    return waits


async def run(
    backend_name: str, groups: int, n: int, concurrency: int, rounds: int, hold_s: float, warm: int
) -> None:
    ways = {"baseline (no group label)": False, "group rule": True}
    backends = {
        name: open_backend(
            backend_name, profiles={"python": PROFILE}, warm={"python": warm}, max_idle=max(concurrency, 2)
        )
        for name in ways
    }
    waits: dict[str, list[float]] = {name: [] for name in ways}
    walls: dict[str, float] = dict.fromkeys(ways, 0.0)
    try:
        for backend in backends.values():  # the pool starts with a sandbox per slot, kept or not
            await backend.prewarm("python", concurrency)
            backend.warm_targets["python"] = warm
        start_counters = {name: dict(b.counters) for name, b in backends.items()}
        for r in range(rounds):
            for name, grouped in ways.items():
                start = time.perf_counter()
                waits[name] += await one_round(
                    backends[name],
                    grouped=grouped,
                    groups=groups,
                    n=n,
                    concurrency=concurrency,
                    round_no=r,
                    hold_s=hold_s,
                )
                walls[name] += time.perf_counter() - start
        print(
            f"{backend_name}: {rounds} rounds of {groups} groups x {n} episodes of {hold_s * 1e3:g} ms, "
            f"at most {concurrency} at once, warm target {warm}"
        )
        print(
            f"{'way':28s} {'p50 ms':>8s} {'p90 ms':>8s} {'max ms':>8s} {'created':>8s} {'reused':>7s} "
            f"{'passed':>7s} {'wall s':>7s}"
        )
        for name in ways:
            xs = sorted(waits[name])
            c = {
                k: backends[name].counters[k] - start_counters[name].get(k, 0)
                for k in backends[name].counters
            }
            print(
                f"{name:28s} {statistics.median(xs) * 1e3:8.2f} {xs[int(0.9 * (len(xs) - 1))] * 1e3:8.2f} "
                f"{xs[-1] * 1e3:8.2f} {c['created']:8d} {c['reused']:7d} {c['kept_from_group']:7d} {walls[name]:7.1f}"
            )
    finally:
        for backend in backends.values():
            await backend.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="local")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episode-ms", type=float, default=500.0)
    parser.add_argument(
        "--warm", type=int, default=0, help="idle sandboxes the pool keeps ready (made in the background)"
    )
    args = parser.parse_args()
    asyncio.run(
        run(
            args.backend, args.groups, args.n, args.concurrency, args.rounds, args.episode_ms / 1e3, args.warm
        )
    )


if __name__ == "__main__":
    main()
