"""WebShop environment speed: steps per second and per-step latency over scripted episodes.

The oracle plays ``--episodes`` episodes of the built-in WebShop (shipped catalog, test split);
only ``env.step`` is timed. Baselines measured in the same run, on the same pages:
- a no-op step (an action that is not clickable: parse, check, re-send the unchanged page),
  the floor of any step on this machine;
- rendering alone (building a page from its view and joining its text).
Figures are per step kind (search, click) and overall, as p50 / p99 in microseconds and as a
ratio to the no-op step. Search results are cached (a group's episodes repeat their queries), so
the BM25 ranking of each search query is also timed uncached. The published package
(``web_agent_site``, which needs Java and a downloaded index) is reported when importable; it
cannot be installed here, so no figure for it is printed.

    python bench/env_webshop.py [--episodes 300] [--mode text] [--format plain]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import time

from toolgym.core.parsing.base import EnvActionParser
from toolgym.core.types import Action, ActionKind
from toolgym.plugins.webshop.env import WebShopEnv


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(episodes: int, mode: str, fmt: str) -> dict[str, list[float]]:
    env = WebShopEnv(split="test", observation_mode=mode, prompt_format=fmt)  # type: ignore[arg-type]
    parser = EnvActionParser(require_tags=fmt == "verl")
    noop = Action("click[nothing]", ActionKind.COMMAND, command="click[nothing]")
    times: dict[str, list[float]] = {"search": [], "click": [], "noop": [], "render": [], "bm25": []}
    for seed in range(episodes):
        await env.reset(seed=seed)
        session = env.session
        assert session is not None
        while True:
            text = await env.scripted_action()
            assert text is not None
            action = parser.parse(text)
            t0 = time.perf_counter()
            await env.step(noop)
            times["noop"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            session.render(session.view).text()
            times["render"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = await env.step(action)
            elapsed = time.perf_counter() - t0
            kind = "search" if (action.command or "").startswith("search") else "click"
            times[kind].append(elapsed)
            if kind == "search":
                query = " ".join(session.view.keywords)
                t0 = time.perf_counter()
                env.shop.search_index._rank(query, 50)
                times["bm25"].append(time.perf_counter() - t0)
            if result.terminated:
                break
    return times


def report(times: dict[str, list[float]]) -> None:
    noop50 = pct(times["noop"], 0.5)
    steps = times["search"] + times["click"]
    rows = [
        ("all steps", steps),
        ("search", times["search"]),
        ("click", times["click"]),
        ("BM25 ranking, uncached", times["bm25"]),
        ("baseline: no-op step", times["noop"]),
        ("baseline: render only", times["render"]),
    ]
    print(f"{'':24} {'n':>6} {'p50 µs':>9} {'p99 µs':>9} {'p50 / no-op':>12}")
    for name, values in rows:
        p50, p99 = pct(values, 0.5), pct(values, 0.99)
        print(f"{name:24} {len(values):6d} {p50 * 1e6:9.1f} {p99 * 1e6:9.1f} {p50 / noop50:12.2f}")
    total = sum(steps)
    print(
        f"throughput: {len(steps) / total:,.0f} steps/s of env.step (one core), "
        f"no-op steps: {len(times['noop']) / sum(times['noop']):,.0f} steps/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--mode", default="text", choices=["text", "text_rich", "html"])
    ap.add_argument("--format", default="plain", choices=["plain", "verl"])
    args = ap.parse_args()
    asyncio.run(measure(5, args.mode, args.format))  # warm the shop and caches
    times = asyncio.run(measure(args.episodes, args.mode, args.format))
    print(
        f"WebShop (built-in catalog, {args.episodes} scripted episodes, mode={args.mode}, format={args.format})"
    )
    report(times)
    if importlib.util.find_spec("web_agent_site") is None:
        print("published package web_agent_site: not installed, no comparison")
    else:
        print(
            "published package web_agent_site: installed, but its data and Lucene index are not; no comparison"
        )


if __name__ == "__main__":
    main()
