"""The sandbox the checks of one kind share, and the pool it comes from.

Checks run in order on one sandbox, as episodes would: the first look (``fresh``) is taken before
anything touches it, the isolation and egress checks dirty it, the reset checks release it and
expect the same sandbox back, clean. ``recycle`` is that release and re-acquire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolgym.core.sandbox_profiles import SandboxProfile
from toolgym.sandboxes.audit.hostside import HostServer
from toolgym.sandboxes.pool import PooledBackend


def pools(backend: Any) -> list[PooledBackend]:
    """The single-engine pools behind ``backend`` (one, or one per host for ``docker-hosts``)."""
    if isinstance(backend, PooledBackend):
        return [backend]
    return list(getattr(backend, "backends", {}).values())


def poisoned(backend: Any) -> int:
    """Sandboxes the backend destroyed after a reset it did not believe, so far."""
    return sum(p.counters["poisoned"] for p in pools(backend))


def pool_of(backend: Any, sandbox: Any) -> PooledBackend | None:
    return next((p for p in pools(backend) if any(s.id == sandbox.id for s in p.live)), None)


@dataclass
class Target:
    """One backend and sandbox kind under audit."""

    backend: Any
    backend_name: str
    kind: str
    profile: SandboxProfile
    server: HostServer
    gateways: list[str] = field(default_factory=list)
    """Addresses of the host as a sandbox would see it (engine gateways, this host's own)."""
    sandbox: Any = None
    fresh: dict[str, Any] | None = None
    """What ``FIND`` saw in the sandbox before any check touched it."""
    fresh_error: str = ""
    episodes: int = 0

    async def current(self) -> Any:
        """The sandbox in use; a new one when there is none or it broke."""
        if self.sandbox is None or self.sandbox.broken:
            if self.sandbox is not None:
                await self.backend.release(self.sandbox)
            self.sandbox = await self.acquire()
        return self.sandbox

    async def acquire(self) -> Any:
        self.episodes += 1
        return await self.backend.acquire(self.kind, episode_id=f"audit-{self.kind}-{self.episodes}")

    async def recycle(self) -> tuple[Any, bool]:
        """Release the sandbox in use, wait for its reset, take one again: ``(it, same sandbox)``."""
        old = await self.current()
        await self.backend.release(old)
        await self.backend.settle()
        self.sandbox = await self.acquire()
        return self.sandbox, self.sandbox.id == old.id

    async def close(self) -> None:
        if self.sandbox is not None:
            await self.backend.release(self.sandbox)
            self.sandbox = None
