"""Engine configuration: every limit, timeout and sampling setting of a rollout run.

Time limits are named ``<what>_timeout_s`` and are seconds, here and in the tools (``@tool(timeout_s=)``),
sandbox backends and environments we ship. The one exception is the ``timeout=`` keyword of the
``Sandbox`` protocol's ``run``/``execute`` (and the helpers that pass it straight through), the
name every sandbox backend implements and the sandbox agent's wire format uses.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, model_validator

from toolgym.core.rollout.arpo import ArpoConfig
from toolgym.core.sandbox import ACQUIRE_TIMEOUT_S
from toolgym.core.types import SamplingParams


class SamplingConfig(BaseModel):
    """Sampling settings applied to every model call of a run."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0)
    """0 means greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    """0 disables top-k truncation."""
    top_logprobs: int = Field(0, ge=0, le=100)
    """Alternatives per position to record (ARPO branching needs ≥ 20)."""

    def params(self, *, max_new_tokens: int, seed: int | None, stop: tuple[str, ...] = ()) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=seed,
            stop=stop,
            top_logprobs=self.top_logprobs,
        )


class EngineConfig(BaseModel):
    """Limits and timeouts of the rollout engine. Times are seconds."""

    model_config = ConfigDict(extra="forbid")

    max_live_episodes: int = Field(64, ge=1)
    """Episodes running at once."""
    max_llm_calls: int = Field(64, ge=1)
    """Model requests in flight at once."""
    max_sandboxes: int = Field(32, ge=1)
    """Sandboxes held at once across all episodes."""
    llm_timeout_s: float = Field(300.0, gt=0)
    """Per model call, each attempt."""
    env_timeout_s: float = Field(300.0, gt=0)
    """Per ``reset`` or ``step`` (tool calls run inside a step and have their own timeouts)."""
    episode_timeout_s: float = Field(3600.0, gt=0)
    sandbox_acquire_timeout_s: float = Field(ACQUIRE_TIMEOUT_S, gt=0)
    """Wait for a sandbox (a free slot, then a ready one from the backend), per acquire."""
    llm_retries: int = Field(3, ge=0)
    """Retries of a transient model error (connection reset, 429, 5xx, timeout)."""
    retry_backoff_s: float = Field(0.5, ge=0)
    """First backoff; doubles each retry, with jitter, capped at 20 s."""
    max_turns: int | None = Field(None, ge=1)
    """Turn limit; None: the environment's own (``Env.max_turns``). Never above the environment's."""
    max_tokens_per_turn: int = Field(512, ge=1)
    max_tokens_per_trajectory: int = Field(8192, ge=16)
    """Upper bound on a token sequence (prompt plus everything appended): the context budget."""
    seed: int = 0
    """Base seed: task ``i`` uses environment seed ``seed + i``; sampling seeds derive from it."""
    on_rewrite: Literal["new_sequence", "untrainable"] = "new_sequence"
    """What to do when the chat template rewrites history (see ``toolgym.core.tokens.assembly``)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    tune_gc: bool = True
    """Raise the garbage collector's threshold (and freeze older objects) while a run is going:
    fewer collections over the many live token lists, less CPU per turn."""
    arpo: ArpoConfig = Field(default_factory=ArpoConfig)
    """Entropy-based branching after tool results (off by default)."""

    _moved_group_size: int | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _group_size_moved(cls, data: Any, handler: ModelWrapValidatorHandler[EngineConfig]) -> EngineConfig:
        """``group_size`` was an engine field that the engine never read: it is how many episodes a
        run plans per task instance (``CollectOptions.group_size``, ``--group-size``,
        ``plan_episodes(group_size=...)``). The old key is still accepted, with a warning; its value
        is kept for ``CollectOptions`` to take over (see :meth:`moved_group_size`)."""
        if not (isinstance(data, dict) and "group_size" in data):
            return handler(data)
        data = dict(data)
        value = data.pop("group_size")
        warnings.warn(
            "EngineConfig(group_size=...) is deprecated: the engine never read it. Give it to the run instead: "
            "CollectOptions(group_size=...), `toolgym collect --group-size`, or plan_episodes(group_size=...) "
            "(the field goes in toolgym 0.2)",
            FutureWarning,
            stacklevel=3,
        )
        number = (
            int(value)
            if isinstance(value, int | str) and not isinstance(value, bool) and str(value).strip().isdigit()
            else 0
        )
        if number < 1:
            raise ValueError(f"group_size must be an integer of at least 1, got {value!r}")
        config = handler(data)
        config._moved_group_size = number
        return config

    def moved_group_size(self) -> int | None:
        """The ``group_size`` given to this config under its deprecated name, if any."""
        return self._moved_group_size
