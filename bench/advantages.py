"""Benchmark: GRPO and GiGPO advantages on a 100k-row step table, beside a plain-loop baseline.

The baseline is a straightforward Python implementation (dicts of lists, one loop per row, the
shape most reference implementations take), run in the same process on the same data, so the
ratio stays meaningful on a busy machine. Both must agree; the largest difference is printed.

    .venv/bin/python bench/advantages.py [--rows 100000] [--repeats 5] [--similarity]

Synthetic batch: 256 tasks × 8 trajectories, episode lengths drawn around 49 steps (≈ 100k rows),
20 distinct anchor states per task, sparse terminal reward, 5 % invalid actions.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from toolgym.training.advantages import gigpo_advantages, grpo_advantages
from toolgym.training.advantages.reference import loop_normalize


def make_table(
    rows: int, seed: int, tasks: int = 256, group_size: int = 8, states: int = 20
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    n_ep = tasks * group_size
    mean_len = max(1, rows // n_ep)
    lengths = rng.integers(max(1, mean_len // 2), mean_len + mean_len // 2 + 1, n_ep)
    episode = np.repeat(np.arange(n_ep), lengths)
    n = episode.size
    task = episode // group_size
    step = np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    rewards = np.zeros(n)
    rewards[np.cumsum(lengths) - 1] = rng.integers(0, 2, n_ep)
    names = np.array([f"task-{t}" for t in range(tasks)], dtype=object)
    state_text = np.array(
        [
            f"You are in room {s % 7} of task {s // states}. Visible: item {s * 31 % 97}, door {s % 3}."
            for s in range(tasks * states)
        ],
        dtype=object,
    )
    anchors = state_text[task * states + rng.integers(0, states, n)]
    return {
        "episode_index": episode,
        "group_ids": names[task],
        "step_index": step,
        "step_rewards": rewards,
        "anchors": anchors,
        "valid": rng.random(n) > 0.05,
        "episode_rewards": np.bincount(episode, weights=rewards)[episode],
    }


# --- plain-loop baseline -------------------------------------------------------------------------


def loop_grpo(rewards: np.ndarray, groups: np.ndarray) -> list[float]:
    return loop_normalize(rewards.tolist(), groups.tolist(), std_norm=True)


def loop_gigpo(t: dict[str, Any], gamma: float = 0.95, penalty: float = 0.1) -> list[float]:
    ep, grp, step = t["episode_index"].tolist(), t["group_ids"].tolist(), t["step_index"].tolist()
    r, anchors, valid, ep_r = (
        t["step_rewards"].tolist(),
        t["anchors"].tolist(),
        t["valid"].tolist(),
        t["episode_rewards"].tolist(),
    )
    n = len(ep)
    rows_of: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        rows_of[ep[i]].append(i)
    returns = [0.0] * n
    first_rows = []
    for rows in rows_of.values():
        rows.sort(key=step.__getitem__)
        first_rows.append(rows[0])
        acc = 0.0
        for i in reversed(rows):
            acc = r[i] - (0.0 if valid[i] else penalty) + gamma * acc
            returns[i] = acc
    per_ep = loop_normalize([ep_r[i] for i in first_rows], [grp[i] for i in first_rows], std_norm=True)
    ep_adv = {ep[i]: a for i, a in zip(first_rows, per_ep, strict=True)}
    step_adv = loop_normalize(returns, [(grp[i], anchors[i]) for i in range(n)], std_norm=True)
    return [ep_adv[ep[i]] + step_adv[i] for i in range(n)]


# --- measurement ---------------------------------------------------------------------------------


def measure(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median wall time (s), peak traced memory (MiB) of one extra run, and the last result."""
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return statistics.median(times), peak, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--similarity", action="store_true", help="also time similarity-based step groups (slow)"
    )
    args = parser.parse_args()
    table = make_table(args.rows, args.seed)
    n = table["step_rewards"].size
    print(
        f"step table: {n} rows, {table['episode_index'].max() + 1} trajectories, "
        f"{len(set(table['group_ids'].tolist()))} groups; median of {args.repeats} runs; peak = tracemalloc"
    )
    cases = [
        (
            "GRPO  (rows, std norm)",
            lambda: grpo_advantages(table["episode_rewards"], table["group_ids"]),
            lambda: loop_grpo(table["episode_rewards"], table["group_ids"]),
        ),
        ("GiGPO (exact anchors)", lambda: gigpo_advantages(**table).combined, lambda: loop_gigpo(table)),
    ]
    print(
        f"{'estimator':<26}{'toolgym s':>11}{'loop s':>10}{'speed-up':>10}{'toolgym MiB':>13}{'loop MiB':>10}{'max |diff|':>12}"
    )
    for name, fast, slow in cases:
        t_fast, m_fast, a = measure(fast, args.repeats)
        t_slow, m_slow, b = measure(slow, max(1, args.repeats // 2))
        diff = float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        print(
            f"{name:<26}{t_fast:>11.4f}{t_slow:>10.4f}{t_slow / t_fast:>9.1f}x{m_fast:>13.1f}{m_slow:>10.1f}{diff:>12.2e}"
        )
    if args.similarity:
        t_exact, _, _ = measure(lambda: gigpo_advantages(**table), 1)
        t_sim, m_sim, _ = measure(lambda: gigpo_advantages(**table, similarity_threshold=0.9), 1)
        print(
            f"{'GiGPO (similarity 0.9)':<26}{t_sim:>11.4f}  vs exact {t_exact:.4f} s ({t_sim / t_exact:.0f}x), peak {m_sim:.1f} MiB"
        )


if __name__ == "__main__":
    main()
