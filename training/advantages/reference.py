"""The plain-loop definition of group normalisation that the vectorised estimators are checked
against: in tests (as the reference) and in ``bench/advantages.py`` (as the speed baseline)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence


def loop_normalize(
    values: Sequence[float], keys: Sequence[Hashable], std_norm: bool, eps: float = 1e-6
) -> list[float]:
    """One loop over the groups of equal ``keys``: each value minus its group's mean, divided by the
    group's sample std + ``eps`` when ``std_norm``; a group of one or of equal values gives 0."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        groups[k].append(i)
    out = [0.0] * len(values)
    for rows in groups.values():
        xs = [values[i] for i in rows]
        if len(xs) < 2 or max(xs) == min(xs):
            continue
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5
        for i in rows:
            out[i] = (values[i] - mean) / (std + eps) if std_norm else values[i] - mean
    return out
