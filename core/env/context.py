"""What an episode hands its environment: sandboxes (acquired lazily, released at the end), ids,
per-episode resources and a scratch directory. The environment contract itself is in
:mod:`toolgym.core.env.contract`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.core.sandbox import ACQUIRE_TIMEOUT_S, GROUP_LABEL, Sandbox, SandboxBackend


class EpisodeContext:
    """Per-episode services the engine hands an environment: sandboxes, ids, a scratch directory.

    Sandboxes are acquired lazily, one per kind, and all released when the episode ends.
    """

    def __init__(
        self,
        *,
        episode_id: str = "",
        run_id: str = "",
        group_id: str = "",
        sandbox_backend: SandboxBackend | None = None,
        sandbox_slots: asyncio.Semaphore | None = None,
        acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
        artifacts_dir: str | None = None,
        registry: Any = None,
    ) -> None:
        self.episode_id = episode_id
        self.registry = registry
        """The plugin registry (``toolgym.core.registry.Registry``): look tools up by name here."""
        self.run_id = run_id
        self.group_id = group_id
        """The episode's group (task, seed, group): its sandboxes come from none a sibling used."""
        self.artifacts_dir = artifacts_dir
        self._backend = sandbox_backend
        self._slots = sandbox_slots
        self._acquire_timeout_s = acquire_timeout_s
        self._sandboxes: dict[str, Sandbox] = {}
        self._broken: set[str] = set()
        self._lock = asyncio.Lock()
        self.sandbox_s = 0.0
        self._resources: dict[str, tuple[Any, Callable[[Any], Any] | None]] = {}

    @property
    def has_sandboxes(self) -> bool:
        return self._backend is not None

    async def sandbox(self, kind: str) -> Sandbox:
        """The episode's sandbox of ``kind``, created on first use, and replaced by a fresh one
        when it reports itself ``broken`` (its agent died: earlier state is lost)."""
        async with self._lock:
            if kind in self._sandboxes:
                current = self._sandboxes[kind]
                if not getattr(current, "broken", False):
                    return current
                del self._sandboxes[kind]
                self._broken.discard(kind)
                try:
                    assert self._backend is not None
                    await asyncio.shield(self._backend.release(current, broken=True))
                except Exception:  # a failed release must not stop the replacement
                    pass
                finally:
                    if self._slots is not None:
                        self._slots.release()
            if self._backend is None:
                raise SandboxError(
                    f"this episode needs a {kind!r} sandbox but no sandbox backend is configured; "
                    "start Docker or install bubblewrap (see `toolgym sandbox doctor`)"
                )
            start = time.perf_counter()
            if self._slots is not None:
                await asyncio.wait_for(self._slots.acquire(), self._acquire_timeout_s)
            try:
                sb = await asyncio.wait_for(
                    self._backend.acquire(kind, episode_id=self.episode_id, labels=self._labels()),
                    self._acquire_timeout_s,
                )
            except BaseException:
                if self._slots is not None:
                    self._slots.release()
                raise
            finally:
                self.sandbox_s += time.perf_counter() - start
            self._sandboxes[kind] = sb
            return sb

    def _labels(self) -> dict[str, str]:
        labels = {"toolgym.run": self.run_id}
        if self.group_id:
            labels[GROUP_LABEL] = self.group_id
        return labels

    async def resource(
        self,
        name: str,
        factory: Callable[[EpisodeContext], Awaitable[Any] | Any],
        close: Callable[[Any], Awaitable[Any] | Any] | None = None,
    ) -> Any:
        """A per-episode resource (a database connection, a client, a scratch directory):
        made by ``factory(ctx)`` on first use, shared by every tool call of the episode under
        ``name``, and closed by ``close(resource)`` when the episode ends."""
        async with self._lock:
            if name not in self._resources:
                value = factory(self)
                if inspect.isawaitable(value):
                    value = await value
                self._resources[name] = (value, close)
            return self._resources[name][0]

    def mark_broken(self, kind: str) -> None:
        """Tell the engine this sandbox must be destroyed rather than reused."""
        self._broken.add(kind)

    async def aclose(self) -> None:
        """Close every resource and release every sandbox; safe to call twice and under cancellation."""
        resources, self._resources = self._resources, {}
        for value, close in reversed(list(resources.values())):
            if close is not None:
                with contextlib.suppress(Exception):  # a failing close must not hide the result
                    out = close(value)
                    if inspect.isawaitable(out):
                        await asyncio.shield(out)
        sandboxes, self._sandboxes = self._sandboxes, {}
        start = time.perf_counter()
        for kind, sb in sandboxes.items():
            try:
                assert self._backend is not None
                await asyncio.shield(self._backend.release(sb, broken=kind in self._broken))
            except Exception:  # a failed release must not hide the episode's result
                pass
            finally:
                if self._slots is not None:
                    self._slots.release()
        self.sandbox_s += time.perf_counter() - start
