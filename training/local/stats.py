"""Step-group statistics of a batch of rollouts: what GiGPO's step-level advantage has to work with.

GiGPO (Feng et al., 2025) groups the steps of a task's episodes by *anchor state* (the same
environment state seen again, in the same episode or another of the group) and compares actions
within each such step group. It can only help where anchors repeat. The paper reports how step
groups are distributed by size; these figures are the same, computed from ``Step.anchor``:

- ``steps``: steps in the batch; ``step_groups``: distinct (task group, anchor) pairs;
- ``repeat_rate``: share of steps whose anchor occurs more than once in its task group (the
  steps that receive a non-trivial step advantage);
- ``mean_group_size``: steps per step group; ``size_1``, ``size_2_4``, ``size_5_9``, ``size_10p``:
  share of step groups of each size (the paper's buckets are similar);
- ``mixed_outcome``: share of step groups of size > 1 whose steps' episodes did not all end alike
  (only those carry a non-zero step advantage under a success-only reward).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from toolgym.core.trajectory import Trajectory
from toolgym.training.advantages import step_table

BUCKETS = (("size_1", 1, 1), ("size_2_4", 2, 4), ("size_5_9", 5, 9), ("size_10p", 10, 10**9))


def step_group_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The figures of the module docstring for ``trajectories`` (empty when they have no steps)."""
    table = step_table(trajectories)
    n = len(table)
    if n == 0:
        return {}
    keys = list(zip(table.group_ids.tolist(), table.anchors.tolist(), strict=True))
    sizes = Counter(keys)
    rewards: dict[tuple[object, object], set[float]] = defaultdict(set)
    for key, reward in zip(keys, table.episode_rewards.tolist(), strict=True):
        rewards[key].add(round(float(reward), 9))
    groups = len(sizes)
    out = {
        "steps": float(n),
        "step_groups": float(groups),
        "repeat_rate": sum(1 for k in keys if sizes[k] > 1) / n,
        "mean_group_size": n / groups,
    }
    for name, lo, hi in BUCKETS:
        out[name] = sum(1 for s in sizes.values() if lo <= s <= hi) / groups
    multi = [k for k, s in sizes.items() if s > 1]
    out["mixed_outcome"] = sum(1 for k in multi if len(rewards[k]) > 1) / len(multi) if multi else 0.0
    return out
