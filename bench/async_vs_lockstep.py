"""Async rollouts vs a turn-synchronous (lock-step) batch loop on a long-tailed workload.

Both run the same episodes with the same environment, token assembly and simulated model; model
latency per call is drawn from a heavy-tailed (log-normal) distribution and episodes have
different lengths (1 to TURNS turns, from the seed), as in real agent RL. The lock-step loop
processes a batch of episodes turn by turn: every turn waits for the slowest call of the batch,
and a new batch starts only when the whole batch is done. The engine runs each episode as its own
coroutine with the same concurrency limit. Reported: wall time of each and the speed-up.

    python bench/async_vs_lockstep.py [--episodes 256] [--concurrency 64] [--turns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import CALL_TEXT, bench_registry
from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.llm.testing import SimulatedBackend
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.tokens.assembly import TokenAssembler


def latency_fn(median: float, sigma: float):
    import math

    mu = math.log(median)
    return lambda rng: rng.lognormvariate(mu, sigma)


async def run_async(policy: ModelPolicy, cfg: EngineConfig, episodes: int, turns: int) -> float:
    engine = RolloutEngine(
        registry=bench_registry(), policy=policy, config=cfg, env_kwargs={"turns": turns, "vary": True}
    )
    start = time.perf_counter()
    stats = await engine.run(plan_episodes("bench", num_tasks=episodes, group_size=1))
    assert stats.failed == 0
    return time.perf_counter() - start


async def run_lockstep(
    policy: ModelPolicy, cfg: EngineConfig, episodes: int, turns: int, batch: int
) -> float:
    """The classic batch loop: reset a batch, then for each turn generate for all live episodes
    at once (gather), step them all, repeat until the batch is done."""
    registry = bench_registry()
    parser = registry.parser("hermes")
    spec = registry.env("bench")
    requests = plan_episodes("bench", num_tasks=episodes, group_size=1)
    start = time.perf_counter()
    for b in range(0, len(requests), batch):
        live = []
        for req in requests[b : b + batch]:
            env = spec.make(turns=turns, vary=True)
            env.bind(EpisodeContext(registry=registry))
            messages, _ = await env.reset(seed=req.seed)
            asm = TokenAssembler(policy.chat, [t.schema for t in env.tools])
            asm.start(messages)
            live.append((env, asm))
        turn = 0
        while live:
            sampling = cfg.sampling.params(max_new_tokens=cfg.max_tokens_per_turn, seed=turn)
            results = await asyncio.gather(
                *(policy.generate(asm.prompt_ids, sampling, "") for _, asm in live)
            )
            still = []
            for (env, asm), (result, _) in zip(live, results, strict=True):
                completion = asm.add_completion(result)
                outcome = await env.step(parser.parse(completion.text, {t.name: t for t in env.tools}))
                if not (outcome.terminated or outcome.truncated):
                    asm.add_messages(outcome.observation)  # type: ignore[arg-type]
                    still.append((env, asm))
            live = still
            turn += 1
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--median", type=float, default=0.2, help="median model latency (s)")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma (tail heaviness)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tokenizer = load_tiny_tokenizer("qwen")
    cfg = EngineConfig(
        max_live_episodes=args.concurrency, max_llm_calls=args.concurrency, max_turns=args.turns + 1
    )

    def policy() -> ModelPolicy:
        return ModelPolicy(
            SimulatedBackend(
                tokenizer=tokenizer,
                text=CALL_TEXT,
                latency_fn=latency_fn(args.median, args.sigma),
                seed=args.seed,
            ),
            cfg,
        )

    lock = asyncio.run(run_lockstep(policy(), cfg, args.episodes, args.turns, args.concurrency))
    asyn = asyncio.run(run_async(policy(), cfg, args.episodes, args.turns))
    rng = random.Random(args.seed)
    draws = sorted(latency_fn(args.median, args.sigma)(rng) for _ in range(10000))
    print(
        f"workload: {args.episodes} episodes of 1–{args.turns} turns, {args.concurrency} at once; "
        f"latency log-normal, median {args.median:g}s, p99 {draws[9899]:.2f}s"
    )
    print(f"lock-step batch loop (baseline): {lock:.2f}s")
    print(f"async engine: {asyn:.2f}s")
    print(f"speed-up: {lock / asyn:.2f}× (goal ≥ 2×; published async rollouts: 1.7–2.1×)")


if __name__ == "__main__":
    main()
