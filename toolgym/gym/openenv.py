"""A toolgym environment over OpenEnv's protocol (meta-pytorch/OpenEnv; ``pip install 'toolgym[openenv]'``).

``toolgym serve-env ENV`` serves :func:`make_app`'s app: OpenEnv's own server (``create_app``) around
:class:`ToolgymOpenEnv`, so every OpenEnv client (its ``EnvClient`` and ``GenericEnvClient``, TRL's
environment support, this module's :class:`ToolgymEnvClient`) plays it. Each client session (one
WebSocket, OpenEnv's ``/ws``) gets an environment instance of its own, with sandboxes of its own
from the backend the server was started with, released when an episode ends and destroyed when the
session closes. OpenEnv's stateless ``POST /reset`` and ``POST /step`` make a fresh environment per
request, so a step there has no episode to act in: play over a session.

The action is :class:`ToolgymAction` (``text``: the model's whole assistant message, parsed by the
environment's own tool-call parser). The observation is :class:`ToolgymObservation`: ``text``,
``reward`` and ``done`` as OpenEnv has them, with ``terminated`` and ``truncated`` kept apart and
``info`` as :meth:`toolgym.gym.session.TextSession.step` describes it.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Mapping
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from toolgym.core.errors import ConfigError
from toolgym.gym.session import TextSession, Transition


class ToolgymAction(Action):
    """One model turn."""

    text: str = Field(
        description="The model's whole assistant message; its tool calls are parsed by the environment."
    )


class ToolgymObservation(Observation):
    """What the environment answered (``done`` is ``terminated or truncated``)."""

    text: str = Field(
        default="", description="The observation's text: tool results, the environment's reply."
    )
    terminated: bool = Field(
        default=False, description="The task ended (an answer, a purchase, a goal reached)."
    )
    truncated: bool = Field(
        default=False, description="A limit ended the episode; info.truncation_reason says which."
    )
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="task_id, tool_calls, messages, valid, ... (reset: messages, tools, stop, max_turns).",
    )


class ToolgymState(State):
    """Where the session stands."""

    env: str = Field(default="", description="The toolgym environment's name.")
    seed: int | None = Field(
        default=None, description="The episode's seed (toolgym's: equal seeds, equal episodes)."
    )
    done: bool = Field(
        default=True, description="No episode is running (before the first reset, or it ended)."
    )


class ToolgymOpenEnv(Environment[ToolgymAction, ToolgymObservation, ToolgymState]):
    """The toolgym environment ``env`` behind OpenEnv's ``Environment``: async (the server awaits
    ``reset_async`` and ``step_async`` on its event loop); options as :class:`TextSession` takes them."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own environment instance and sandboxes

    def __init__(self, env: str, env_kwargs: Mapping[str, Any] | None = None, **options: Any) -> None:
        super().__init__()
        self.session = TextSession(env, env_kwargs, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._episode_id: str | None = None
        self._rng = random.Random()  # the seeds of resets that name none

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> ToolgymObservation:
        """Start the episode of ``seed`` (a random one without it); ``options`` go to the environment."""
        self._loop = asyncio.get_running_loop()
        seed = self._rng.randrange(2**31 - 1) if seed is None else int(seed)
        out = await self.session.reset(seed, kwargs.get("options"))
        self._episode_id = episode_id or f"{self.session.run_id}-{seed}"
        return _observation(out)

    async def step_async(
        self, action: ToolgymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ToolgymObservation:
        return _observation(await self.session.step(action.text))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> ToolgymObservation:
        raise ConfigError("this environment is async: call reset_async (OpenEnv's server does)")

    def step(
        self, action: ToolgymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ToolgymObservation:
        raise ConfigError("this environment is async: call step_async (OpenEnv's server does)")

    @property
    def state(self) -> ToolgymState:
        s = self.session
        return ToolgymState(
            episode_id=self._episode_id, step_count=s.turn, env=s.name, seed=s.seed, done=s.done
        )

    def get_metadata(self) -> EnvironmentMetadata:
        from toolgym import __version__

        return EnvironmentMetadata(
            name=f"toolgym/{self.session.name}",
            description=self.session.spec.description or f"the toolgym environment {self.session.name}",
            version=__version__,
        )

    def close(self) -> None:
        """Release the sandboxes on the loop they were opened on. OpenEnv calls this from a worker
        thread (it then waits) or, for its stateless endpoints, on the loop itself (it cannot wait)."""
        loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return  # never reset: nothing opened
        coro = self.session.aclose()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            task = loop.create_task(coro)
            _closing.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(_closing.discard)
        else:
            asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=120)


_closing: set[asyncio.Task[None]] = set()
"""Closes started on the server's loop and not yet done."""


def _observation(out: Transition) -> ToolgymObservation:
    return ToolgymObservation(
        text=out.observation,
        reward=out.reward,
        done=out.terminated or out.truncated,
        terminated=out.terminated,
        truncated=out.truncated,
        info=out.info,
    )


class ToolgymEnvClient(EnvClient[ToolgymAction, ToolgymObservation, ToolgymState]):
    """OpenEnv's client for a ``toolgym serve-env`` server, typed: ``await client.step(ToolgymAction(text=...))``.
    Any OpenEnv client works (``GenericEnvClient`` with ``{"text": ...}`` actions); this one parses
    the observation into :class:`ToolgymObservation`."""

    def _step_payload(self, action: ToolgymAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ToolgymObservation]:
        obs = ToolgymObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=obs, reward=obs.reward, done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> ToolgymState:
        return ToolgymState(**payload)


def make_app(
    env: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = 1,
    **options: Any,
) -> Any:
    """OpenEnv's FastAPI app serving ``env``: ``max_sessions`` client sessions at once, each with an
    environment of its own made with ``env_kwargs`` and ``options`` (:class:`TextSession`'s)."""
    probe = ToolgymOpenEnv(env, env_kwargs, **options)  # a wrong name or option fails here, not per session
    probe.close()
    factory = functools.partial(ToolgymOpenEnv, env, dict(env_kwargs or {}), **options)
    app = create_app(
        factory, ToolgymAction, ToolgymObservation, env_name=env, max_concurrent_envs=max_sessions
    )
    app.add_middleware(_ClientLeftFirst)
    return app


class _ClientLeftFirst:
    """Drops the ``WebSocketDisconnect`` that openenv-core 0.3's ``/ws`` raises when it closes a socket
    its client already closed (its own ``EnvClient`` does, every session): a clean end of session,
    otherwise logged as an ASGI error with a traceback (huggingface/OpenEnv#1159)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass
