"""How far ARPO's branching follows the entropy: the per-bin profile, the vocabulary rescaling and
the top-k truncation of the published measure (``toolgym.core.rollout.arpo``)."""

from __future__ import annotations

import math
import random

import pytest

from toolgym.core.rollout.arpo import (
    ArpoConfig,
    BranchBudget,
    arpo_entropy,
    branching_profile,
    fork_probability,
    rescale_to_vocab,
)


def test_profile_bins_by_quantile_with_the_rule_s_prediction() -> None:
    decisions = [(-3.0, 0), (-1.0, 0), (0.0, 1), (0.0, 0), (1.0, 1), (4.0, 1)]
    prof = branching_profile(decisions, tau=0.5, beta=0.2, bins=3)
    assert [b.n for b in prof.bins] == [2, 2, 2]
    assert [(b.lo, b.hi) for b in prof.bins] == [(-3.0, -1.0), (0.0, 0.0), (1.0, 4.0)]
    assert prof.bins[0].predicted == pytest.approx((0.0 + 0.3) / 2)  # clip(0.5 - 0.6) = 0
    assert prof.bins[2].predicted == pytest.approx((0.7 + 1.0) / 2)  # clip(0.5 + 0.8) = 1
    assert [b.measured for b in prof.bins] == [0.0, 0.5, 1.0]
    assert prof.rate == pytest.approx(0.5)
    assert prof.corr > 0.7


def test_fork_probability_counts_at_least_one_of_b_minus_1_draws() -> None:
    assert fork_probability(0.5, 0.5, 0.2, branch_factor=2) == pytest.approx(0.6)
    assert fork_probability(0.5, 0.5, 0.2, branch_factor=3) == pytest.approx(1 - 0.4**2)


@pytest.mark.parametrize(("spread", "entropy_driven"), [(2.5, True), (0.03, False)])
def test_profile_of_drawn_decisions_matches_the_rule_and_tells_random_from_entropy_driven(
    spread: float, entropy_driven: bool
) -> None:
    """Decisions drawn by BranchBudget.decide: every bin's rate lies within 4 s.e. of the prediction;
    a ΔH spread of ±2.5 (p from 0 to 1) is entropy-driven, one of ±0.03 (the tiny model's) is not."""
    budget = BranchBudget(ArpoConfig(budget=10**9, initial=1))
    rng = random.Random(7)
    decisions = []
    for _ in range(4000):
        dh = rng.uniform(-spread, spread)
        decisions.append((dh, len(budget.decide("g", dh, 0.0, rng))))
    prof = branching_profile(decisions, tau=0.5, beta=0.2, bins=5)
    for b in prof.bins:
        assert abs(b.measured - b.predicted) < 4 * b.stderr + 1e-9
    if entropy_driven:
        assert prof.explained > 0.25 and prof.corr > 0.5
        assert prof.bins[0].measured < 0.2 < 0.8 < prof.bins[-1].measured
    else:
        assert prof.explained < 1e-3 and abs(prof.corr) < 0.1
        assert abs(prof.bins[-1].measured - prof.bins[0].measured) < 0.1


def test_profile_needs_decisions() -> None:
    with pytest.raises(ValueError, match="no branch decisions"):
        branching_profile([], 0.5, 0.2)


def test_rescale_to_vocab_equals_the_measure_taken_with_the_other_vocabulary() -> None:
    rows = [
        [(0, math.log(0.6)), (1, math.log(0.3)), (2, math.log(0.1))],
        [(3, math.log(0.9)), (4, math.log(0.05))],
    ]
    small, big = arpo_entropy(rows, 20, 2048), arpo_entropy(rows, 20, 151_936)
    assert small is not None and big is not None
    assert rescale_to_vocab(small, 2048, 151_936) == pytest.approx(big)
    assert big < small  # a larger vocabulary shrinks the same per-token entropies


def _softmax_rows(logits: list[float], temperature: float, k: int) -> list[list[tuple[int, float]]]:
    z = [x / temperature for x in logits]
    m = max(z)
    lse = m + math.log(sum(math.exp(x - m) for x in z))
    top = sorted(range(len(z)), key=lambda i: -z[i])[:k]
    return [[(i, z[i] - lse) for i in top]] * 20


def test_published_top_k_sum_falls_when_flattening_pushes_mass_out_of_the_top_k() -> None:
    """The measure truncates at the top k and does not renormalise: flattening a peaked distribution
    raises it, but flattening one whose mass already spreads past the top 10 lowers it, while the
    full entropy rises in both cases (what the bench's 'sensitive' conditions show)."""
    vocab = 2048
    rng = random.Random(3)
    peaked = [rng.gauss(0, 1) for _ in range(vocab)]
    peaked[0] += 14.0  # the top token holds most of the mass
    spread = [rng.gauss(0, 2.2) for _ in range(vocab)]

    def top10(logits: list[float], t: float) -> float:
        h = arpo_entropy(_softmax_rows(logits, t, 10), 20, vocab)
        assert h is not None
        return h

    def full(logits: list[float], t: float) -> float:
        h = arpo_entropy(_softmax_rows(logits, t, vocab), 20, vocab)
        assert h is not None
        return h

    assert top10(peaked, 2.0) > top10(peaked, 1.0) and full(peaked, 2.0) > full(peaked, 1.0)
    assert top10(spread, 3.0) < top10(spread, 1.0) and full(spread, 3.0) > full(spread, 1.0)
