"""Benchmark: the built-in ALFWorld environment's steps per second and per-step latency.

Scripted (oracle) episodes over all six task types; every ``await env.step(...)`` is timed. Beside
it, measured in the same run on the same episodes (so ratios hold on a busy machine):

- an inadmissible step ("Nothing happens."): the floor of the Env wrapper (parse nothing, change
  nothing, rebuild no command list);
- computing the admissible-command list alone (the world's main per-step cost);
- the real alfworld/TextWorld engine (``alfworld-real``) playing the same tasks, exported as ALFWorld
  game files, with the same commands (when the ``alfworld`` extra is installed).

    .venv/bin/python bench/env_alfworld.py [--episodes 300] [--real-episodes 12]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable
from typing import Any

from toolgym.core.types import Action, ActionKind
from toolgym.plugins.alfworld.env import AlfworldEnv
from toolgym.plugins.alfworld.generator import generate
from toolgym.plugins.alfworld.tasks import TASK_TYPES

ALL = tuple(TASK_TYPES.values())


def command(text: str) -> Action:
    return Action(text, ActionKind.COMMAND, command=text)


def summary(name: str, samples_s: list[float]) -> dict[str, Any]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        "name": name,
        "n": len(ordered),
        "per_s": len(ordered) / sum(ordered),
        "p50_us": statistics.median(ordered) * 1e6,
        "p99_us": p99 * 1e6,
    }


class Clock:
    """Collects wall-clock samples (seconds) of the calls it times."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def time(self, call: Awaitable[Any]) -> Any:
        start = time.perf_counter()
        result = await call
        self.samples.append(time.perf_counter() - start)
        return result


async def builtin(episodes: int) -> tuple[Clock, Clock, Clock, Clock, list[list[str]]]:
    steps, noops, lists, resets = Clock(), Clock(), Clock(), Clock()
    scripts: list[list[str]] = []
    env = AlfworldEnv()
    for seed in range(episodes):
        await resets.time(env.reset(seed=seed))
        plan: list[str] = []
        while (text := await env.scripted_action()) is not None:
            await noops.time(env.step(command("fly to the moon")))
            assert env.world is not None
            world = env.world
            start = time.perf_counter()
            world.invalidate()  # force a rebuild, as after a state change
            world.admissible_commands()
            lists.samples.append(time.perf_counter() - start)
            plan.append(text)
            result = await steps.time(env.step(command(text)))
            if result.terminated:
                break
        assert env.won, f"seed {seed} not solved"
        scripts.append(plan)
    return steps, noops, lists, resets, scripts


async def real(episodes: int, scripts: list[list[str]]) -> tuple[Clock, Clock] | None:
    try:
        from toolgym.plugins.alfworld.export import write_games
        from toolgym.plugins.alfworld.real import RealAlfworldEnv
    except ImportError:
        return None
    steps, resets = Clock(), Clock()
    with tempfile.TemporaryDirectory() as root:
        try:
            paths = write_games(root, [generate("train", seed, ALL) for seed in range(episodes)])
        except ImportError:
            return None
        for seed, path in enumerate(paths):
            env = RealAlfworldEnv(game_files=str(path), expert="none")
            await resets.time(env.reset(seed=0))
            for text in scripts[seed]:
                await steps.time(env.step(command(text)))
            assert env.won, f"real engine did not reach the goal on seed {seed}"
            await env.close()
    return steps, resets


def show(row: dict[str, Any], base: dict[str, Any] | None = None) -> None:
    ratio = f"   {row['p50_us'] / base['p50_us']:6.1f}x the p50 of {base['name']}" if base else ""
    print(
        f"{row['name']:<40} n={row['n']:>6}  {row['per_s']:>10,.0f}/s  p50 {row['p50_us']:>9.1f} us"
        f"  p99 {row['p99_us']:>9.1f} us{ratio}"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--real-episodes", type=int, default=12)
    args = ap.parse_args()
    steps, noops, lists, resets, scripts = await builtin(args.episodes)
    step, noop = (
        summary("built-in step (scripted)", steps.samples),
        summary("baseline: inadmissible step", noops.samples),
    )
    listing = summary("baseline: admissible list alone", lists.samples)
    print(
        f"built-in ALFWorld, {args.episodes} scripted episodes (all six task types), {len(steps.samples)} steps\n"
    )
    show(noop)
    show(listing)
    show(step, noop)
    print(
        f"{'':<40} {'':>8}  {'':>12}  the step costs {step['p50_us'] / listing['p50_us']:.1f}x one admissible-list build"
    )
    show(summary("built-in reset", resets.samples))
    got = await real(min(args.real_episodes, args.episodes), scripts)
    if got is None:
        print("\nreal alfworld engine: not installed (pip install 'toolgym[alfworld]')")
        return
    real_steps, real_resets = got
    real_row = summary("real engine step (same commands)", real_steps.samples)
    print(
        f"\nreal alfworld/TextWorld engine, {min(args.real_episodes, args.episodes)} of the same tasks as game files\n"
    )
    show(real_row, step)
    show(summary("real engine reset (load game)", real_resets.samples))
    print(f"\nbuilt-in steps/s over real-engine steps/s: {step['per_s'] / real_row['per_s']:,.0f}x")


if __name__ == "__main__":
    asyncio.run(main())
