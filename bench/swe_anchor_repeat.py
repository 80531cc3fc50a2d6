"""Does GiGPO have anything to group on SWE? Anchor-state repeat rates of scripted+noisy rollouts.

GiGPO's step advantage compares actions taken from the same anchor state within a task's group;
it only helps where anchors recur and the episodes through a shared state end differently. The
SWE environment's anchor is a digest of the task, the repository diff and the last observation.
Here groups of ``--group`` rollouts per shipped task are played by the oracle with, per turn,
probability ``noise`` of a noisy turn instead (``plugins/swe/noise.py``: a view, a look around, a
search, or a stray edit), in Docker sandboxes, and the run reports per noise level:

- ``same-step``: share of steps whose anchor another rollout of the group has at the same step
  index (the same repository state recurring across rollouts);
- ``any-step``: GiGPO's own grouping (``stats.step_group_stats``: same anchor anywhere in the
  group) and the mean step-group size;
- ``mixed``: share of step groups of size > 1 whose episodes did not all end alike: the groups
  that give a non-zero step advantage under SWE's 0/1 reward;
- ``signal``: share of all steps that sit in such a mixed step group (the steps GiGPO's step
  advantage reaches at all); ``diverges``: mean step at which a rollout's anchor first matches no
  other rollout's at that step;
- success rate and steps per episode.

The baseline in the same run is noise 0 (the oracle alone: every rollout of a group identical, so
everything repeats and nothing is mixed).

    .venv/bin/python bench/swe_anchor_repeat.py [--noise 0 0.1 0.2 0.3] [--group 8] [--tasks 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Trajectory
from toolgym.plugins.swe.noise import noise_turn
from toolgym.sandboxes import open_backend
from toolgym.training.local.stats import step_group_stats


def same_step_repeat(trajs: Sequence[Trajectory]) -> float:
    """Share of steps whose (group, step index, anchor) is shared with another rollout."""
    keys = [(t.group_id, s.index, s.anchor) for t in trajs for s in t.steps]
    counts = Counter(keys)
    return sum(1 for k in keys if counts[k] > 1) / len(keys) if keys else 0.0


def signal_share(trajs: Sequence[Trajectory]) -> float:
    """Share of steps in a GiGPO step group (same group, same anchor) whose episodes ended with
    different rewards: the steps that get a non-zero step advantage under a 0/1 reward."""
    members: dict[tuple[str, str], set[float]] = defaultdict(set)
    keys = [(t.group_id, s.anchor) for t in trajs for s in t.steps]
    for t in trajs:
        for s in t.steps:
            members[(t.group_id, s.anchor)].add(round(t.reward, 9))
    return sum(1 for k in keys if len(members[k]) > 1) / len(keys) if keys else 0.0


def diverged_at(trajs: Sequence[Trajectory]) -> float:
    """Mean step index at which a rollout's anchor first differs from every other rollout's at that step."""
    by_group: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_group[t.group_id].append(t)
    firsts = []
    for members in by_group.values():
        for t in members:
            others = [o for o in members if o is not t]
            first = len(t.steps)
            for s in t.steps:
                if not any(s.index < len(o.steps) and o.steps[s.index].anchor == s.anchor for o in others):
                    first = s.index
                    break
            firsts.append(first)
    return sum(firsts) / len(firsts) if firsts else 0.0


async def level(
    noise: float, *, tasks: int, group: int, concurrency: int, backend: object, seed: int
) -> dict[str, float]:
    policy = ScriptedPolicy(
        ChatFormat(load_tiny_tokenizer("qwen")),
        noise=noise,
        noise_action=noise_turn if noise else None,
        seed=seed,
    )
    cfg = EngineConfig(max_turns=30, max_live_episodes=concurrency, max_sandboxes=concurrency, seed=seed)
    engine = RolloutEngine(registry=get_registry(), policy=policy, config=cfg, sandbox_backend=backend)  # type: ignore[arg-type]
    got: list[Trajectory] = []
    engine.on_trajectory = got.append
    t0 = time.perf_counter()
    await engine.run(plan_episodes("swe", num_tasks=tasks, group_size=group, seed=seed))
    wall = time.perf_counter() - t0
    ok = [t for t in got if t.status.value == "ok"]
    stats = step_group_stats(ok)
    return {
        "episodes": len(got),
        "failed": len(got) - len(ok),
        "success": sum(t.reward >= 1 for t in ok) / max(len(ok), 1),
        "steps": sum(len(t.steps) for t in ok) / max(len(ok), 1),
        "same_step": same_step_repeat(ok),
        "any_step": stats.get("repeat_rate", 0.0),
        "group_size": stats.get("mean_group_size", 0.0),
        "mixed": stats.get("mixed_outcome", 0.0),
        "signal": signal_share(ok),
        "diverge": diverged_at(ok),
        "wall": wall,
    }


async def main(args: argparse.Namespace) -> None:
    backend = open_backend(args.backend, max_idle=args.concurrency)
    rows = []
    try:
        for noise in args.noise:
            rows.append(
                (
                    noise,
                    await level(
                        noise,
                        tasks=args.tasks,
                        group=args.group,
                        concurrency=args.concurrency,
                        backend=backend,
                        seed=args.seed,
                    ),
                )
            )
            print(f"  noise {noise:.2f} done in {rows[-1][1]['wall']:.0f} s", file=sys.stderr, flush=True)
    finally:
        await backend.aclose()
    print(
        f"SWE anchor repeat rates: {args.tasks} shipped tasks x group {args.group}, {args.backend} sandboxes, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'noise/turn':>10} {'episodes':>8} {'success':>8} {'steps':>6} {'same-step':>10} {'any-step':>9} "
        f"{'grp size':>8} {'mixed':>6} {'signal':>7} {'diverges':>9}"
    )
    for noise, r in rows:
        tag = "  (baseline: oracle alone)" if noise == 0 else ""
        print(
            f"{noise:>10.2f} {r['episodes']:>8.0f} {r['success']:>8.1%} {r['steps']:>6.1f} {r['same_step']:>10.1%} "
            f"{r['any_step']:>9.1%} {r['group_size']:>8.2f} {r['mixed']:>6.1%} {r['signal']:>7.1%} {r['diverge']:>9.2f}{tag}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3])
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
