"""Engine configuration: every limit, timeout and sampling setting of a rollout run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .arpo import ArpoConfig
from .sandbox import ACQUIRE_TIMEOUT_S
from .types import SamplingParams


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
    group_size: int = Field(1, ge=1)
    """Episodes per task instance, all with the same environment seed."""
    seed: int = 0
    """Base seed: task ``i`` uses environment seed ``seed + i``; sampling seeds derive from it."""
    on_rewrite: Literal["new_sequence", "untrainable"] = "new_sequence"
    """What to do when the chat template rewrites history (see ``toolgym.core.assembly``)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    tune_gc: bool = True
    """Raise the garbage collector's threshold (and freeze older objects) while a run is going:
    fewer collections over the many live token lists, less CPU per turn."""
    arpo: ArpoConfig = Field(default_factory=ArpoConfig)
    """Entropy-based branching after tool results (off by default)."""
