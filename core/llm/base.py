"""Model backends. Token-in/token-out (``LLMBackend``) for training; text chat (``ChatBackend``)
for offline collection from black-box models, whose trajectories are marked not token-faithful.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..types import ChatResult, GenerationRequest, GenerationResult, Message, SamplingParams


class LLMBackend(ABC):
    """Generates from exact token ids and returns exact sampled ids with logprobs.

    ``tokenizer`` is a Hugging Face tokenizer (with a chat template) matching the model's ids;
    the engine renders prompts with it. Implementations raise ``LLMError(transient=True)`` for
    errors worth retrying (connection reset, 429, 503) and must be safe to call concurrently.
    """

    token_faithful: ClassVar[bool] = True
    name: str = ""
    model_name: str = ""
    tokenizer: Any = None
    max_context_len: int | None = None
    """The model's context length in tokens (prompt plus completion) when the backend knows it, else
    None; the engine caps its context budget to it (``server_info.fit_context_budget``)."""

    @abstractmethod
    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    async def aclose(self) -> None:
        """Release connections, threads and models."""

    @property
    def weight_version(self) -> str | None:
        return None


class ChatBackend(ABC):
    """A text-only chat API. Its trajectories are recorded with ``token_faithful = False``."""

    token_faithful: ClassVar[bool] = False
    name: str = ""
    model_name: str = ""
    tokenizer: Any = None
    """Optional: when set, text is tokenized for reading and export, never for training."""

    @abstractmethod
    async def chat(
        self, messages: Sequence[Message], *, tools: Sequence[dict[str, Any]] | None, sampling: SamplingParams
    ) -> ChatResult: ...

    async def aclose(self) -> None:
        """Release connections."""


@dataclass(slots=True)
class LLMBackendSpec:
    """How a plugin offers a backend. ``factory(model, **options)`` returns an LLMBackend or ChatBackend."""

    name: str
    factory: Callable[..., LLMBackend | ChatBackend]
    description: str = ""
    plugin: str = ""
    options: dict[str, Any] = field(default_factory=dict)
