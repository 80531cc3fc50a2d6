"""The environment contract, one page, Gymnasium-shaped: ``Env`` and the ``StepResult`` of a step.

An episode: ``reset(seed)`` → the first messages; then, each turn, the engine samples the model,
parses its output into an ``Action`` and calls ``step(action)`` → ``StepResult`` (observation,
reward, terminated, truncated, info). ``terminated`` means the task ended (an answer, a purchase,
a goal reached); ``truncated`` means a limit stopped it. Environments are async because their
steps call sandboxes and servers; a step must never block the event loop for long.

What the engine hands an environment for one episode (sandboxes, ids, resources) is the
``EpisodeContext`` of :mod:`toolgym.core.env.context`, importable from here too. Registering an
environment is :mod:`toolgym.core.env.spec`; the tool-use task built on this contract,
``ToolTaskEnv``, is :mod:`toolgym.core.env.tool_task`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.env.context import (
    EpisodeContext as EpisodeContext,  # re-exported: environments' code imports it from here
)
from toolgym.core.sandbox import ImageNeed
from toolgym.core.tools import Tool
from toolgym.core.trajectory import ToolCallRecord
from toolgym.core.types import Action, Message


@dataclass(slots=True)
class StepResult:
    """What the environment answers to one action."""

    observation: list[Message] | str
    """Messages rendered through the chat template (tool results, user turns), or a string appended
    verbatim inside the model's turn (Search-R1-style ``<information>`` blocks)."""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    valid: bool = True
    """False when the action was malformed or not admissible (GiGPO's invalid-action penalty)."""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)


class Env(ABC):
    """Base class of every environment. Subclasses set ``tools`` and ``parser`` as they need."""

    tools: Sequence[Tool] = ()
    """Tools shown to the model (their schemas go into the chat template)."""
    parser: str = "hermes"
    """Name of the tool-call parser that turns model text into an ``Action``."""
    max_turns: int = 16
    """The environment's own turn limit; the engine's limit, if lower, wins."""
    stop: tuple[str, ...] = ()
    """Extra stop strings for sampling (for XML-tag actions such as ``</python>``)."""
    max_images: int | None = None
    """The most image parts a model call's prompt holds (None: all). When an observation brings
    one more, the engine replaces the oldest by a short text (``tokens.images.limit_images``) and
    starts a new token sequence from the rewritten messages: each sequence records exactly the
    images its calls saw."""

    ctx: EpisodeContext

    def bind(self, ctx: EpisodeContext) -> None:
        """Called by the engine before ``reset``."""
        self.ctx = ctx

    @abstractmethod
    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; return the first messages (system and user) and an info dict.

        Equal seeds give equal episodes: that is what makes a GRPO/GiGPO group.
        """

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Apply the model's action."""

    def anchor(self) -> str:
        """Digest of the current state for GiGPO step grouping. Default: the last observation text."""
        return ""

    def step_prompt(self) -> list[Message] | None:
        """For environments that rebuild the prompt each turn (a history window): the full
        messages for the next model call, which then starts a new token sequence. Default: None,
        one growing conversation."""
        return None

    async def scripted_action(self) -> str | None:
        """A solving action for the current state, as model text (for ``--model scripted``)."""
        return None

    def unscripted_task(self, seeds: Sequence[int]) -> str | None:
        """The first task, among the episodes of ``seeds``, that ``scripted_action`` cannot play (its
        name); None when it can play them all or the environment cannot tell. ``--model scripted``
        asks before anything starts, so that a run fails in one sentence instead of once per episode.
        Must be cheap (no sandbox), like ``sandbox_images``. Default: None."""
        return None

    def sandbox_images(self, seeds: Sequence[int]) -> list[ImageNeed]:
        """Container images the episodes of ``seeds`` run in, beyond the sandbox kinds' own (per-task
        images, as SWE-bench's). The engine has the sandbox backend warm them before a batch starts,
        so that a missing one stops the batch with one error instead of failing every episode.
        Must be cheap (no sandbox, no I/O beyond what the constructor loaded). Default: none."""
        return []

    @property
    def num_tasks(self) -> int | None:
        """How many distinct task instances there are (None: unbounded, generated from the seed)."""
        return None

    async def close(self) -> None:
        """Free what ``reset`` took. Sandboxes are released by the engine, not here."""
