"""Truncated importance sampling (TIS) of the rollout/trainer mismatch in the local trainer:
the weight min(π_train_old / π_rollout, C) multiplies each token's clipped surrogate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from local_helpers import tiny_model

from toolgym.core.errors import ConfigError
from toolgym.training.local.batch import Row, collate
from toolgym.training.local.config import OptimConfig, PPOConfig
from toolgym.training.local.loss import Aggregation, ppo_clip_loss, tis_weights
from toolgym.training.local.trainer import PolicyTrainer, token_logprobs

ROWS = torch.zeros(4, dtype=torch.long)


def test_the_weight_multiplies_each_tokens_surrogate_as_the_formula_says() -> None:
    # trainer old logprobs vs the sampler's: ratios 0.5, 1.5, 3.0 (above C = 2) and 1.0
    old = torch.log(torch.tensor([0.2, 0.3, 0.6, 0.5]))
    rollout = torch.log(torch.tensor([0.4, 0.2, 0.2, 0.5]))
    weights, stats = tis_weights(old, rollout, 2.0)
    torch.testing.assert_close(weights, torch.tensor([0.5, 1.5, 2.0, 1.0]))
    assert stats["tis_ratio"] == pytest.approx(0.5 + 1.5 + 3.0 + 1.0)
    assert stats["tis_ratio_max"] == pytest.approx(3.0)
    assert stats["tis_weight"] == pytest.approx(5.0)
    assert stats["tis_clipped"] == 1 and stats["tis_tokens"] == 4

    adv = torch.tensor([1.0, -2.0, 1.0, 0.5])
    logp = (old + torch.log(torch.tensor([1.0, 1.1, 0.9, 1.5]))).requires_grad_(True)  # PPO ratio vs π_old
    agg = Aggregation.of("token-mean", torch.tensor([4.0]))
    loss, _ = ppo_clip_loss(logp, old, adv, ROWS, agg, clip_low=0.2, clip_high=0.2, tis_weights=weights)
    # by hand: max(-A·r, -A·clip(r)) per token, times the weight, mean over 4 tokens
    surrogate = [-1.0 * 1.0, 2.0 * 1.1, -1.0 * 0.9, -0.5 * 1.2]
    expected = sum(w * s for w, s in zip([0.5, 1.5, 2.0, 1.0], surrogate, strict=True)) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert logp.grad is not None
    # d/dlogp of -A·w·r is -A·w·r inside the trust region; the clipped token (r=1.5 > 1.2, A>0) has none
    torch.testing.assert_close(
        logp.grad, torch.tensor([-1.0 * 0.5, 2.0 * 1.5 * 1.1, -1.0 * 2.0 * 0.9, 0.0]) / 4
    )


def test_without_weights_the_loss_is_unchanged_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    logp, old, adv = (torch.randn(64, generator=gen) for _ in range(3))
    rows = torch.randint(0, 4, (64,), generator=gen)
    agg = Aggregation.of("seq-mean-token-mean", torch.bincount(rows, minlength=4).float())
    plain, _ = ppo_clip_loss(logp, old, adv, rows, agg)
    off, _ = ppo_clip_loss(logp, old, adv, rows, agg, tis_weights=None)
    ratio = torch.exp(logp - old)
    by_formula = agg.reduce(torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)), rows)
    assert torch.equal(plain, off) and torch.equal(plain, by_formula)
    assert PPOConfig().tis_cap is None


def test_bad_caps_are_refused() -> None:
    with pytest.raises(ConfigError, match="TIS cap"):
        tis_weights(torch.zeros(1), torch.zeros(1), 0.0)
    with pytest.raises(ValueError):
        PPOConfig(tis_cap=-1.0)


def _rows_with_model_logprobs(model, shift: float) -> list[Row]:  # type: ignore[no-untyped-def]
    """Rows whose sampler logprobs are the model's own minus ``shift`` on every other sampled token
    (a sampler that found those tokens e^shift times less likely than the trainer does)."""
    rows = [
        Row(
            np.array(ids, dtype=np.int64),
            np.array(mask, dtype=np.int8),
            np.zeros(len(ids), dtype=np.float32),
            np.array(mask, dtype=np.float32) * adv,
        )
        for ids, mask, adv in (
            ([1, 5, 6, 7, 8, 2], [0, 0, 1, 1, 1, 0], 1.0),
            ([1, 9, 10, 11], [0, 1, 1, 1], -0.5),
            ([1, 12, 13, 14, 15, 16], [0, 0, 0, 1, 1, 1], 2.0),
        )
    ]
    with torch.no_grad():
        logp, _ = token_logprobs(model, collate(rows, list(range(len(rows))), pad_id=0))
    pos, k = 0, 0
    for r in rows:
        for t in np.flatnonzero(r.loss_mask[1:]) + 1:
            r.old_logprobs[t] = float(logp[pos]) - (shift if k % 2 == 0 else 0.0)
            pos, k = pos + 1, k + 1
    return rows


def test_trainer_reports_the_weights_and_trains_against_its_own_old_logprobs() -> None:
    shift = math.log(1.5)
    model = tiny_model(seed=4)
    rows = _rows_with_model_logprobs(model, shift)
    tokens = sum(r.num_tokens for r in rows)
    shifted = (tokens + 1) // 2
    on = PolicyTrainer(
        model, optim=OptimConfig(lr=1e-3), ppo=PPOConfig(tis_cap=1.2, mini_batch_size=8, micro_batch_size=2)
    )
    metrics = on.ppo_update(rows)
    assert metrics["tis_ratio_max"] == pytest.approx(1.5, rel=1e-4)
    assert metrics["tis_clip_frac"] == pytest.approx(shifted / tokens)
    assert metrics["tis_ratio_mean"] == pytest.approx((1.5 * shifted + tokens - shifted) / tokens, rel=1e-4)
    assert metrics["tis_weight_mean"] == pytest.approx((1.2 * shifted + tokens - shifted) / tokens, rel=1e-4)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # PPO's ratio is against π_train_old
    assert rows[0].rollout_logprobs is None  # the caller's rows are not changed

    off = PolicyTrainer(
        tiny_model(seed=4), optim=OptimConfig(lr=1e-3), ppo=PPOConfig(mini_batch_size=8, micro_batch_size=2)
    )
    plain = off.ppo_update(rows)
    assert not any(k.startswith("tis_") for k in plain)
    assert plain["ratio_mean"] == pytest.approx((1.5 * shifted + tokens - shifted) / tokens, rel=1e-4)


def test_tis_changes_the_update_by_the_weights() -> None:
    """With every sampler logprob e^shift below the trainer's (ratio 1.5) and C = 2, the weight is
    1.5 on every token, so the gradient is exactly 1.5 times the one without the mismatch."""
    grads = []
    for shift, cap in ((math.log(1.5), 2.0), (0.0, 2.0), (math.log(1.5), None)):
        model = tiny_model(seed=5)
        rows = _rows_with_model_logprobs(model, 0.0)
        for r in rows:
            r.old_logprobs -= np.float32(shift) * r.loss_mask
        trainer = PolicyTrainer(
            model,
            optim=OptimConfig(lr=1e-3, max_grad_norm=1e9),
            ppo=PPOConfig(tis_cap=cap, mini_batch_size=8, micro_batch_size=8),
        )
        grads.append(trainer.ppo_update(rows)["grad_norm"])
    weighted, matched, uncorrected = grads
    assert weighted == pytest.approx(1.5 * matched, rel=1e-4)
    # without TIS the trust region is measured from the sampler's logprobs: the ratio 1.5 clips the
    # positive-advantage tokens' gradient away and only the negative ones' (×1.5) is left
    assert uncorrected < 0.5 * matched
