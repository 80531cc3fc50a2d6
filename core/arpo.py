"""ARPO-style adaptive branching (Agentic Reinforced Policy Optimization, entropy-based).

After a tool result the model's next tokens are often uncertain; ARPO spends extra rollouts
exactly there. For each episode the engine measures the entropy of the first ``entropy_k`` tokens
of its first turn (``H_initial``) and of the first ``entropy_k`` tokens generated after each tool
result (``H_t``), from the backend's top-k logprobs (or, when a server returns only the sampled
tokens' logprobs, their mean negative value), normalised by log |V|. It then forks the
episode with probability ``clip(tau + beta * (H_t - H_initial), 0, 1)`` — at most
``branch_factor - 1`` forks per source per step, and at most ``budget`` trajectories per task
(``initial`` of them started up front). A fork shares the token prefix up to the tool result and
resamples from there; it records its parent and the branch point.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field


class ArpoConfig(BaseModel):
    """ARPO rollout settings (defaults: the published ones)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    budget: int = Field(16, ge=1)
    """M: most trajectories per task, initial ones included."""
    initial: int = Field(8, ge=1)
    """N: rollouts started per task before any branching."""
    tau: float = 0.5
    """Base branching probability."""
    beta: float = 0.2
    """Weight of the entropy change."""
    entropy_k: int = Field(20, ge=1)
    """Tokens whose entropy is measured, and top-k alternatives per token to measure it from."""
    branch_factor: int = Field(2, ge=2)
    """B: a source forks at most B - 1 times per step."""


def token_entropy(alternatives: Sequence[tuple[int, float]]) -> float:
    """Entropy (nats) of one position from its top-k (id, logprob) pairs, renormalised over them."""
    if not alternatives:
        return 0.0
    m = max(lp for _, lp in alternatives)
    weights = [math.exp(lp - m) for _, lp in alternatives]
    z = sum(weights)
    return -sum((w / z) * math.log(w / z) for w in weights if w > 0)


def normalized_entropy(top_logprobs: Sequence[Sequence[tuple[int, float]]] | None, k: int, vocab_size: int) -> float | None:
    """Mean entropy of the first ``k`` positions divided by log |V| (in [0, 1]); None without data."""
    if not top_logprobs or vocab_size < 2:
        return None
    rows = top_logprobs[:k]
    return sum(token_entropy(r) for r in rows) / len(rows) / math.log(vocab_size)


def turn_entropy(
    top_logprobs: Sequence[Sequence[tuple[int, float]]] | None, logprobs: Sequence[float] | None, k: int, vocab_size: int
) -> float | None:
    """Normalised entropy of the first ``k`` tokens of a turn: from the top-k alternatives when the
    backend returns them, else estimated from the sampled tokens' own logprobs (the mean of
    ``-log p(sampled token)`` is an unbiased estimate of the entropy), which is all some servers
    return (verl's). None when neither is available."""
    if top_logprobs:
        return normalized_entropy(top_logprobs, k, vocab_size)
    if logprobs and vocab_size >= 2:
        head = logprobs[:k]
        return min(1.0, -sum(head) / len(head) / math.log(vocab_size))
    return None


def branch_probability(h_t: float, h_initial: float, tau: float, beta: float) -> float:
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

    def decide(self, group_id: str, h_t: float | None, h_initial: float | None, rng: random.Random) -> list[int]:
        """Sample index of each fork to create now (possibly none), reserving budget for them."""
        if h_t is None or h_initial is None:
            return []
        p = branch_probability(h_t, h_initial, self.config.tau, self.config.beta)
        forks = []
        for _ in range(self.config.branch_factor - 1):
            if self._used.get(group_id, 0) >= self.config.budget:
                break
            if rng.random() < p:
                self._used[group_id] = self._used.get(group_id, 0) + 1
                index = self._next_index.get(group_id, 0)
                taken = self._taken.get(group_id, ())
                while index in taken:
                    index += 1
                self._next_index[group_id] = index + 1
                forks.append(index)
        return forks

    def forget(self, group_id: str) -> None:
        """Drop a finished group's counts."""
        self._used.pop(group_id, None)
        self._next_index.pop(group_id, None)
        self._taken.pop(group_id, None)

    def used(self, group_id: str) -> int:
        return self._used.get(group_id, 0)
