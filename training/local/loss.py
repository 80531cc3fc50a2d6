"""Policy-gradient losses on flat token vectors: PPO-clip, KL to a reference, SFT cross-entropy.

Every function takes *flat* per-token tensors (one entry per loss-masked token of a mini-batch)
plus ``rows``, the index of the sequence each token belongs to, so the caller never pads. Losses
are divided by a normaliser fixed for the whole mini-batch (``Aggregation``), not per micro-batch:
accumulating the gradients of micro-batches then gives exactly the gradient of the mini-batch.

Aggregation modes (the names verl uses):

- ``token-mean``: sum over tokens / number of tokens in the mini-batch. Every token weighs the
  same, so long responses weigh more (DAPO's choice; verl's default).
- ``seq-mean-token-mean``: the mean over sequences of each sequence's token mean. Every sequence
  weighs the same whatever its length (the original GRPO formulation).
- ``episode-mean-token-mean`` (toolgym's, local trainer only): the mean over episodes of the mean
  over the episode's sequences of each one's token mean. With the step layout (one sequence per
  step) every *episode* weighs the same whatever its number of steps; under
  ``seq-mean-token-mean`` an episode of 10 steps weighs 10 times one of 1 step, so where failures
  run longer than successes the update leans on lowering what was sampled (docs/notes/webshop_learning.md).
  With one sequence per episode it equals ``seq-mean-token-mean``.

PPO-clip (Schulman et al., 2017) with decoupled bounds: ``ratio = exp(logp − logp_behaviour)``,
``loss = max(−A·ratio, −A·clip(ratio, 1 − ε_low, 1 + ε_high))``. ``logp_behaviour`` are the
logprobs the sampler recorded in the trajectory (temperature-scaled, see ``core/llm/local/sampling.py``);
the trainer recomputes ``logp`` at the same temperature.

Truncated importance sampling (TIS; Feng Yao et al., 2025, "Your efficient RL framework secretly brings
you off-policy RL training"): the engine that samples (vLLM, SGLang, a bf16 or quantised kernel)
and the trainer's forward pass give the same weights different token probabilities, so the
"on-policy" samples are slightly off-policy. With ``tis_cap`` = C set, the trainer recomputes the
old logprobs ``logp_old`` itself before the update (the PPO ratio is then ``exp(logp − logp_old)``)
and each token's clipped surrogate is multiplied by the detached weight
``w = min(exp(logp_old − logp_rollout), C)``. Off (None), nothing of this runs: the ratio is taken
against the rollout's logprobs as above.

KL to a frozen reference (``logr`` = reference logprob of the sampled token), as a loss term:
``k1 = logp − logr`` (unbiased, can be negative) or ``k3 = exp(logr − logp) − (logr − logp) − 1``
(Schulman's low-variance estimator, always ≥ 0; verl's ``low_var_kl``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from toolgym.core.errors import ConfigError

AggMode = Literal["token-mean", "seq-mean-token-mean", "episode-mean-token-mean"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "episode-mean-token-mean")
KLEstimator = Literal["k1", "k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k3")


@dataclass(frozen=True)
class Aggregation:
    """How per-token values become one loss, with normalisers fixed for a whole mini-batch.

    ``tokens_per_row[r]`` is the number of loss-masked tokens of row ``r`` in the mini-batch (the
    row indices of every micro-batch refer to it); ``num_tokens`` and ``num_rows`` count the rows
    that have at least one such token. ``episode_rows[r]`` (``episode-mean-token-mean`` only) is the
    number of such rows of row ``r``'s episode, ``num_episodes`` the episodes with one.
    """

    mode: AggMode
    tokens_per_row: torch.Tensor
    num_tokens: int
    num_rows: int
    episode_rows: torch.Tensor | None = None
    num_episodes: int = 0

    @classmethod
    def of(
        cls, mode: str, tokens_per_row: torch.Tensor, episode_of_row: list[str] | None = None
    ) -> Aggregation:
        """``episode_of_row[r]`` names row ``r``'s episode; needed by ``episode-mean-token-mean`` only."""
        if mode not in AGG_MODES:
            raise ConfigError(f"unknown loss aggregation {mode!r}; use one of {', '.join(AGG_MODES)}")
        counts = tokens_per_row.to(torch.float32)
        agg = cls(mode, counts, int(counts.sum().item()), int((counts > 0).sum().item()))  # type: ignore[arg-type]
        if mode != "episode-mean-token-mean":
            return agg
        if episode_of_row is None or len(episode_of_row) != len(counts):
            raise ConfigError("episode-mean-token-mean needs the episode of every row")
        live: dict[str, int] = {}
        for episode, n in zip(episode_of_row, counts.tolist(), strict=True):
            live[episode] = live.get(episode, 0) + (n > 0)
        rows_of = torch.tensor([float(live[e]) for e in episode_of_row])
        return cls(
            agg.mode, counts, agg.num_tokens, agg.num_rows, rows_of, sum(1 for n in live.values() if n)
        )

    def reduce(self, values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Sum of ``values`` weighted so that summing over every micro-batch gives the mode's mean."""
        if values.numel() == 0:
            return values.sum()
        if self.mode == "token-mean":
            return values.sum() / max(self.num_tokens, 1)
        per_token = self.tokens_per_row.to(values.device)[rows].clamp_min(1.0)
        if self.mode == "seq-mean-token-mean":
            return (values * (1.0 / per_token)).sum() / max(self.num_rows, 1)
        assert self.episode_rows is not None
        per_episode = self.episode_rows.to(values.device)[rows].clamp_min(1.0)
        return (values * (1.0 / (per_token * per_episode))).sum() / max(self.num_episodes, 1)


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    rows: torch.Tensor,
    agg: Aggregation,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    tis_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate over flat tokens; returns the loss and (unnormalised) sums for metrics:
    ``clipped`` (tokens whose clipped term was taken), ``ratio`` (sum of ratios), ``approx_kl``
    (sum of ``old_logp − logp``), ``tokens``. ``tis_weights`` (from :func:`tis_weights`, one per
    token, no gradient) multiply each token's surrogate; None leaves the loss as it was."""
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ConfigError(
            f"clip ratios must satisfy 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}"
        )
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if tis_weights is not None:
        per_token = per_token * tis_weights.detach()
    loss = agg.reduce(per_token, rows)
    with torch.no_grad():
        stats = {
            "clipped": float((clipped > unclipped).sum().item()),
            "ratio": float(ratio.sum().item()),
            "approx_kl": float((-log_ratio).sum().item()),
            "tokens": float(logp.numel()),
        }
    return loss, stats


TIS_SAFETY = 20.0
"""|log ratio| is clamped to this before ``exp`` (e^20 ≈ 5e8), so a token the trainer finds
impossible gives a large, finite ratio rather than inf (the weight is truncated at C anyway)."""


def tis_weights(
    train_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights ``min(π_train_old / π_rollout, cap)`` per token, computed from
    logprobs (no gradient), and sums for metrics: ``tis_ratio`` (sum of the untruncated ratios),
    ``tis_ratio_max``, ``tis_weight`` (sum of the truncated weights), ``tis_clipped`` (tokens whose
    ratio exceeded ``cap``), ``tis_tokens``."""
    if not cap > 0:
        raise ConfigError(f"the TIS cap must be > 0 (e.g. 2.0), got {cap}")
    with torch.no_grad():
        ratio = torch.exp((train_logp - rollout_logp).clamp(-TIS_SAFETY, TIS_SAFETY))
        weights = ratio.clamp(max=cap)
        stats = {
            "tis_ratio": float(ratio.sum().item()),
            "tis_ratio_max": float(ratio.max().item()) if ratio.numel() else 0.0,
            "tis_weight": float(weights.sum().item()),
            "tis_clipped": float((ratio > cap).sum().item()),
            "tis_tokens": float(ratio.numel()),
        }
    return weights, stats


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(π‖π_ref) estimate from the sampled tokens' logprobs under both models."""
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k3":
        delta = (ref_logp - logp).clamp(-20.0, 20.0)  # keeps exp finite when the two drift far apart
        return torch.exp(delta) - delta - 1.0
    raise ConfigError(f"unknown KL estimator {estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")


def sft_loss(logp: torch.Tensor, rows: torch.Tensor, agg: Aggregation) -> torch.Tensor:
    """Cross-entropy on the loss-masked tokens (the negative log-likelihood of the demonstrations)."""
    return agg.reduce(-logp, rows)
