"""One toolgym environment played one text action at a time: what the Gymnasium and OpenEnv adapters
share. Async, like the environment it drives; :mod:`toolgym.gym.env` runs it on its own event loop.

A :class:`TextSession` does for one caller what the rollout engine's turn loop
(:mod:`toolgym.core.rollout.episode`) does around a model: it binds the environment to an episode's
context (sandboxes from the run's backend, opened lazily), resets it, parses each action text with the
environment's own tool-call parser (the registry's, as the engine does), steps it, applies its turn
limit, and releases the episode's sandboxes as soon as the episode ends. What it does not do is sample
a model or keep tokens: the caller brings the model's text, and a trajectory that a trainer needs
token-faithful is recorded by the caller.

Observations are text: the step's messages' texts joined by newlines, as a trajectory's ``Step``
records them (``observation_text``). The structured messages go in ``info["messages"]``, so a chat
policy appends them to its conversation as the engine does.

Screenshots (``observation=screenshot|both`` on the browser environments) are stored by content hash
under the session's ``images_dir`` (a temporary folder of its own unless given), and every reset's and
step's ``info["images"]`` maps the references of its image parts to their files, so a vision-language
policy can load them. ``session.messages`` keeps at most the environment's ``max_images`` images, the
older ones turned into the same short text the engine writes (``info["max_images"]`` says the limit).
"""

from __future__ import annotations

import asyncio
import copy
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.core.env.context import EpisodeContext
from toolgym.core.env.contract import Env
from toolgym.core.errors import ConfigError
from toolgym.core.parsing.base import ToolParser
from toolgym.core.registry import Registry, get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.episode import jsonable, observation_text
from toolgym.core.sandbox import AUTO, NONE, SandboxBackend, lazy_sandbox_backend, require_isolation
from toolgym.core.tokens.chat import with_tool_call_ids
from toolgym.core.tokens.images import image_path, image_refs, limit_images
from toolgym.core.types import Message

DEFAULT_TIMEOUT_S = EngineConfig().env_timeout_s
"""Seconds per ``reset`` or ``step``, the engine's ``env_timeout_s``."""
UNSAFE_OPTION = "unsafe_in_process_sandbox=True"


