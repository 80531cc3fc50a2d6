"""WebShop in the browser (``webshop-web``): scripted-solver success over shipped goals and the cost
of a browser step, beside the text ``webshop`` environment on the same goals in the same run.

The oracle (``plugins/webshop/oracle.py``) plays ``--goals`` goals of the ``test`` split in both
environments through the rollout engine (Docker browser sandboxes for ``webshop-web``,
``--concurrency`` at once). Printed per environment: success (a perfect purchase, score 1.0), mean
score, mean turns, and the environment step time p50/p99 (for ``webshop-web`` one browser tool call
plus the page read; the tool call alone beside it).

    python bench/webshop_web.py                 # 100 goals
    python bench/webshop_web.py --smoke         # 5 goals
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.sandboxes.docker.backend import DockerBackend


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


async def collect(env: str, goals: int, concurrency: int) -> tuple[list[Any], float]:
    backend = DockerBackend(max_idle=concurrency) if env == "webshop-web" else None
    out: list[Any] = []
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(ChatFormat(load_tiny_tokenizer("qwen"))),
        config=EngineConfig(max_live_episodes=concurrency, max_sandboxes=concurrency),
        sandbox_backend=backend,
        env_kwargs={"split": "test"},
        on_trajectory=out.append,
    )
    start = time.perf_counter()
    try:
        await engine.run(plan_episodes(env, num_tasks=goals, group_size=1))
    finally:
        if backend is not None:
            await backend.aclose()
    return out, time.perf_counter() - start


def report(env: str, rows: list[Any], wall: float) -> None:
    ok = [t for t in rows if t.status == "ok" and t.steps]
    wins = sum(bool(t.steps[-1].info.get("won")) for t in ok)
    scores = [float(t.steps[-1].info.get("task_score", 0.0)) for t in ok]
    steps = [s.env_s * 1e3 for t in ok for s in t.steps]
    tools = [c.duration_s * 1e3 for t in ok for s in t.steps for c in s.tool_calls]
    tool_text = f"{pct(tools, 50):8.1f}ms {pct(tools, 99):8.1f}ms" if tools else f"{'-':>10} {'-':>10}"
    print(
        f"{env:12} {len(rows):6d} {len(rows) - len(ok):6d} {wins / max(len(ok), 1):8.1%} "
        f"{statistics.mean(scores) if scores else 0:6.3f} {statistics.mean(len(t.steps) for t in ok) if ok else 0:6.2f} "
        f"{pct(steps, 50):8.1f}ms {pct(steps, 99):8.1f}ms {tool_text} {wall:7.1f}s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--goals", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.goals = 5
    results = {
        env: asyncio.run(collect(env, args.goals, args.concurrency)) for env in ("webshop", "webshop-web")
    }
    print(
        f"\n{'env':12} {'goals':>6} {'errors':>6} {'success':>8} {'score':>6} {'turns':>6} "
        f"{'step p50':>10} {'step p99':>10} {'tool p50':>10} {'tool p99':>10} {'wall':>8}"
    )
    for env, (rows, wall) in results.items():
        report(env, rows, wall)
    print(
        f"\nconcurrency {args.concurrency}; webshop (text) is the baseline; step = env.step time "
        "(webshop-web: the browser tool call + the environment's reads; tool = the call alone)"
    )


if __name__ == "__main__":
    main()
