"""PolicyTrainer: gradient accumulation, KL reference, SFT, checkpoints."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from local_helpers import make_row, tiny_model

from toolgym.core.errors import ConfigError
from toolgym.training.local.config import OptimConfig, PPOConfig
from toolgym.training.local.sft import run_sft
from toolgym.training.local.trainer import PolicyTrainer


def _params(model) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    return [p.detach().clone() for p in model.parameters()]


@pytest.fixture
def one_thread():  # type: ignore[no-untyped-def]
    """Adam turns a float-noise gradient (~1e-9, summed in another order by another thread
    split) into a full ±lr step, so the comparison below needs one reduction order."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_gradient_accumulation_equals_one_big_batch(rows, agg, one_thread) -> None:  # type: ignore[no-untyped-def]
    results = []
    for micro in (1, 3, len(rows)):
        model = tiny_model(seed=1)
        ppo = PPOConfig(mini_batch_size=len(rows), micro_batch_size=micro, loss_agg=agg)
        trainer = PolicyTrainer(model, optim=OptimConfig(lr=1e-2, max_grad_norm=1e9), ppo=ppo)
        metrics = trainer.ppo_update(rows)
        results.append((_params(model), metrics["grad_norm"]))
    (ref, norm), *others = results
    for params, other_norm in others:
        assert other_norm == pytest.approx(norm, rel=1e-4)
        for a, b in zip(ref, params, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_ratio_is_one_when_behaviour_logprobs_are_the_models(rows) -> None:  # type: ignore[no-untyped-def]
    from toolgym.training.local.batch import collate
    from toolgym.training.local.trainer import token_logprobs

    model = tiny_model(seed=2)
    with torch.no_grad():
        logp, _ = token_logprobs(model, collate(rows, list(range(len(rows))), pad_id=0))
    # write the model's own logprobs in as the behaviour logprobs (collate keeps row order)
    pos = 0
    for i in range(len(rows)):
        n = rows[i].num_tokens
        idx = [t for t in range(1, len(rows[i].input_ids)) if rows[i].loss_mask[t]]
        rows[i].old_logprobs[idx] = logp[pos : pos + n].numpy()
        pos += n
    trainer = PolicyTrainer(
        model, optim=OptimConfig(lr=1e-3), ppo=PPOConfig(mini_batch_size=8, micro_batch_size=2)
    )
    metrics = trainer.ppo_update(rows)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["clip_frac"] == 0.0


def test_kl_to_reference_is_zero_at_start_and_grows_after_updates(rows) -> None:  # type: ignore[no-untyped-def]
    model = tiny_model(seed=3)
    trainer = PolicyTrainer(
        model, optim=OptimConfig(lr=5e-2), ppo=PPOConfig(kl_coef=0.5, kl_estimator="k3", mini_batch_size=8)
    )
    assert trainer.reference is None  # taken when RL starts, after any warm start
    run_sft(trainer, rows, steps=2, batch_size=4)
    warm = _params(model)
    first = trainer.ppo_update(rows)
    for a, b in zip(warm, [p.detach() for p in trainer.reference.parameters()], strict=True):
        torch.testing.assert_close(a, b)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-7)
    for _ in range(5):
        last = trainer.ppo_update(rows)
    assert last["kl_ref"] > 1e-4
    assert all(not p.requires_grad for p in trainer.reference.parameters())


def test_sft_reduces_the_loss_on_its_demonstrations() -> None:
    rng = random.Random(0)
    rows = [
        make_row([1, *(rng.randrange(3, 40) for _ in range(4)), 20, 21, 22, 2], [0, 0, 0, 0, 0, 1, 1, 1, 1])
        for _ in range(8)
    ]
    model = tiny_model(seed=4)
    trainer = PolicyTrainer(model, optim=OptimConfig(lr=3e-2), ppo=PPOConfig(micro_batch_size=4))
    before = trainer.mean_nll(rows)
    losses = run_sft(trainer, rows, steps=30, batch_size=4)
    after = trainer.mean_nll(rows)
    assert after < 0.3 * before
    assert losses[-1] < losses[0]


def _context_nll(model, rows) -> float:  # type: ignore[no-untyped-def]
    """Token-mean NLL of the tokens outside the loss mask (after the first), one row at a time."""
    total, count = 0.0, 0
    with torch.no_grad():
        for r in rows:
            logp = torch.log_softmax(
                model(input_ids=torch.as_tensor(r.input_ids).unsqueeze(0)).logits[0, :-1].float(), -1
            )
            for t in range(1, len(r.input_ids)):
                if not r.loss_mask[t]:
                    total -= float(logp[t - 1, int(r.input_ids[t])])
                    count += 1
    return total / count