@dataclass(slots=True)
class Transition:
    """What one ``reset`` or ``step`` gave back, in Gymnasium's terms."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    """The task ended (an answer, a purchase, a goal reached)."""
    truncated: bool = False
    """A limit ended the episode (the environment's own, or its turn limit); ``info["truncation_reason"]`` says which."""
    info: dict[str, Any] = field(default_factory=dict)
    """Fresh on every call (JSON values only): see :meth:`TextSession.step` for its keys."""


class TextSession:
    """One environment instance, one episode at a time, driven by model text.

    ``sandbox_backend`` is a backend name as ``toolgym collect --sandbox-backend`` takes it (``auto``:
    Docker when it answers, else bubblewrap; ``none``: no sandboxes), opened on first use and closed by
    :meth:`aclose`; or a backend object, which stays the caller's to close. A backend named that does not
    isolate (``memory``) is refused unless ``unsafe_in_process_sandbox``: the actions are a model's, and
    its code would run inside this process. ``max_turns`` lowers the environment's own turn limit;
    ``parser`` replaces the environment's tool-call parser (a registered name). ``images_dir`` is
    where screenshots go (``<images_dir>/images/<sha256>.png``); without it, a temporary folder the
    session removes on :meth:`aclose`.
    """

    def __init__(
        self,
        env: str,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        sandbox_backend: str | SandboxBackend = "auto",
        unsafe_in_process_sandbox: bool = False,
        max_turns: int | None = None,
        parser: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        registry: Registry | None = None,
        images_dir: str | Path | None = None,
    ) -> None:
        self.registry = registry or get_registry()
        self.name = env
        self.spec = self.registry.env(env)
        self._own_backend = isinstance(sandbox_backend, str)
        if isinstance(sandbox_backend, str):
            if sandbox_backend not in (AUTO, NONE):
                self.registry.sandbox_backend(sandbox_backend)  # an unknown name fails here, in one sentence
            if not unsafe_in_process_sandbox:
                require_isolation(self.registry, sandbox_backend, allow=UNSAFE_OPTION)
        self.sandbox_backend = sandbox_backend
        self.env: Env = self.spec.make(**dict(env_kwargs or {}))
        if max_turns is not None and int(max_turns) < 1:
            raise ConfigError(f"max_turns must be at least 1, got {max_turns}")
        self._max_turns = None if max_turns is None else int(max_turns)
        self._parser_name = parser
        self.parser: ToolParser = self.registry.parser(
            parser or self.env.parser
        )  # an unknown name fails here
        self.max_turns = self._turn_limit()
        self.timeout_s = float(timeout_s)
        self.run_id = f"gym-{uuid.uuid4().hex[:12]}"
        self._backend: Any = None
        self._ctx: EpisodeContext | None = None
        self._episodes = 0
        self._info: dict[str, Any] = {}
        self.turn = 0
        """Steps taken in the current episode."""
        self.seed: int | None = None
        self.done = True
        """True before the first reset and once the episode ended (``step`` then refuses)."""
        self.messages: list[Message] = []
        """The conversation so far: the prompt, each action as an assistant message, each observation
        (with at most the environment's ``max_images`` images)."""
        self._own_images = images_dir is None
        self.images_dir: Path | None = None if images_dir is None else Path(images_dir)
        """The dataset folder screenshots are stored under (created on the first reset when not given)."""

    def _turn_limit(self) -> int:
        """The environment's turn limit, or the caller's where lower (the engine's rule)."""
        return self.env.max_turns if self._max_turns is None else min(self._max_turns, self.env.max_turns)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The JSON schemas of the tools shown to the model (what the chat template renders)."""
        return [copy.deepcopy(t.schema) for t in self.env.tools]

    @property
    def stop(self) -> list[str]:
        """Stop strings sampling should use (the parser's and the environment's)."""
        by_name = {t.name: t for t in self.env.tools}
        return list(dict.fromkeys((*self.parser.stop_strings(by_name), *self.env.stop)))

    async def reset(self, seed: int, options: Mapping[str, Any] | None = None) -> Transition:
        """End any running episode, start the one of ``seed`` (equal seeds, equal episodes).

        ``info``: the environment's own reset info (``task_id`` among it where it has one), plus
        ``seed``, ``messages`` (the prompt as chat messages), ``tools`` (their JSON schemas), ``stop``
        (stop strings for sampling) and ``max_turns``."""
        await self._end_episode()
        if self._backend is None:
            self._backend = (
                lazy_sandbox_backend(self.registry, self.sandbox_backend)
                if isinstance(self.sandbox_backend, str)
                else self.sandbox_backend
            )
        self._episodes += 1
        if self.images_dir is None:
            self.images_dir = Path(tempfile.mkdtemp(prefix="toolgym-gym-"))
        self._ctx = EpisodeContext(
            episode_id=f"{self.run_id}-{self._episodes}",
            run_id=self.run_id,
            sandbox_backend=self._backend,
            artifacts_dir=str(self.images_dir / "artifacts"),
            registry=self.registry,
        )
        self.env.bind(self._ctx)
        messages, info = await asyncio.wait_for(
            self.env.reset(seed=int(seed), options=options), self.timeout_s
        )
        # as the engine does, after the reset: an environment may settle its parser or limit there
        self.parser = self.registry.parser(self._parser_name or self.env.parser)
        self.max_turns = self._turn_limit()
        self.seed, self.turn, self.done = int(seed), 0, False
        self.messages = self._bounded([dict(m) for m in messages])
        self._info = {k: v for k, v in jsonable(dict(info or {})).items() if k != "messages"}
        out = {
            **self._info,
            "seed": self.seed,
            "messages": self.messages,
            "images": self._images(self.messages),
            "max_images": self.env.max_images,
            "tools": self.tools,
            "stop": self.stop,
            "max_turns": self.max_turns,
        }
        return Transition(observation_text(messages), info=copy.deepcopy(out))

    async def step(self, text: str) -> Transition:
        """Apply the model's output ``text`` (its whole assistant message), parsed as the engine parses it.

        ``info``: the environment's step info, plus the reset info's ``task_id``, ``turn`` (1 for
        the first step), ``action_kind`` (``tool_calls``, ``answer``, ``command``, ``invalid``),
        ``valid`` (False for a malformed or inadmissible action), ``error`` (the parser's, for an
        invalid action), ``tool_calls`` (name, arguments, output and error of each call, in order),
        ``messages`` (the observation as chat messages, tool results with the ``tool_call_id`` of their
        call; a string observation is one user message),
        ``prompt`` (only for environments that rebuild the prompt each turn: the whole next prompt)
        and, when the episode was truncated, ``truncation_reason``."""
        if self.done or self._ctx is None:
            raise ConfigError("the episode has ended (or never started): call reset() before step()")
        if not isinstance(text, str):
            raise ConfigError(f"an action is the model's text (a str), got {type(text).__name__}")
        by_name = {t.name: t for t in self.env.tools}
        action = self.parser.parse(text, by_name)
        self.turn += 1
        try:
            outcome = await asyncio.wait_for(self.env.step(action), self.timeout_s)
        except BaseException:
            await self._end_episode()
            raise
        observed: list[Message]
        if isinstance(outcome.observation, str):
            observed = [{"role": "user", "content": outcome.observation}]
        else:
            observed = with_tool_call_ids(
                outcome.observation, action.tool_calls
            )  # as the engine renders them
        self.messages = self._bounded([*self.messages, {"role": "assistant", "content": text}, *observed])
        terminated, truncated = bool(outcome.terminated), bool(outcome.truncated) and not outcome.terminated
        info: dict[str, Any] = {
            **jsonable(dict(outcome.info or {})),
            "turn": self.turn,
            "action_kind": action.kind.value,
            "valid": bool(outcome.valid and action.valid),
            "error": action.error,
            "tool_calls": [
                {"name": r.name, "arguments": jsonable(r.arguments), "output": r.output, "error": r.error}
                for r in outcome.tool_calls
            ],
            "messages": jsonable(observed),
            "images": self._images(observed),
        }
        if "task_id" in self._info:
            info.setdefault("task_id", self._info["task_id"])
        if truncated:
            info["truncation_reason"] = str(
                outcome.info.get("truncation_reason", "environment truncated the episode")
            )
        elif not terminated and self.turn >= self.max_turns:
            truncated = True
            info["truncation_reason"] = f"turn limit ({self.max_turns}) reached"
        if not (terminated or truncated) and (fresh := self.env.step_prompt()) is not None:
            info["prompt"] = jsonable([dict(m) for m in fresh])
        if terminated or truncated:
            await self._end_episode()
        return Transition(
            observation_text(outcome.observation),
            reward=float(outcome.reward),
            terminated=terminated,
            truncated=truncated,
            info=copy.deepcopy(info),
        )

    def _bounded(self, messages: list[Message]) -> list[Message]:
        keep = self.env.max_images
        return messages if keep is None else limit_images(messages, keep)

    def _images(self, messages: Sequence[Message]) -> dict[str, str]:
        """The files of ``messages``' image parts, by reference."""
        refs = image_refs(messages)
        if not refs or self.images_dir is None:
            return {}
        return {ref: str(image_path(self.images_dir, ref)) for ref in refs}

    async def scripted_action(self) -> str | None:
        """The environment's own solving action for the current state (``Env.scripted_action``),
        as model text; None where it has no scripted solver."""
        if self.done:
            raise ConfigError("the episode has ended (or never started): call reset() first")
        return await self.env.scripted_action()

    async def _end_episode(self) -> None:
        """Free what the episode took (the environment's resources, then its sandboxes); idempotent."""
        self.done = True
        ctx, self._ctx = self._ctx, None
        if ctx is None:
            return
        try:
            await asyncio.wait_for(self.env.close(), 30)
        except Exception:  # a failing close must not keep the sandboxes
            pass
        finally:
            await ctx.aclose()

    async def aclose(self) -> None:
        """End the episode and close the sandbox backend it opened (its sandboxes are destroyed); idempotent."""
        await self._end_episode()
        backend, self._backend = self._backend, None
        try:
            if backend is not None and self._own_backend:
                await backend.aclose()
        finally:
            if self._own_images and self.images_dir is not None:
                shutil.rmtree(self.images_dir, ignore_errors=True)
                self.images_dir = None
