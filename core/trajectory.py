"""The trajectory schema: what one episode leaves behind, token-faithfully.

The engine (in ``toolgym.core``) produces these, so the schema lives here; ``toolgym.trajectories``
re-exports it and holds the stores, exports and verifier built on it.

Token layout: a trajectory has one or more token *sequences* (one context window each). Each
sequence is the concatenation of its segments, in order. A segment is a run of tokens from one
source: the rendered prompt, the model's sampled ids (``loss_mask`` 1, with ``logprobs``), or the
rendered delta of a tool or environment message (``loss_mask`` 0). A new sequence starts only when
the chat template rewrote history or the environment rebuilds its prompt each step (a history
window); ``steps[i].llm.sequence`` says which sequence a model call used.
"""

from __future__ import annotations

import enum
import hashlib
import sys
from array import array
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Status(enum.StrEnum):
    OK = "ok"
    """Finished normally (terminated or truncated by a limit)."""
    ERROR = "error"
    """Stopped by an error (LLM, tool, environment, timeout); ``status_reason`` says which."""
    UNTRAINABLE = "untrainable"
    """Finished, but must not be trained on (not token-faithful, template rewrote history)."""


SegmentRole = Literal["prompt", "assistant", "tool", "user", "env", "inline"]


class Segment(BaseModel):
    """A run of tokens from one source inside one sequence."""

    model_config = ConfigDict(extra="forbid")

    sequence: int = 0
    """Index of the token sequence (context window) this segment belongs to; ≥ 0, non-decreasing."""
    role: SegmentRole
    """``assistant``: sampled by the model. Anything else: rendered by toolgym from messages."""
    token_ids: list[int]
    """Token ids exactly as the model saw (mask 0) or sampled (mask 1) them."""
    loss_mask: list[int]
    """Same length as ``token_ids``; 1 exactly on model-sampled ids, 0 elsewhere."""
    logprobs: list[float] | None = None
    """Same length as ``token_ids`` for assistant segments from a sampling backend; None otherwise."""
    text: str = ""
    """Decoded text, for reading only: never re-encoded."""


class LLMCall(BaseModel):
    """One model call: what it was conditioned on and what it returned."""

    model_config = ConfigDict(extra="forbid")

    sequence: int = 0
    """The token sequence the prompt came from."""
    prompt_len: int
    """Number of leading tokens of that sequence sent as the prompt."""
    prompt_sha256: str = ""
    """sha256 (hex, first 32 chars) of the prompt ids as little-endian int32; lets ``verify`` prove the prefix."""
    segment: int
    """Index into ``Trajectory.segments`` of the assistant segment holding the sampled ids."""
    completion_tokens: int
    finish_reason: str = "stop"
    latency_s: float = 0.0
    """Wall-clock seconds of the call, retries included."""
    attempts: int = 1
    weight_version: str | None = None


class ToolCallRecord(BaseModel):
    """One tool call made during a step and what it returned."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    output: str = ""
    error: bool = False
    duration_s: float = 0.0
    files: list[str] = Field(default_factory=list)
    """Files the call produced (screenshots), relative to the dataset directory."""


class Step(BaseModel):
    """One turn: the model acts, the environment answers."""

    model_config = ConfigDict(extra="forbid")

    index: int
    action: str
    """The model's output text for this turn (decoded, for reading)."""
    action_kind: str = "answer"
    observation: str = ""
    """What the environment or tools answered, as text."""
    step_reward: float = 0.0
    anchor: str = ""
    """Digest of the environment state *before* the action; equal anchors form GiGPO step groups."""
    valid: bool = True
    """False when the action could not be parsed or was not admissible."""
    error: str | None = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    llm: LLMCall | None = None
    env_s: float = 0.0
    """Seconds spent in the environment's ``step`` (tools included)."""
    info: dict[str, Any] = Field(default_factory=dict)


class Timings(BaseModel):
    """Where the episode's wall-clock time went, in seconds."""

    model_config = ConfigDict(extra="forbid")

    total_s: float = 0.0
    llm_s: float = 0.0
    tool_s: float = 0.0
    env_s: float = 0.0
    sandbox_s: float = 0.0
    """Acquiring and releasing sandboxes."""


class Trajectory(BaseModel):
    """One episode, token-faithful when ``token_faithful`` is true and ``status`` is ok."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    trajectory_id: str
    group_id: str
    """Same for every sample of one task instance (task × seed) of one run (its run key, see
    ``core.requests``); GRPO/GiGPO groups by it."""
    parent_id: str | None = None
    """ARPO: the trajectory this one branched from."""
    branch_point: int | None = None
    """ARPO: number of leading tokens of sequence 0 shared with the parent."""
    task: str
    """Task or environment name."""
    task_index: int = 0
    sample_index: int = 0
    """Position of this sample within its group, 0 ≤ sample_index < group size."""
    seed: int = 0
    """Environment seed; equal within a group."""
    env: str = ""
    model: str = ""
    sampling: dict[str, Any] = Field(default_factory=dict)
    prompt: list[dict[str, Any]] = Field(default_factory=list)
    """The initial messages (for reading and SFT export)."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The whole conversation as messages (for reading and SFT export)."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tool schemas shown to the model."""
    segments: list[Segment] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    """The task ended (answer given, goal reached or failed for good)."""
    truncated: bool = False
    """A limit ended it (turns, tokens, time)."""
    truncation_reason: str | None = None
    status: Status = Status.OK
    status_reason: str | None = None
    token_faithful: bool = True
    """False for black-box chat backends and scripted policies without a sampling model."""
    timings: Timings = Field(default_factory=Timings)
    weight_version: str | None = None
    created_at: float = 0.0
    """Unix time the episode finished."""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity within a collection run: (task, task index, sample index)."""
        return (self.task, self.task_index, self.sample_index)

    @property
    def num_sequences(self) -> int:
        return 1 + max((s.sequence for s in self.segments), default=0)

    def sequence_ids(self, sequence: int = 0) -> list[int]:
        return [t for s in self.segments if s.sequence == sequence for t in s.token_ids]

    def sequence_mask(self, sequence: int = 0) -> list[int]:
        return [m for s in self.segments if s.sequence == sequence for m in s.loss_mask]

    @property
    def trainable(self) -> bool:
        return self.status is Status.OK and self.token_faithful


def int32_bytes(ids: list[int]) -> bytes:
    """Token ids as little-endian int32 bytes (what ``prompt_digest`` hashes)."""
    buf = array("i", ids)
    if sys.byteorder == "big":  # pragma: no cover
        buf.byteswap()
    return buf.tobytes()


def prompt_digest(ids: list[int]) -> str:
    """The digest stored in ``LLMCall.prompt_sha256``."""
    return hashlib.sha256(int32_bytes(ids)).hexdigest()[:32]
