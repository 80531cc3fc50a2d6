"""The single-process reference trainer: PPO-clip policy gradient on token-faithful trajectories.

CPU or one GPU. It shares toolgym's advantage estimators (GRPO, GiGPO, ARPO) with the verl bridge,
samples with the in-process ``TransformersBackend`` (KV cache, continuous batching) that shares
its model object, and reads the same config file as ``toolgym train`` (its entry point: :mod:`toolgym.training.runner`).

- :mod:`.loss`: PPO-clip, KL to a reference (k1/k3), SFT cross-entropy, aggregation modes
- :mod:`.batch`: trajectories → rows → padded micro-batches (no re-tokenization)
- :mod:`.trainer`: ``PolicyTrainer`` (AdamW, gradient accumulation and clipping, checkpoints)
- :mod:`.lora`: LoRA adapters through peft (verl's ``lora_rank`` / ``lora_alpha`` / ``target_modules``)
- :mod:`.sft`: supervised warm start on stored trajectories
- :mod:`.loop`: ``RLLoop``, the on-policy loop, and held-out evaluation
- the entry point of `toolgym train --trainer local` is :mod:`toolgym.training.runner`; the demo is
  :mod:`toolgym.training.demo`, warm starts :mod:`toolgym.training.warmstart`
"""

from __future__ import annotations

from typing import Any

from .config import EvalConfig, LoraConfig, OptimConfig, PPOConfig, RLConfig

__all__ = ["EvalConfig", "LoraConfig", "OptimConfig", "PPOConfig", "RLConfig"]


def __getattr__(name: str) -> Any:  # lazy: importing the package must not import torch
    if name in ("PolicyTrainer", "token_logprobs"):
        from . import trainer

        return getattr(trainer, name)
    if name in ("RLLoop", "EvalResult", "StepLog"):
        from . import loop

        return getattr(loop, name)
    raise AttributeError(name)
