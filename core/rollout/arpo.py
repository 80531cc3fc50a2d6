"""ARPO-style adaptive branching (Agentic Reinforced Policy Optimization, entropy-based).

After a tool result the model's next tokens are often uncertain; ARPO spends extra rollouts
exactly there. For each episode the engine measures the entropy of the first ``entropy_k`` tokens
of its first turn (``H_initial``) and of the first ``entropy_k`` tokens generated after each tool
result (``H_t``), from the backend's top-k logprobs (``entropy_top_k`` alternatives per token). It
then forks the episode with probability ``clip(tau + beta * (H_t - H_initial), 0, 1)`` — at most
``branch_factor - 1`` forks per source per step, and at most ``budget`` trajectories per task
(``initial`` of them started up front). A fork shares the token prefix up to the tool result and
resamples from there; it records its parent and the branch point. With ``fill_budget`` (the
default, as in the published rollout) a group whose episodes have all ended before using its
budget starts fresh rollouts from the prompt, one at a time, until it holds ``budget``.

Entropy measures (``ArpoConfig.entropy``):

- ``"arpo"`` (default): the published rollout's measure (dongguanting/ARPO,
  ``vllm_rollout_with_tools.py``). Every returned top-k logprob of the first ``k`` generated tokens
  is flattened into one list and ``H = Σ -p·log p`` is summed over it, *without* renormalising
  each position's alternatives, then divided by ``log |V|``. It is a sum over up to ``k`` positions,
  so it ranges over ``[0, ~k·log(top_k)/log|V|]``, not ``[0, 1]``. The published hyper-parameters
  (w = beta = 0.2, p = tau = 0.5, M = 16, N = 8, B = 2, k = 20 tokens, 10 logprobs per token) were
  tuned for this measure.
- ``"mean"``: toolgym's earlier measure: the mean over the first ``k`` positions of the entropy of
  each position's top-k distribution renormalised to sum to 1, divided by ``log |V|`` (in
  ``[0, 1]``). It is about ``1/k`` of the published value, so with the published ``beta`` the
  entropy term barely moves the probability (branching is close to random at ``tau``); use it only
  with a ``beta`` scaled up accordingly.

How strongly the entropy drives branching (measured by ``bench/arpo_branching.py``, see
docs/fidelity.md, "ARPO"): the probability leaves ``tau`` by ``beta·ΔH``, and taking it from 0.5 to
1 needs ΔH = 2.5, i.e. the first 20 tokens' summed top-k entropy must change by ``2.5·log|V|`` nats
(≈ 1.5 nats per token for a 151,936-token vocabulary, ≈ 0.9 for the tiny models' ~1,700); the
measure is at most ``k·log(top_k)/log|V|`` (3.9 at 151,936). Branching is entropy-driven only where
a model's per-token entropy after a tool result differs from its first turn's by a sizeable
fraction of a nat per token; where it hardly moves (a model indifferent to what the tool said) the
rule branches at about ``tau``, as published. The top-k sum is not monotone in the entropy: it
rises when a confident distribution flattens, but falls when flattening moves mass out of the top
``k`` (the alternatives' ``-p·log p`` shrink and the tail is not counted), so a model already
spread past its top 10 can *lower* ΔH when it grows less sure. :func:`branching_profile` measures
how far a set of decisions followed ΔH (per-bin predicted vs seen rates, and the share of the
outcome's variance the entropy term explains); :func:`rescale_to_vocab` converts a ΔH to another
vocabulary size for the same per-token entropies.

Servers that return only the sampled token's logprob (verl's, some OpenAI-compatible ones): the
``"arpo"`` measure is estimated as ``Σ_j -log p(x_j) / log|V|`` over the first ``k`` sampled tokens.
Its expectation is the *full-vocabulary* entropy summed over those positions, so it is biased
upward against the published top-k sum by the entropy of each position's tail outside the top-k
(small for peaked distributions, large for flat ones), and it is noisy (one sample per position).
``"mean"`` uses the mean of the same surprisals, clipped to 1.

Where toolgym's timing differs from the published code (see docs/fidelity.md, "ARPO"): the published
rollout decides at tool result ``t`` with the entropy of the tokens generated after tool result
``t-1`` (for the first tool result ΔH = 0), and a branch's ``H_initial`` is the entropy of its own
first generation; toolgym measures the tokens generated right after tool result ``t`` and forks
from that tool result (the paper's description), and a fork inherits its parent's ``H_initial``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EntropyMeasure = Literal["arpo", "mean"]


class ArpoConfig(BaseModel):
    """ARPO rollout settings (defaults: the published ones)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    budget: int = Field(16, ge=1)
    """M: trajectories per task, initial ones included (a target with ``fill_budget``, else a ceiling)."""
    initial: int = Field(8, ge=1)
    """N: rollouts started per task before any branching."""
    tau: float = 0.5
    """p: base branching probability."""
    beta: float = 0.2
    """w: weight of the entropy change."""
    entropy_k: int = Field(20, ge=1)
    """Generated tokens whose entropy is measured (the published 20)."""
    entropy_top_k: int = Field(10, ge=1)
    """Top-k alternatives requested per token to measure it from (the published code asks vLLM for 10)."""
    entropy: EntropyMeasure = "arpo"
    """Entropy measure: ``arpo`` (published, default) or ``mean`` (toolgym's earlier one); see the module docstring."""
    branch_factor: int = Field(2, ge=2)
    """B: a source forks at most B - 1 times per step."""
    fill_budget: bool = True
    """Fill every group to ``budget`` with fresh rollouts when branching left slots unused (published);
    False keeps ``budget`` as a ceiling only (groups of ``initial`` to ``budget`` trajectories)."""


