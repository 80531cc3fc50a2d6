"""LoRA in the local trainer: only the adapter trains, the sampler serves it, checkpoints hold it,
and a LoRA run learns the demo task from the demo's warm start."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from local_helpers import tiny_model

from tests.required import need_module
from toolgym.core.errors import ConfigError
from toolgym.core.rollout.engine import plan_episodes
from toolgym.training.demo.run import DemoConfig, run_demo
from toolgym.training.local.batch import Row, trajectory_rows
from toolgym.training.local.config import LoraConfig, OptimConfig, PPOConfig, RLConfig
from toolgym.training.local.loop import run_episodes
from toolgym.training.local.lora import ADAPTER_WEIGHTS, attach_lora
from toolgym.training.local.trainer import PolicyTrainer
from toolgym.training.runner import build, load_config, open_loop

need_module("peft")

LORA = LoraConfig(rank=8, alpha=16.0)
LEARN_LR = 3e-3
"""For rank 8, alpha 16 on the demo model: 3e-3 and 5e-3 learn; 1e-2 collapsed (57.8 % → 14.1 % held-out)."""


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's warm start (scripted data → SFT to 35 % validation success), no RL: about 15 s."""
    out = tmp_path_factory.mktemp("demo")
    run_demo(DemoConfig(out=out, seed=0, threads=1, rl_steps=0, eval_tasks=8))
    return out / "warm-start"


def _rl(
    steps: int,
    *,
    lora: LoraConfig = LORA,
    lr: float = LEARN_LR,
    tasks: int = 8,
    warmup: int = 0,
    eval_tasks: int = 128,
    seed: int = 0,
) -> RLConfig:
    """The demo's RL settings (GiGPO, group 8, temperature 0.5, held-out = the demo's test-split tasks, greedy)."""
    cfg = DemoConfig(
        seed=seed,
        rl_steps=steps,
        rl_lr=lr,
        rl_warmup=warmup,
        tasks_per_step=tasks,
        eval_tasks=eval_tasks,
        eval_every=0,
    )
    return cfg.rl_config().model_copy(update={"lora": lora})


