"""Settings of the local reference trainer. Learning rates are per optimiser step; sizes count rows
(token sequences) unless they say tasks or episodes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolgym.core.errors import ConfigError
from toolgym.core.rollout.config import EngineConfig
from toolgym.training.filters import EpisodeFilters
from toolgym.training.tasks import TaskRange

from .loss import AggMode, KLEstimator


class OptimConfig(BaseModel):
    """AdamW and gradient clipping."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-5, gt=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    """Global gradient-norm clip per optimiser step."""


class PPOConfig(BaseModel):
    """The policy loss and how a batch is split into optimiser steps and forward passes."""

    model_config = ConfigDict(extra="forbid")

    clip_low: float = Field(0.2, ge=0, lt=1)
    """ε_low: the ratio is clipped below at 1 − ε_low."""
    clip_high: float = Field(0.2, ge=0)
    """ε_high: the ratio is clipped above at 1 + ε_high (DAPO's clip-higher uses 0.28)."""
    loss_agg: AggMode = "token-mean"
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL(π‖π_ref) loss term; > 0 keeps a frozen copy of the starting weights."""
    kl_estimator: KLEstimator = "k3"
    epochs: int = Field(1, ge=1)
    """Passes over each batch of rollouts."""
    mini_batch_size: int = Field(64, ge=1)
    """Rows per optimiser step."""
    micro_batch_size: int = Field(16, ge=1)
    """Rows per forward/backward pass (gradient accumulation up to ``mini_batch_size``)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the rollouts: logprobs are recomputed at the same one."""
    tis_cap: float | None = Field(None, gt=0)
    """Truncated importance sampling of the rollout/trainer mismatch (``loss.py``): None (default)
    is off; C (e.g. 2.0) recomputes the old logprobs with the trainer before each update and
    weighs each token's surrogate by ``min(π_train_old / π_rollout, C)``."""


class LoraConfig(BaseModel):
    """A LoRA adapter on the policy (verl's ``actor_rollout_ref.model.lora_*`` keys): with ``rank`` > 0
    only the adapter is trained and checkpointed, and the sampler runs the base weights plus the
    adapter as the trainer does (``lora.py``)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(0, ge=0)
    """LoRA rank r; 0 (default) trains every weight instead."""
    alpha: float = Field(16.0, gt=0)
    """Scaling numerator: the update is ``alpha / rank · B A``."""
    target_modules: str | list[str] = "all-linear"
    """Module names (or a regex string) to adapt; ``all-linear`` is every linear layer but the LM head."""
    exclude_modules: str | list[str] | None = None
    """Module names (or a regex string) never to adapt."""

    @property
    def enabled(self) -> bool:
        return self.rank > 0


class EvalConfig(TaskRange):
    """Held-out evaluation: the same range of tasks every time, greedy unless ``temperature`` > 0."""

    seed: int = 1_000_003
    """Base environment seed of the held-out tasks (task ``i`` uses ``seed + i``)."""
    temperature: float = Field(0.0, ge=0)
    every: int = Field(5, ge=0)
    """Evaluate every this many RL steps (0: only before and after training)."""


class RLConfig(BaseModel):
    """The on-policy loop: sample groups with the engine, compute advantages, update, repeat."""

    model_config = ConfigDict(extra="forbid")

    env: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    estimator: Literal["grpo", "gigpo", "arpo", "graphgpo"] = "gigpo"
    estimator_options: dict[str, Any] = Field(default_factory=dict)
    group_size: int = Field(8, ge=1)
    tasks_per_step: int = Field(16, ge=1)
    """Task instances per RL step; each is sampled ``group_size`` times."""
    steps: int = Field(50, ge=0)
    seed: int = 0
    """Base seed: training task ``i`` uses environment seed ``seed + i``; sampling seeds derive from it."""
    first_task: int = Field(0, ge=0)
    engine: dict[str, Any] = Field(default_factory=dict)
    """``EngineConfig`` fields (max_turns, max_tokens_per_turn, ...); sampling comes from ``ppo.temperature``."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up, in optimiser steps."""
    save_every: int = Field(0, ge=0)
    """Save a checkpoint every this many RL steps (0: only at the end)."""
    max_batch_size: int = Field(128, ge=1)
    """Rows the sampler decodes together."""
    filters: EpisodeFilters = Field(default_factory=EpisodeFilters)
    """Which rollouts are trained on, masked or dropped (``toolgym.training.filters``)."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """Train a LoRA adapter instead of every weight (off unless ``lora.rank`` > 0)."""
    freeze_vision_tower: bool = False
    """A vision-language model's tower keeps its weights; the text model (and merger-fed layers after
    it) trains. verl's ``actor_rollout_ref.actor.freeze_vision_tower``."""

    @model_validator(mode="after")
    def _engine_fields(self) -> RLConfig:
        try:
            self.engine_config()
        except Exception as exc:
            raise ConfigError(f"engine settings are invalid: {exc}") from None
        return self

    def engine_config(self, *, temperature: float | None = None, seed: int | None = None) -> EngineConfig:
        """The engine's settings for rollouts (``temperature`` None: ``ppo.temperature``)."""
        sampling = {"temperature": self.ppo.temperature if temperature is None else temperature}
        fields = {**self.engine, "seed": self.seed if seed is None else seed}
        fields["sampling"] = {**fields.get("sampling", {}), **sampling}
        fields.setdefault("max_llm_calls", self.max_batch_size)
        fields.setdefault("max_live_episodes", self.max_batch_size)
        return EngineConfig(**fields)