def token_entropy(alternatives: Sequence[tuple[int, float]]) -> float:
    """Entropy (nats) of one position from its top-k (id, logprob) pairs, renormalised over them."""
    if not alternatives:
        return 0.0
    m = max(lp for _, lp in alternatives)
    weights = [math.exp(lp - m) for _, lp in alternatives]
    z = sum(weights)
    return -sum((w / z) * math.log(w / z) for w in weights if w > 0)


def normalized_entropy(
    top_logprobs: Sequence[Sequence[tuple[int, float]]] | None, k: int, vocab_size: int
) -> float | None:
    """``"mean"`` measure: mean renormalised entropy of the first ``k`` positions / log |V| (in [0, 1]); None without data."""
    if not top_logprobs or vocab_size < 2:
        return None
    rows = top_logprobs[:k]
    return sum(token_entropy(r) for r in rows) / len(rows) / math.log(vocab_size)


def arpo_entropy(
    top_logprobs: Sequence[Sequence[tuple[int, float]]] | None, k: int, vocab_size: int
) -> float | None:
    """``"arpo"`` measure: ``Σ -p·log p`` over every returned alternative of the first ``k``
    positions, flattened and not renormalised, divided by log |V|; None without data."""
    if not top_logprobs or vocab_size < 2:
        return None
    total = 0.0
    for row in top_logprobs[:k]:
        for _, lp in row:
            if lp > -math.inf:
                total -= math.exp(lp) * lp
    return total / math.log(vocab_size)


def turn_entropy(
    top_logprobs: Sequence[Sequence[tuple[int, float]]] | None,
    logprobs: Sequence[float] | None,
    k: int,
    vocab_size: int,
    measure: EntropyMeasure = "arpo",
) -> float | None:
    """Normalised entropy of the first ``k`` tokens of a turn, by ``measure``: from the top-k
    alternatives when the backend returns them, else estimated from the sampled tokens' own
    logprobs (see the module docstring for the estimate and its bias). None when neither is there."""
    if measure not in ("arpo", "mean"):
        raise ValueError(f"unknown ARPO entropy measure {measure!r}; use 'arpo' or 'mean'")
    if top_logprobs:
        return (
            arpo_entropy(top_logprobs, k, vocab_size)
            if measure == "arpo"
            else normalized_entropy(top_logprobs, k, vocab_size)
        )
    if logprobs and vocab_size >= 2:
        head = logprobs[:k]
        surprisal = -sum(head) / math.log(vocab_size)
        return surprisal if measure == "arpo" else min(1.0, surprisal / len(head))
    return None


def branch_probability(h_t: float, h_initial: float, tau: float, beta: float) -> float:
    """``clip(tau + beta·(h_t - h_initial), 0, 1)``: the published rule ``clip(U - w·ΔH, 0, 1) ≤ p``
    (U uniform on [0, 1)) holds with exactly this probability."""
    return min(1.0, max(0.0, tau + beta * (h_t - h_initial)))


