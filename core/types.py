"""Value types shared by every part of toolgym.

Messages are plain dicts in the shape chat templates expect (``role``, ``content``, optional
``tool_calls``, ``name``, ``tool_call_id``), so they go to a tokenizer's template untouched.
Everything else here is a small frozen dataclass: cheap to build on the rollout hot path.
Pydantic models live at the boundaries (config, trajectory schema), not here.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, Any]
"""A chat message: ``{"role": ..., "content": ...}`` plus optional template fields."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for, as parsed from its output."""

    name: str
    arguments: dict[str, Any]
    id: str = ""
    raw: str = ""
    """The exact text the call was parsed from."""


def tool_call_id(raw: str, index: int) -> str:
    """A call's id when the model gave none: 9 lowercase hex characters from its text and position.

    OpenAI-format messages pair each tool result with its call by ``tool_call_id``; Mistral's
    template demands exactly 9 alphanumeric characters, which also suits every other format. The
    id is deterministic (a resumed or replayed episode renders the same tokens); the same call
    text at the same position in two turns gets the same id.
    """
    return hashlib.blake2b(f"{index}:{raw}".encode(), digest_size=8).hexdigest()[:9]


class ActionKind(enum.StrEnum):
    TOOL_CALLS = "tool_calls"
    """The model called one or more tools."""
    ANSWER = "answer"
    """The model gave a final answer (no tool call)."""
    COMMAND = "command"
    """Free-text environment command (``search[...]``, ``go to desk 1``)."""
    INVALID = "invalid"
    """The output could not be parsed; ``error`` says why."""


@dataclass(slots=True)
class Action:
    """What the model did in one turn, after parsing.

    ``text`` is the model's whole output (decoded for reading and parsing only, never re-encoded).
    """

    text: str
    kind: ActionKind
    tool_calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    command: str | None = None
    error: str | None = None
    thought: str | None = None

    @property
    def valid(self) -> bool:
        return self.kind is not ActionKind.INVALID


FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings for one model call. Logprobs are of the temperature-scaled distribution
    before top-p/top-k truncation (what the trainer recomputes)."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k truncation."""
    seed: int | None = None
    stop: tuple[str, ...] = ()
    """Stop strings; the tokens that complete one are kept in the output (they were sampled)."""
    stop_token_ids: tuple[int, ...] = ()
    top_logprobs: int = 0
    """How many alternatives per position to return (ARPO needs ≥ 20)."""

    def replace(self, **changes: Any) -> SamplingParams:
        from dataclasses import replace

        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """Token in: the exact ids the model is conditioned on."""

    input_ids: list[int]
    sampling: SamplingParams
    request_id: str = ""
    images: list[bytes] = field(default_factory=list)
    """Encoded images (PNG bytes) of the prompt, in the order of their image-token runs in
    ``input_ids`` (a vision-language model's pixel inputs); empty for text prompts."""


@dataclass(slots=True)
class GenerationResult:
    """Token out: the ids the model sampled, verbatim, with their logprobs."""

    output_ids: list[int]
    logprobs: list[float] | None
    finish_reason: FinishReason
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """Per output position, the ``top_logprobs`` most likely (token id, logprob) pairs."""
    weight_version: str | None = None
    prompt_tokens: int = 0
    latency_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ChatResult:
    """Text out, from a black-box chat API: not token-faithful."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    latency_s: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class ExecResult:
    """What a command run in a sandbox produced. ``duration_s`` is wall-clock seconds."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    oom_killed: bool = False

    @property
    def output(self) -> str:
        """stdout followed by stderr, as a model would read a terminal."""
        if self.stdout and self.stderr:
            sep = "" if self.stdout.endswith("\n") else "\n"
            return f"{self.stdout}{sep}{self.stderr}"
        return self.stdout or self.stderr

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
