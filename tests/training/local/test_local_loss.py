"""PPO-clip, KL and aggregation on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch

from toolgym.core.errors import ConfigError
from toolgym.training.local.batch import collate, micro_batches
from toolgym.training.local.loss import Aggregation, kl_penalty, ppo_clip_loss, sft_loss


def _grad(ratio: float, adv: float, clip: float = 0.2) -> float:
    logp = torch.tensor([math.log(ratio)], requires_grad=True)
    agg = Aggregation.of("token-mean", torch.tensor([1.0]))
    loss, _ = ppo_clip_loss(
        logp,
        torch.zeros(1),
        torch.tensor([adv]),
        torch.zeros(1, dtype=torch.long),
        agg,
        clip_low=clip,
        clip_high=clip,
    )
    loss.backward()
    assert logp.grad is not None
    return float(logp.grad.item())


def test_inside_the_trust_region_the_gradient_is_minus_advantage_times_ratio() -> None:
    assert _grad(1.1, 2.0) == pytest.approx(-2.0 * 1.1)
    assert _grad(0.9, -1.0) == pytest.approx(1.0 * 0.9)


def test_clipping_stops_the_gradient_only_in_the_direction_that_would_move_further() -> None:
    assert _grad(1.5, 1.0) == 0.0  # already much more likely, positive advantage: clipped
    assert _grad(0.5, -1.0) == 0.0  # already much less likely, negative advantage: clipped
    assert _grad(1.5, -1.0) == pytest.approx(1.5)  # pessimistic bound keeps the unclipped term
    assert _grad(0.5, 1.0) == pytest.approx(-0.5)


def test_asymmetric_bounds_and_clip_fraction() -> None:
    logp = torch.log(torch.tensor([1.25, 1.25, 0.85]))
    agg = Aggregation.of("token-mean", torch.tensor([3.0]))
    rows = torch.zeros(3, dtype=torch.long)
    _, stats = ppo_clip_loss(logp, torch.zeros(3), torch.ones(3), rows, agg, clip_low=0.2, clip_high=0.28)
    assert stats["clipped"] == 0  # 1.25 < 1.28
    _, stats = ppo_clip_loss(logp, torch.zeros(3), torch.ones(3), rows, agg, clip_low=0.2, clip_high=0.2)
    assert stats["clipped"] == 2
    with pytest.raises(ConfigError):
        ppo_clip_loss(logp, torch.zeros(3), torch.ones(3), rows, agg, clip_low=1.5)


def test_aggregation_modes() -> None:
    values = torch.tensor([1.0, 1.0, 1.0, 4.0])
    rows = torch.tensor([0, 0, 0, 1])
    counts = torch.tensor([3.0, 1.0])
    assert Aggregation.of("token-mean", counts).reduce(values, rows).item() == pytest.approx(7 / 4)
    assert Aggregation.of("seq-mean-token-mean", counts).reduce(values, rows).item() == pytest.approx(
        (1 + 4) / 2
    )
    with pytest.raises(ConfigError, match="aggregation"):
        Aggregation.of("sum", counts)


def test_episode_mean_weighs_every_episode_the_same_whatever_its_steps() -> None:
    """GRPO's advantages in a group of one success (+1, 1 step) and one failure (−1, 3 steps), one
    row per step of 2 tokens each: per sequence, the failure's three rows pull the mean advantage
    to −0.5, so the update mostly lowers what was sampled; per episode it is 0, as GRPO's is."""
    advantages = torch.tensor([1.0, 1.0] + [-1.0] * 6)
    rows = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    counts = torch.tensor([2.0, 2.0, 2.0, 2.0])
    episodes = ["win", "loss", "loss", "loss"]
    assert Aggregation.of("seq-mean-token-mean", counts).reduce(advantages, rows).item() == pytest.approx(
        -0.5
    )
    agg = Aggregation.of("episode-mean-token-mean", counts, episodes)
    assert agg.num_episodes == 2 and agg.reduce(advantages, rows).item() == pytest.approx(0.0, abs=1e-6)
    # micro-batches add up to the whole mini-batch's value (normalisers are the mini-batch's)
    halves = agg.reduce(advantages[:4], rows[:4]) + agg.reduce(advantages[4:], rows[4:])
    assert halves.item() == pytest.approx(0.0, abs=1e-6)
    # a row without loss tokens (outside this mini-batch) counts towards no episode
    sparse = Aggregation.of("episode-mean-token-mean", torch.tensor([2.0, 0.0, 2.0, 0.0]), episodes)
    assert (
        sparse.num_episodes == 2
        and sparse.reduce(torch.tensor([1.0, 1.0, -1.0, -1.0]), torch.tensor([0, 0, 2, 2])).item() == 0.0
    )
    # one row per episode: the same as seq-mean-token-mean
    one = Aggregation.of("episode-mean-token-mean", counts, ["a", "b", "c", "d"]).reduce(advantages, rows)
    assert one.item() == pytest.approx(
        Aggregation.of("seq-mean-token-mean", counts).reduce(advantages, rows).item()
    )
    with pytest.raises(ConfigError, match="episode of every row"):
        Aggregation.of("episode-mean-token-mean", counts)


def test_kl_estimators() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.0, -1.0, -1.5])
    k1 = kl_penalty(logp, ref, "k1")
    k3 = kl_penalty(logp, ref, "k3")
    assert k1.tolist() == pytest.approx([0.0, -1.0, 1.0])
    d = (ref - logp).tolist()
    assert k3.tolist() == pytest.approx([math.exp(x) - x - 1 for x in d])
    assert (k3 >= 0).all() and k3[0] == 0
    with pytest.raises(ConfigError):
        kl_penalty(logp, ref, "k2")


def test_collate_keeps_only_loss_masked_targets(rows) -> None:  # type: ignore[no-untyped-def]
    mb = collate(rows, [0, 1], pad_id=0)
    assert mb.input_ids.shape == (2, 6)
    assert mb.targets.tolist() == [6, 7, 8, 9, 10, 11]  # position 0 never; mask-0 tokens never
    assert mb.old_logprobs.tolist() == [-3.0] * 3 + [-4.0] * 3
    assert mb.advantages.tolist() == [1.0] * 3 + [-0.5] * 3
    assert mb.rows.tolist() == [0, 0, 0, 1, 1, 1]
    assert mb.attention_mask[1].tolist() == [1, 1, 1, 1, 0, 0]


def test_micro_batches_cover_every_row_once(rows) -> None:  # type: ignore[no-untyped-def]
    parts = micro_batches(rows, [0, 1, 2, 3], 3)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3]
    assert max(len(p) for p in parts) == 3


def test_sft_loss_is_mean_negative_loglik() -> None:
    logp = torch.tensor([-1.0, -3.0])
    agg = Aggregation.of("token-mean", torch.tensor([2.0]))
    assert sft_loss(logp, torch.zeros(2, dtype=torch.long), agg).item() == pytest.approx(2.0)
