"""The ``toolgym:`` section of a verl training config: what the agent loop and trainer read.

A ``toolgym train`` config file has two sections: ``toolgym`` (this schema) and ``verl`` (merged
into verl's own ``ppo_trainer`` config). The composed config keeps the ``toolgym`` section at its
top level, where :class:`~toolgym.training.verl.agent_loop.ToolgymAgentLoop` and
:class:`~toolgym.training.verl.trainer.ToolgymPPOTrainer` find it in every Ray worker.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolgym.core.errors import ConfigError
from toolgym.core.rollout.arpo import ArpoConfig
from toolgym.core.rollout.config import EngineConfig
from toolgym.training.filters import EpisodeFilters
from toolgym.training.tasks import TaskRange

from .advantage import check_options
from .rows import Layout

Estimator = Literal["grpo", "gigpo", "arpo", "graphgpo"]


class AdvantageSettings(BaseModel):
    """Which toolgym estimator computes the advantages, and its options."""

    model_config = ConfigDict(extra="forbid")

    estimator: Estimator = "gigpo"
    """Registered with verl as ``toolgym_<estimator>`` (``graphgpo``: the local trainer only, for now)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of the estimator (GiGPO: gamma, omega, mode, invalid_penalty, ...)."""

    @model_validator(mode="after")
    def _options_fit(self) -> AdvantageSettings:
        check_options(self.estimator, self.options)
        return self

    @property
    def verl_name(self) -> str:
        return f"toolgym_{self.estimator}"


class ArpoRollout(BaseModel):
    """ARPO's entropy-based adaptive rollout (Dong et al., 2025), run by toolgym's engine: N
    rollouts per task from the start; after each tool result an episode forks with probability
    ``clip(tau + beta * ΔH, 0, 1)`` (ΔH: the rise of the next tokens' normalised entropy over the
    episode's first turn), at most ``branch_factor - 1`` forks per step, M rollouts per task in
    all. See ``toolgym.core.rollout.arpo``."""

    model_config = ConfigDict(extra="forbid")

    global_rollouts: int = Field(16, ge=1)
    """M: rollouts per task in total (toolgym.group_size)."""
    initial_rollouts: int = Field(8, ge=1)
    """N: rollouts sampled from the start."""
    tau: float = Field(0.5, ge=0.0, le=1.0)
    """Base branching probability."""
    beta: float = Field(0.2, ge=0.0)
    """Weight of the entropy change in the branching probability."""
    entropy_k: int = Field(20, ge=1)
    """Tokens after a tool result whose entropy is measured."""
    branch_factor: int = Field(2, ge=2)
    """B: a source forks at most B - 1 times per step."""

    @model_validator(mode="after")
    def _sizes(self) -> ArpoRollout:
        if self.initial_rollouts > self.global_rollouts:
            raise ConfigError(
                f"arpo.initial_rollouts ({self.initial_rollouts}) cannot exceed arpo.global_rollouts ({self.global_rollouts})"
            )
        return self

    def engine_arpo(self) -> ArpoConfig:
        return ArpoConfig(
            enabled=True,
            budget=self.global_rollouts,
            initial=self.initial_rollouts,
            tau=self.tau,
            beta=self.beta,
            entropy_k=self.entropy_k,
            branch_factor=self.branch_factor,
        )


class ToolgymSettings(BaseModel):
    """The ``toolgym:`` section.

    With ``arpo`` set, one agent-loop call runs a task's whole ARPO group (N initial rollouts and
    their forks, at most M trajectories) and returns all their rows; verl's ``rollout.n`` is then 1.
    """

    model_config = ConfigDict(extra="forbid")

    env: str
    """A registered environment name (``toolgym envs list``)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the environment's constructor."""
    layout: Layout = "trajectory"
    """``trajectory``: one verl row per token sequence; ``step``: one row per model call (GiGPO)."""
    group_size: int = Field(8, ge=1)
    """Rollouts per task (verl's ``actor_rollout_ref.rollout.n``)."""
    advantage: AdvantageSettings = Field(default_factory=AdvantageSettings)
    engine: dict[str, Any] = Field(default_factory=dict)
    """Engine limits (``toolgym.core.rollout.config.EngineConfig`` fields: max_turns, timeouts, ...)."""
    sandbox_backend: str = "auto"
    """``auto`` (Docker when it answers, else local), a backend name, or ``none``."""
    unsafe_in_process_sandbox: bool = False
    """Let a sandbox backend that isolates nothing (``memory``) run the policy's tool calls inside
    the trainer's process (beside its credentials and files); refused otherwise."""
    train: TaskRange = Field(default_factory=TaskRange)
    val: TaskRange = Field(default_factory=lambda: TaskRange(num_tasks=16, first_task=100_000))
    """Validation during training (verl's ``test_freq``, the local trainer's in-run evaluations): the
    environment's ``validation`` split in the shipped configs, what recipe and checkpoint choices may look at."""
    test: dict[str, TaskRange] = Field(default_factory=dict)
    """Test splits by name (ALFWorld: ``in_distribution``, ``out_of_distribution``): reported once per final
    configuration (``bench/learning_table.py --final-eval-tasks``); no trainer reads them, so nothing is chosen on them."""
    data_dir: str | None = None
    """Where the task-index Parquet files are written (default: under ``trainer.default_local_dir``)."""
    images_dir: str | None = None
    """With a vision-language model (verl gives the agent loop a processor): where episodes store
    their screenshots, by hash (default: a temporary directory per agent-loop worker)."""
    train_files: str | None = None
    """A task file to train on instead of the ``train`` range, e.g. one written by
    ``toolgym export verl`` (its rows name environment, task index and seed)."""
    val_files: str | None = None
    """Likewise for validation, instead of the ``val`` range."""
    arpo: ArpoRollout | None = None
    filters: EpisodeFilters = Field(default_factory=EpisodeFilters)
    """Which rollouts are trained on, masked or dropped (``toolgym.training.filters``); with verl,
    failed episodes make verl resample their group (see the agent loop), whatever this says."""
    tis_cap: float | None = Field(None, gt=0)
    """Truncated importance sampling of the rollout/trainer mismatch: None (default) is off; C
    (e.g. 2.0) weighs each token's policy-gradient term by ``min(π_train_old / π_rollout, C)``.
    verl: set as verl's own ``algorithm.rollout_correction`` (``rollout_is: token``,
    ``rollout_is_threshold: C``, ``bypass_mode: false``; see ``compose.py``). Local trainer:
    ``ppo.tis_cap``."""

    @field_validator("engine")
    @classmethod
    def _engine_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            EngineConfig(**value)
        except Exception as exc:
            raise ConfigError(f"toolgym.engine is invalid: {exc}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ToolgymSettings:
        if self.arpo is not None and self.advantage.estimator != "arpo":
            raise ConfigError(
                "toolgym.arpo is set but toolgym.advantage.estimator is not 'arpo'; remove one of them"
            )
        if self.arpo is not None and self.group_size != self.arpo.global_rollouts:
            raise ConfigError(
                f"toolgym.group_size ({self.group_size}) must equal arpo.global_rollouts ({self.arpo.global_rollouts}): "
                "ARPO's M is the number of rollouts per task"
            )
        return self

    def engine_config(self, *, max_prompt_len: int, max_response_len: int) -> EngineConfig:
        """The engine's limits, clamped so one call and one token sequence fit verl's lengths."""
        cfg = EngineConfig(**self.engine)
        per_turn = min(cfg.max_tokens_per_turn, max_response_len)
        per_sequence = min(cfg.max_tokens_per_trajectory, max_prompt_len + max_response_len)
        return cfg.model_copy(
            update={"max_tokens_per_turn": per_turn, "max_tokens_per_trajectory": per_sequence}
        )


def load_settings(section: Any) -> ToolgymSettings:
    """Parse the ``toolgym`` section of a (possibly OmegaConf) config; a clear error when absent."""
    if section is None:
        raise ConfigError(
            "the verl config has no `toolgym` section; start training with `toolgym train --config FILE` "
            "or add the section (env, advantage, ...) to your verl config"
        )
    from omegaconf import DictConfig, OmegaConf

    if isinstance(section, DictConfig):
        section = OmegaConf.to_container(section, resolve=True)
    if not isinstance(section, dict):
        raise ConfigError("the `toolgym:` section must be a mapping (env, advantage, ...)")
    try:
        return ToolgymSettings.model_validate(section)
    except ValidationError as exc:
        raise ConfigError(one_line("toolgym", exc, ToolgymSettings)) from None


def one_line(section: str, exc: Any, model: Any) -> str:
    """A pydantic validation error of a config section as one line: where, and what is wrong."""
    err = exc.errors()[0]
    where = ".".join([section, *(str(p) for p in err["loc"])])
    if err["type"] == "extra_forbidden":
        fields = ", ".join(model.model_fields) if len(err["loc"]) == 1 else "see the documentation"
        return f"unknown key {where}; known keys of `{section}:` are {fields}"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}: {err['msg']}{more}"
