"""A toolgym environment as a Gymnasium environment: text in, text out, toolgym's reward.

``ToolgymEnv("keychain")`` (or ``gymnasium.make("toolgym/keychain")`` once :mod:`toolgym.gym` is
imported) wraps the registered environment of that name. ``reset(seed=...)`` starts the episode of
that seed (the same episode ``toolgym collect`` plays for that seed); ``step(text)`` takes the model's
whole assistant message and parses its tool calls with the environment's own parser, as the rollout
engine does; ``terminated`` and ``truncated`` are the environment's own (a turn limit truncates).
What a step's ``info`` carries is :meth:`toolgym.gym.session.TextSession.step`'s.

toolgym's environments are async; each ``ToolgymEnv`` runs its own event loop in a thread of its own
(so it also works where the caller's thread already runs a loop: a notebook, an async trainer), and
``close()`` stops it. Sandboxes come from the backend ``sandbox_backend`` names, opened on first use
as ``toolgym collect`` opens them (``auto`` by default); an episode's sandboxes are released when it
ends, and ``close()`` destroys them all.
"""

from __future__ import annotations

import asyncio
import string
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import gymnasium
from gymnasium import spaces

from toolgym.core.errors import ConfigError
from toolgym.core.sandbox import SandboxBackend
from toolgym.gym.session import DEFAULT_TIMEOUT_S, TextSession, Transition

T = TypeVar("T")

OBSERVATION_MAX_CHARS = 1 << 24
"""Longest observation text (characters); tool outputs are capped far below it at their source."""
ACTION_MAX_CHARS = 1 << 14
"""Longest action text the action space holds (characters): a long model turn (4k tokens or so)."""
_SAMPLED = string.printable
"""What ``action_space.sample()`` draws characters from: printable ASCII with whitespace, so that
random actions reach the parsers' brackets, quotes and tags."""


class UnicodeText(spaces.Text):
    """Any Unicode string of ``min_length`` to ``max_length`` characters.

    Gymnasium's ``Text`` holds only the characters of its charset; a model's output and a tool's
    answer may hold any character, so membership checks the length alone (BrowserGym's ``Unicode``
    space does the same). ``sample()`` draws from the charset (printable ASCII by default).
    """

    def __init__(
        self, max_length: int, *, min_length: int = 0, charset: str = _SAMPLED, seed: int | None = None
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


class ToolgymEnv(gymnasium.Env[str, str]):
    """The toolgym environment ``env`` behind Gymnasium's API.

    ``env_kwargs`` are the environment's options (``toolgym collect --env-arg``), also accepted as
    plain keyword arguments (``gymnasium.make("toolgym/keychain", split="test")``). See
    :class:`~toolgym.gym.session.TextSession` for ``sandbox_backend``, ``unsafe_in_process_sandbox``,
    ``max_turns``, ``parser``, ``timeout_s`` (seconds per reset or step) and ``images_dir`` (where
    screenshot observations are stored; ``info["images"]`` names each step's image files).

    ``render_mode="ansi"``: ``render()`` returns the conversation so far as text.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # text: one frame per step; the fps means nothing

    def __init__(
        self,
        env: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        sandbox_backend: str | SandboxBackend = "auto",
        unsafe_in_process_sandbox: bool = False,
        max_turns: int | None = None,
        parser: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        images_dir: str | None = None,
        max_action_chars: int = ACTION_MAX_CHARS,
        render_mode: str | None = None,
        **options: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.timeout_s = float(timeout_s)
        self.observation_space = UnicodeText(OBSERVATION_MAX_CHARS)
        self.action_space = UnicodeText(int(max_action_chars))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"toolgym-gym-{env}", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self.session: TextSession = self._run(
                _make_session(
                    env,
                    {**(env_kwargs or {}), **options},
                    sandbox_backend=sandbox_backend,
                    unsafe_in_process_sandbox=unsafe_in_process_sandbox,
                    max_turns=max_turns,
                    parser=parser,
                    timeout_s=timeout_s,
                    images_dir=images_dir,
                )
            )
        except BaseException:
            self._stop_loop()
            raise

    # -- Gymnasium's API -----------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start the episode of ``seed`` (toolgym's episode seed); without one, of a seed drawn from the
        generator the last seeded reset seeded (so ``reset(seed=s)`` then ``reset()`` gives the same
        two episodes every time). ``options`` go to the environment's reset."""
        super().reset(seed=seed)
        episode_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        out = self._run(self.session.reset(episode_seed, options))
        return out.observation, out.info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply ``action``, the model's whole assistant message."""
        if self.session.done:
            raise gymnasium.error.ResetNeeded("the episode has ended (or never started): call reset() first")
        out: Transition = self._run(self.session.step(action))
        return out.observation, out.reward, out.terminated, out.truncated, out.info

    def render(self) -> str | None:  # type: ignore[override]
        if self.render_mode != "ansi":
            return None
        return "\n\n".join(f"[{m.get('role')}]\n{m.get('content', '')}" for m in self.session.messages)

    def close(self) -> None:
        """Release the episode's sandboxes, close the sandbox backend and stop the event loop; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.session.aclose())
        finally:
            self._stop_loop()

    # -- beyond Gymnasium's API -----------------------------------------------------------------------

    def scripted_action(self) -> str | None:
        """The environment's own solving action for the current state, as model text (None where it
        has no scripted solver): a reference policy for tests and baselines."""
        return self._run(self.session.scripted_action())

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools' JSON schemas (also in ``reset``'s ``info["tools"]``)."""
        return self.session.tools

    # -- the private event loop ------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop.is_closed():
            coro.close()
            raise gymnasium.error.ClosedEnvironmentError("this environment was closed; make a new one")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        # the coroutine keeps its own timeouts (per reset or step); this one catches a loop that
        # something blocked
        return future.result(timeout=self.timeout_s + 60)

    def _stop_loop(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()

    def __del__(self) -> None:
        # a forgotten close(): stop the thread (the sandboxes' TTL and `toolgym sandbox gc` reclaim them)
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed() and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)


async def _make_session(env: str, env_kwargs: dict[str, Any], **options: Any) -> TextSession:
    """Built inside the loop: environments may make loop-bound objects in their constructors."""
    return TextSession(env, env_kwargs, **options)