class BranchBudget:
    """Counts trajectories per task group so branching never exceeds the budget M."""

    def __init__(self, config: ArpoConfig) -> None:
        self.config = config
        self._used: dict[str, int] = {}
        self._next_index: dict[str, int] = {}
        self._taken: dict[str, set[int]] = {}

    def start(self, group_id: str, sample_index: int | None = None) -> None:
        """Register one initial rollout of a group. Forks get sample indices after every initial
        one (``initial``, and ``sample_index`` when given), so their ids never collide."""
        used = self._used[group_id] = self._used.get(group_id, 0) + 1
        floor = max(used, self.config.initial, -1 if sample_index is None else sample_index + 1)
        self._next_index[group_id] = max(self._next_index.get(group_id, 0), floor)

    def stored(self, group_id: str, sample_indices: Iterable[int]) -> None:
        """Count a group's trajectories already stored (a resumed collection) against its budget;
        forks skip their sample indices."""
        taken = self._taken.setdefault(group_id, set())
        new = set(sample_indices) - taken
        taken |= new
        self._used[group_id] = self._used.get(group_id, 0) + len(new)

    def decide(
        self, group_id: str, h_t: float | None, h_initial: float | None, rng: random.Random
    ) -> list[int]:
        """Sample index of each fork to create now (possibly none), reserving budget for them."""
        if h_t is None or h_initial is None:
            return []
        p = branch_probability(h_t, h_initial, self.config.tau, self.config.beta)
        forks = []
        for _ in range(self.config.branch_factor - 1):
            if self._used.get(group_id, 0) >= self.config.budget:
                break
            if rng.random() < p:
                forks.append(self._reserve(group_id))
        return forks

    def refill(self, group_id: str) -> int | None:
        """Sample index of one fresh rollout that fills an unused slot of the budget (reserved
        now), or None when the group holds ``budget`` trajectories or filling is off."""
        if not self.config.fill_budget or self._used.get(group_id, 0) >= self.config.budget:
            return None
        return self._reserve(group_id)

    def release(self, group_id: str) -> None:
        """Give back one reserved slot (a fork that was refused); its sample index is not reused."""
        self._used[group_id] = max(0, self._used.get(group_id, 0) - 1)

    def _reserve(self, group_id: str) -> int:
        self._used[group_id] = self._used.get(group_id, 0) + 1
        index = self._next_index.get(group_id, 0)
        taken = self._taken.get(group_id, ())
        while index in taken:
            index += 1
        self._next_index[group_id] = index + 1
        return index

    def forget(self, group_id: str) -> None:
        """Drop a finished group's counts."""
        self._used.pop(group_id, None)
        self._next_index.pop(group_id, None)
        self._taken.pop(group_id, None)

    def used(self, group_id: str) -> int:
        return self._used.get(group_id, 0)


class BranchBin(BaseModel):
    """Branch decisions whose ΔH falls in one quantile bin: the rate the rule predicts and the one seen."""

    lo: float
    hi: float
    n: int
    mean_dh: float
    predicted: float
    """Mean over the bin's decisions of ``1 - (1 - clip(tau + beta·ΔH, 0, 1))^(B-1)`` (at least one fork)."""
    measured: float
    """Fraction of the bin's decisions that forked at least once."""
    stderr: float
    """Binomial standard error of ``measured`` around ``predicted``."""


class BranchingProfile(BaseModel):
    """How far branching follows the entropy: per-bin rates and the share of the branching
    outcome's variance the entropy term explains (0: random at ``tau``; 1: ΔH alone decides)."""

    bins: list[BranchBin]
    rate: float
    corr: float
    """Pearson correlation of ΔH with the 0/1 outcome (forked or not) over the decisions."""
    explained: float
    """``Var(p_i) / (p̄·(1-p̄))``: the part of the outcome's variance that the per-decision
    probability ``p_i`` carries; the squared correlation of ``p_i`` with the outcome approaches it."""


def fork_probability(dh: float, tau: float, beta: float, branch_factor: int = 2) -> float:
    """Probability that a source forks at least once at a step with entropy change ``dh``."""
    return 1.0 - (1.0 - branch_probability(dh, 0.0, tau, beta)) ** (branch_factor - 1)


def branching_profile(
    decisions: Sequence[tuple[float, int]], tau: float, beta: float, branch_factor: int = 2, bins: int = 5
) -> BranchingProfile:
    """Profile of ``(ΔH, forks made)`` decisions (those drawn with budget left) in ``bins`` ΔH quantile bins."""
    if not decisions:
        raise ValueError("no branch decisions to profile")
    ranked = sorted(decisions, key=lambda d: d[0])
    n = len(ranked)
    probs = [fork_probability(dh, tau, beta, branch_factor) for dh, _ in ranked]
    hits = [1.0 if forks > 0 else 0.0 for _, forks in ranked]
    out: list[BranchBin] = []
    for b in range(min(bins, n)):
        lo, hi = b * n // min(bins, n), (b + 1) * n // min(bins, n)
        p = sum(probs[lo:hi]) / (hi - lo)
        out.append(
            BranchBin(
                lo=ranked[lo][0],
                hi=ranked[hi - 1][0],
                n=hi - lo,
                mean_dh=sum(d for d, _ in ranked[lo:hi]) / (hi - lo),
                predicted=p,
                measured=sum(hits[lo:hi]) / (hi - lo),
                stderr=math.sqrt(max(p * (1 - p), 1e-12) / (hi - lo)),
            )
        )
    p_bar = sum(probs) / n
    var_p = sum((p - p_bar) ** 2 for p in probs) / n
    return BranchingProfile(
        bins=out,
        rate=sum(hits) / n,
        corr=_pearson([d for d, _ in ranked], hits),
        explained=var_p / (p_bar * (1 - p_bar)) if 0 < p_bar < 1 else 0.0,
    )


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def rescale_to_vocab(dh: float, vocab_size: int, target_vocab_size: int) -> float:
    """ΔH measured with ``vocab_size`` as it would read, for the same per-token entropies (nats), with
    ``target_vocab_size``: the measure divides by ``log |V|``, so it scales by ``log|V| / log|V'|``."""
    return dh * math.log(vocab_size) / math.log(target_vocab_size)
