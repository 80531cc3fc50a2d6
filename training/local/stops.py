"""Stop generation at the end of the action: a thin wrapper over a sampling backend.

verl-agent's formats end an action with ``</action>``, but the ``think_action`` parser declares no
stop string, so a model that keeps writing after its action pays for every extra token (and at the
start of RL a tiny model often does). :class:`StopAtBackend` adds stop strings to every request
it forwards and passes everything else (``model``, ``tokenizer``, ``paused``, weight versions)
through, so the local loop's invariant ``backend.model is trainer.model`` still holds. The ids the
backend returns are kept verbatim, the ids that complete a stop string included.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from toolgym.core.llm.base import LLMBackend
from toolgym.core.types import GenerationRequest, GenerationResult

ACTION_STOPS: dict[str, tuple[str, ...]] = {"think_action": ("</action>",)}
"""Parser name → the strings that end an action in its format."""


class StopAtBackend(LLMBackend):
    """Forwards to ``backend``, adding ``stops`` to each request's stop strings."""

    def __init__(self, backend: LLMBackend, stops: tuple[str, ...]) -> None:
        self.backend = backend
        self.stops = tuple(stops)
        # LLMBackend declares these on the class, so __getattr__ would not reach them
        self.name = getattr(backend, "name", "")
        self.model_name = getattr(backend, "model_name", "")
        self.tokenizer = getattr(backend, "tokenizer", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        stop = tuple(dict.fromkeys((*request.sampling.stop, *self.stops)))
        result: GenerationResult = await self.backend.generate(
            replace(request, sampling=request.sampling.replace(stop=stop))
        )
        return result

    @property
    def weight_version(self) -> str | None:
        return self.backend.weight_version

    async def aclose(self) -> None:
        await self.backend.aclose()


def action_stops(registry: Any, env: str, env_kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The stop strings of the parser ``env`` uses with ``env_kwargs`` (none for other formats)."""
    instance = registry.env(env).make(**env_kwargs)
    return ACTION_STOPS.get(str(getattr(instance, "parser", "")), ())
