"""The statistics behind the results page's comparisons: paired differences between estimators with a
bootstrap interval, and the area under a held-out learning curve. Pure functions on plain numbers;
``bench/results_page.py`` reads the runs and renders the tables.

A difference is *paired* when both sides were measured on the same units: the same training seed
(same task order, same held-out tasks) and, where an evaluation kept its per-task outcomes, the same
task. A paired bootstrap draws one set of seeds (and of tasks within each seed) and uses it for both
sides, so what the two share (an easy seed, an easy task) cancels in the difference; an unpaired one
draws each side on its own. The interval is the percentile interval of the resampled mean difference,
from a fixed seed, so a page re-derives byte for byte. With three seeds, a seeds-only interval is
close to the range of the per-seed differences and understates the uncertainty of a new seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

BOOTSTRAP_SEED = 47
"""The seed of every interval on the page (numpy's ``RandomState``, whose streams are frozen across
numpy versions): the same records give the same bounds on any machine."""
RESAMPLES = 10_000
CHUNK = 1_000  # resamples drawn at a time: bounds the (resamples x seeds x tasks) index arrays


@dataclass(frozen=True)
class Difference:
    """A − B: the mean over seeds of the per-seed differences, with its bootstrap interval."""

    mean: float
    low: float
    high: float
    per_seed: tuple[float, ...]
    """Each seed's difference of the means over its tasks (the order of the seeds given)."""
    tasks: int
    """Tasks resampled within each seed: 1 where the records hold only each run's aggregate."""


def paired_bootstrap(
    a: Sequence[Sequence[float]] | np.ndarray,
    b: Sequence[Sequence[float]] | np.ndarray,
    *,
    paired: bool = True,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> Difference:
    """The mean difference ``a − b`` and its ``level`` percentile interval, resampling seeds and, within
    each seed, tasks. ``a[i][t]`` is estimator A's outcome (success 0/1, or a rate) on seed ``i``, task
    ``t``, and ``b[i][t]`` B's on the same seed and task; one number per seed (``[[rate], ...]``) is a
    seeds-only bootstrap. ``paired=False`` resamples each side on its own (for comparison: on outcomes
    that go together, the paired interval is the narrower one)."""
    left, right = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if left.ndim != 2 or left.shape != right.shape or left.size == 0:
        raise ValueError(
            f"paired_bootstrap takes two equal seeds x tasks tables, got shapes {left.shape} and {right.shape}"
        )
    seeds, tasks = left.shape
    per_seed = left.mean(axis=1) - right.mean(axis=1)
    rng = np.random.RandomState(seed)

    def picks(n: int) -> tuple[np.ndarray, np.ndarray]:  # n draws of seeds, and of tasks within each
        return rng.randint(0, seeds, size=(n, seeds)), rng.randint(0, tasks, size=(n, seeds, tasks))

    def mean_of(table: np.ndarray, drawn: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return table[drawn[0][:, :, None], drawn[1]].mean(axis=(1, 2))

    stats = []
    for start in range(0, resamples, CHUNK):
        n = min(CHUNK, resamples - start)
        if paired:
            drawn = picks(n)
            stats.append(mean_of(left, drawn) - mean_of(right, drawn))
        else:
            stats.append(mean_of(left, picks(n)) - mean_of(right, picks(n)))
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(np.concatenate(stats), [tail, 100 - tail])
    return Difference(float(per_seed.mean()), float(low), float(high), tuple(map(float, per_seed)), tasks)


def curve_auc(points: Sequence[tuple[int, float]]) -> float:
    """The area under a held-out curve ``[(step, success), ...]`` divided by the steps it spans
    (trapezoid rule): the curve's mean success, so a flat curve at 0.3 gives 0.3 whatever its length.
    One point gives its value; none gives NaN."""
    pts = sorted(points)
    if not pts:
        return float("nan")
    if len(pts) == 1:
        return float(pts[0][1])
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in pairwise(pts))
    return area / (pts[-1][0] - pts[0][0])