def test_sft_context_weight_adds_language_modelling_on_the_context(one_thread) -> None:  # type: ignore[no-untyped-def]
    """The context term is the token-mean NLL of the rows' other tokens, the same whatever the
    micro-batch split; with weight 0 SFT does not learn the context (it gets worse), with weight > 0 it does."""
    rng = random.Random(1)
    rows = [
        make_row([1, *(rng.randrange(3, 12) for _ in range(6)), 20, 21, 2, 30, 31], [0] * 7 + [1, 1, 1, 0, 0])
        for _ in range(6)
    ]
    reported = []
    for micro in (1, 4):
        model = tiny_model(seed=6)
        expected = _context_nll(model, rows)
        trainer = PolicyTrainer(model, optim=OptimConfig(lr=1e-9), ppo=PPOConfig(micro_batch_size=micro))
        reported.append(trainer.sft_step(rows, context_weight=0.5)["context_loss"])
        assert reported[-1] == pytest.approx(expected, rel=1e-5)
    drops = {}
    for weight in (0.0, 1.0):
        model = tiny_model(seed=6)
        before = _context_nll(model, rows)
        trainer = PolicyTrainer(model, optim=OptimConfig(lr=3e-2), ppo=PPOConfig(micro_batch_size=3))
        run_sft(trainer, rows, steps=30, batch_size=6, context_weight=weight)
        drops[weight] = before - _context_nll(model, rows)
    assert drops[1.0] > 0.3 and drops[1.0] > drops[0.0] + 1.0
    with pytest.raises(ConfigError):
        trainer.sft_step(rows, context_weight=-1.0)


def test_checkpoint_round_trip(tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    model = tiny_model(seed=5)
    trainer = PolicyTrainer(model, optim=OptimConfig(lr=1e-2), ppo=PPOConfig(mini_batch_size=2, kl_coef=0.1))
    trainer.ppo_update(rows)
    trainer.save(tmp_path / "ckpt", extra={"next_step": 7})
    saved = _params(model)
    continued = trainer.ppo_update(rows, seed=9)
    expected_after = _params(model)

    fresh = tiny_model(seed=6)
    other = PolicyTrainer(fresh, optim=OptimConfig(lr=1e-2), ppo=PPOConfig(mini_batch_size=2, kl_coef=0.1))
    extra = other.load(tmp_path / "ckpt")
    assert extra == {"next_step": 7} and other.step == trainer.step - 2
    for a, b in zip(saved, _params(fresh), strict=True):
        torch.testing.assert_close(a, b)
    resumed = other.ppo_update(rows, seed=9)  # same optimiser state → the same next update
    assert resumed["loss"] == pytest.approx(continued["loss"], rel=1e-5)
    for a, b in zip(expected_after, _params(fresh), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_errors_say_what_to_do(tmp_path: Path) -> None:
    trainer = PolicyTrainer(tiny_model(), optim=OptimConfig())
    with pytest.raises(ConfigError, match="no trainable rows"):
        trainer.ppo_update([])
    with pytest.raises(ConfigError, match="not a local-trainer checkpoint"):
        trainer.load(tmp_path)


def test_token_logprobs_of_a_padded_batch_equal_each_row_alone(one_thread) -> None:  # type: ignore[no-untyped-def]
    """The batched forward (right padding without a mask, the tail after the last target not
    computed) gives every target the logprob a forward over its own row alone gives."""
    from toolgym.training.local.batch import collate
    from toolgym.training.local.trainer import token_logprobs

    # trailing mask-0 tokens (the next observation) and rows of different lengths
    rows = [
        make_row([1, 5, 6, 7, 8, 2, 3, 4, 9, 9], [0, 0, 1, 1, 0, 0, 0, 0, 0, 0]),
        make_row([1, 9, 10, 11], [0, 1, 1, 1]),
        make_row([1, 12, 13, 14, 15, 16, 17], [0, 0, 0, 1, 1, 0, 1]),
    ]
    model = tiny_model(seed=4)
    with torch.no_grad():
        batched, _ = token_logprobs(model, collate(rows, [0, 1, 2], pad_id=0))
        alone = []
        for r in rows:
            ids = torch.as_tensor(r.input_ids).unsqueeze(0)
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            alone += [
                float(logp[t - 1, int(r.input_ids[t])]) for t in range(1, len(r.input_ids)) if r.loss_mask[t]
            ]
    assert batched.tolist() == pytest.approx(alone, abs=1e-5)