def _base_and_adapter(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    adapter = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    return base, adapter


def test_only_the_adapter_trains(rows: list[Row]) -> None:
    model = tiny_model()
    adapter = attach_lora(model, LORA, seed=0)
    trainer = PolicyTrainer(
        model,
        optim=OptimConfig(lr=1e-2),
        ppo=PPOConfig(mini_batch_size=2, micro_batch_size=1),
        adapter=adapter,
    )
    trainable = {id(p) for n, p in model.named_parameters() if "lora_" in n}
    in_optimizer = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert (
        in_optimizer == trainable and len(trainable) == 2 * 7
    )  # A and B on q, k, v, o, gate, up, down of the one layer
    base_before, adapter_before = _base_and_adapter(model)
    for k in range(3):
        trainer.ppo_update(rows, seed=k)
    base_after, adapter_after = _base_and_adapter(model)
    assert base_before.keys() == base_after.keys() and len(base_before) > 0
    for name, tensor in base_before.items():
        assert torch.equal(tensor, base_after[name]), f"base weight {name} changed"
    for name, tensor in adapter_before.items():
        assert not torch.equal(tensor, adapter_after[name]), f"adapter weight {name} did not change"


def _rows_of(trajectories: list[Any]) -> list[Row]:
    return [r for t in trajectories if t.trainable for r in trajectory_rows(t)]


async def _sample(loop: Any, first_task: int, tasks: int = 4) -> list[Any]:
    cfg = loop.config
    requests = plan_episodes(
        cfg.env, num_tasks=tasks, group_size=cfg.group_size, seed=cfg.seed, first_task=first_task
    )
    return await run_episodes(loop.train_engine, requests)


def test_the_sampler_serves_the_updated_adapter(warm_start: Path) -> None:
    """After an update the sampler's logprobs of its own tokens equal the trainer's recomputation:
    the rollouts come from the updated adapter, not from the base weights or a stale copy."""

    async def main() -> None:
        loop, _, close = open_loop(_rl(1, tasks=4), warm_start)
        try:
            log = await loop.step()
            assert log.metrics and loop.trainer.step >= 1  # an update happened
            adapter = {n: p for n, p in loop.trainer.model.named_parameters() if "lora_B" in n}
            assert any(p.abs().max() > 0 for p in adapter.values())  # B moved off its zero start
            trajectories = await _sample(loop, first_task=1000)
            assert all(t.weight_version == str(loop.trainer.step) for t in trajectories)
            rows = _rows_of(trajectories)
            recomputed, _ = loop.trainer.with_trainer_logprobs(rows, cap=2.0)
            sampled = np.concatenate([r.rollout_logprobs[r.loss_mask.astype(bool)] for r in recomputed])  # type: ignore[index]
            trainer = np.concatenate([r.old_logprobs[r.loss_mask.astype(bool)] for r in recomputed])
            assert sampled.size > 50
            # float32 noise of batched KV-cached decoding vs one padded forward pass: measured max 4.5e-6, mean 9e-8
            np.testing.assert_allclose(sampled, trainer, atol=2e-5, rtol=0)
            assert float(np.abs(sampled - trainer).mean()) < 1e-6
            # and the adapter matters: the base weights alone give other logprobs
            with loop.trainer.adapter.disable_adapter():
                base, _ = loop.trainer.with_trainer_logprobs(rows, cap=2.0)
            base_lp = np.concatenate([r.old_logprobs[r.loss_mask.astype(bool)] for r in base])
            assert float(np.abs(base_lp - trainer).max()) > 1e-3
        finally:
            await close()

    asyncio.run(main())


def test_a_checkpoint_holds_the_adapter_and_resumes_to_the_same_outputs(
    warm_start: Path, tmp_path: Path
) -> None:
    rl = _rl(2, tasks=4, eval_tasks=32)

    async def train_and_save() -> tuple[Path, torch.Tensor, torch.Tensor, tuple[float, float], int]:
        loop, tokenizer, close = open_loop(rl, warm_start)
        try:
            await loop.step()
            saved = loop.save(tmp_path / "step-00001", tokenizer=tokenizer)
            probe = torch.tensor([tokenizer.encode("You are in room 3. Keys: ")])
            with torch.no_grad():
                expected = loop.trainer.model(probe).logits
            result = await loop.evaluate()
            return saved, probe, expected, (result.success, result.mean_reward), loop.trainer.step
        finally:
            await close()

    saved, probe, expected, expected_eval, step = asyncio.run(train_and_save())
    full = sum(p.stat().st_size for p in warm_start.glob("*.safetensors"))
    adapter_bytes = (saved / ADAPTER_WEIGHTS).stat().st_size
    assert not (saved / "model.safetensors").exists() and (saved / "adapter_config.json").is_file()
    assert adapter_bytes * 5 < full, (adapter_bytes, full)
    assert (saved / "trainer_state.pt").stat().st_size < full  # optimiser moments of the adapter only

    async def resume() -> None:
        again, _, close = open_loop(
            rl.model_copy(update={"seed": 123}), warm_start
        )  # another draw of A, then overwritten
        try:
            again.resume(saved)
            assert again.next_step == 1 and again.trainer.step == step
            with torch.no_grad():
                assert torch.equal(again.trainer.model(probe).logits, expected)
            result = await again.evaluate()
            assert (result.success, result.mean_reward) == expected_eval
        finally:
            await close()
        plain, _, close = open_loop(rl.model_copy(update={"lora": LoraConfig()}), warm_start)
        try:
            with pytest.raises(ConfigError, match="holds a LoRA adapter only"):
                plain.resume(saved)
        finally:
            await close()

    asyncio.run(resume())


def test_the_verl_keys_set_the_adapter() -> None:
    rl, _ = build(load_config("keychain_gigpo", ["verl.actor_rollout_ref.model.lora_rank=16"]))
    assert rl.lora == LoraConfig(
        rank=16, alpha=16.0, target_modules="all-linear"
    )  # verl's defaults besides the rank
    rl, _ = build(
        load_config(
            "keychain_gigpo",
            [
                "verl.actor_rollout_ref.model.lora_rank=4",
                "verl.actor_rollout_ref.model.lora_alpha=8",
                "verl.actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
            ],
        )
    )
    assert rl.lora == LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj"])
    assert not build(load_config("keychain_gigpo", []))[0].lora.enabled
    with pytest.raises(ConfigError, match="lora_adapter_path is read by the verl trainer only"):
        build(load_config("keychain_gigpo", ["+verl.actor_rollout_ref.model.lora_adapter_path=/tmp/x"]))


MARGIN = 0.10
"""Held-out success must rise by this much over the warm start (128 greedy tasks: 0.8 points each).
Measured with these settings (README, "LoRA"): +23 to +35 points over the demo's seeds 0-2 (seed 0,
the one run here: +33), +22 to +39 at lr 5e-3; runs do not repeat bit for bit, so the margin sits
under half the smallest rise seen."""


def test_a_lora_run_learns_the_demo_task(warm_start: Path) -> None:
    async def main() -> tuple[float, float]:
        loop, _, close = open_loop(_rl(20, tasks=16, warmup=3), warm_start)
        try:
            before = await loop.evaluate()
            history = await loop.train()
        finally:
            await close()
        after = history[-1].eval
        assert after is not None
        return before.success, after.success

    before, after = asyncio.run(main())
    assert not math.isnan(after)
    assert after >= before + MARGIN, f"held-out success {before:.1%} → {after:.1%}"


def test_full_weight_checkpoints_still_round_trip_and_do_not_pass_for_adapters(
    tmp_path: Path, rows: list[Row]
) -> None:
    model = tiny_model()
    trainer = PolicyTrainer(
        model, optim=OptimConfig(lr=1e-2), ppo=PPOConfig(mini_batch_size=4, micro_batch_size=2)
    )
    trainer.ppo_update(rows)
    trainer.save(tmp_path / "full")
    assert (tmp_path / "full" / "model.safetensors").is_file() and not (
        tmp_path / "full" / ADAPTER_WEIGHTS
    ).exists()
    restored = PolicyTrainer(tiny_model(seed=1), optim=OptimConfig(lr=1e-2))
    restored.load(tmp_path / "full")
    for a, b in zip(model.state_dict().values(), restored.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    other = tiny_model()
    with pytest.raises(ConfigError, match="holds full weights, not a LoRA adapter"):
        PolicyTrainer(other, optim=OptimConfig(), adapter=attach_lora(other, LORA)).load(tmp_path / "full")


def test_the_kl_reference_of_a_lora_run_is_checkpointed_as_its_adapter(
    tmp_path: Path, rows: list[Row]
) -> None:
    def lora_trainer(seed: int) -> PolicyTrainer:
        model = tiny_model()
        return PolicyTrainer(
            model,
            optim=OptimConfig(lr=1e-2),
            ppo=PPOConfig(kl_coef=0.1, mini_batch_size=4, micro_batch_size=2),
            adapter=attach_lora(model, LORA, seed=seed),
        )

    trainer = lora_trainer(0)
    for k in range(2):
        metrics = trainer.ppo_update(rows, seed=k)
    assert metrics["kl_ref"] != 0.0
    trainer.save(tmp_path / "ckpt")
    reference = torch.load(tmp_path / "ckpt" / "trainer_state.pt", weights_only=False)["reference"]
    assert reference and all("lora_" in k for k in reference)  # the frozen base is the model's own
    restored = lora_trainer(1)
    restored.load(tmp_path / "ckpt")
    for a, b in zip(
        trainer.reference.state_dict().values(), restored.reference.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
