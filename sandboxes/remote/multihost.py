"""``MultiHostDockerBackend``: one sandbox pool per Docker engine, sandboxes placed by free capacity.

Each host gets its own backend (``DockerBackend`` with the UNIX-socket channel for a local
``unix://`` engine, ``RemoteDockerBackend`` with the attach channel otherwise), so hardening,
labels, TTL, warm pool, reset and the start-up leak sweep are exactly those of one engine, run
per host. This class only decides where each ``acquire`` goes:

1. a host holding an idle sandbox of that kind (reuse costs nothing), least loaded first;
2. else the host with the most free capacity, where free = capacity − this process's sandboxes
   there (idle, busy and being created) − other processes' sandboxes there (counted from the
   engine's ``toolgym.sandbox`` labels, refreshed every ``refresh_s`` seconds while acquiring);
3. else a host whose room is taken by idle sandboxes of other kinds: one is destroyed to make room;
4. else wait until a sandbox is released (up to ``acquire_timeout_s``; ``wait_s`` is its old name).

Capacity is therefore shared by every process placing on the same hosts (Ray actors, shards),
to within ``refresh_s`` of their latest creations: a soft limit, meant to keep hosts from being
overcommitted, not a scheduler's guarantee. A host whose engine fails is left out for
``down_s`` seconds and its share goes elsewhere; when every host is out, ``acquire`` raises.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym.core.errors import ConfigError, SandboxError
from toolgym.core.sandbox_profiles import SandboxProfile
from toolgym.sandboxes import lifecycle
from toolgym.sandboxes.docker import engine
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.remote.hosts import HOSTS_ENV, SANDBOXES_PER_CORE, DockerHost, parse_hosts
from toolgym.sandboxes.sandbox import AgentSandbox

log = logging.getLogger("toolgym.sandboxes")


def host_backend(host: DockerHost, **options: Any) -> PooledBackend:
    """The single-engine backend for ``host``: UNIX-socket channel when the engine shares this
    machine's filesystem, attach channel otherwise."""
    if host.attach:
        from toolgym.sandboxes.remote.backend import RemoteDockerBackend

        return RemoteDockerBackend(host=host, **options)
    from toolgym.sandboxes.docker.backend import DockerBackend

    return DockerBackend(base_url=host.url, **options)


class MultiHostDockerBackend:
    """Sandboxes on several Docker engines (see the module docstring). ``hosts``: a list of
    ``DockerHost`` / ``"URL[=CAPACITY]"`` / field mappings, or one comma-separated string; default
    ``$TOOLGYM_DOCKER_HOSTS``. Other options (``warm``, ``max_idle``, ``profiles``, ...) go to every
    host's pool; ``warm`` counts per host."""

    name = "docker-hosts"

    def __init__(
        self,
        hosts: str | Sequence[str | DockerHost | Mapping[str, Any]] | None = None,
        *,
        refresh_s: float = 2.0,
        acquire_timeout_s: float = 600.0,
        wait_s: float | None = None,
        down_s: float = 30.0,
        run_id: str | None = None,
        **options: Any,
    ) -> None:
        spec = hosts if hosts is not None else os.environ.get(HOSTS_ENV, "")
        if not spec:
            raise ConfigError(
                f"the docker-hosts sandbox backend needs hosts: set {HOSTS_ENV}=tcp://HOST:PORT=CAPACITY,... "
                "or pass hosts=[...]"
            )
        self.hosts = parse_hosts(spec)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.owner = lifecycle.owner_id()
        if wait_s is not None:
            warnings.warn(
                "the docker-hosts option wait_s is deprecated: write acquire_timeout_s (the old name goes in toolgym 0.2)",
                FutureWarning,
                stacklevel=2,
            )
            acquire_timeout_s = wait_s
        self.refresh_s, self.acquire_timeout_s, self.down_s = refresh_s, acquire_timeout_s, down_s
        self.backends: dict[str, PooledBackend] = {
            h.url: host_backend(h, run_id=self.run_id, **options) for h in self.hosts
        }
        self.capacity: dict[str, int] = {h.url: h.capacity for h in self.hosts if h.capacity is not None}
        self.others: dict[str, int] = {h.url: 0 for h in self.hosts}
        self.placed: dict[str, int] = {h.url: 0 for h in self.hosts}
        """Sandboxes handed out per host since start (for reports and tests)."""
        self._reserved: dict[str, int] = {h.url: 0 for h in self.hosts}
        self._down: dict[str, tuple[float, str]] = {}
        self._where: dict[str, str] = {}
        self._refreshed = 0.0
        self._released: asyncio.Event | None = None
        self._start_lock: asyncio.Lock | None = None
        self._refresh_lock: asyncio.Lock | None = None
        self._started = False

    # -- the SandboxBackend protocol --------------------------------------------------------------

    def profile(self, kind: str) -> SandboxProfile:
        return next(iter(self.backends.values())).profile(kind)

    async def start(self) -> None:
        """Ask hosts without a capacity for their CPU count, and sweep every host's leftovers."""
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock, self._refresh_lock, self._released = (
                asyncio.Lock(),
                asyncio.Lock(),
                asyncio.Event(),
            )
        async with self._start_lock:
            if self._started:
                return
            results = await asyncio.gather(*(self._start_host(h) for h in self.hosts), return_exceptions=True)
            for host, result in zip(self.hosts, results, strict=True):
                if isinstance(result, BaseException):
                    self._mark_down(host.url, f"{type(result).__name__}: {result}")
            if len(self._down) == len(self.hosts):
                raise SandboxError(
                    "no Docker host of the docker-hosts backend answers: " + self._down_reasons()
                )
            self._started = True

    async def _start_host(self, host: DockerHost) -> None:
        if host.url not in self.capacity:
            info = await engine.call(lambda: host.client().info())
            self.capacity[host.url] = max(1, SANDBOXES_PER_CORE * int(info.get("NCPU") or 1))
        await self.backends[host.url].start()  # the per-host sweep

    async def acquire(
        self, kind: str, *, episode_id: str = "", labels: Mapping[str, str] | None = None
    ) -> AgentSandbox:
        """A sandbox of ``kind`` on the host chosen as the module docstring says."""
        await self.start()
        assert self._released is not None
        deadline = time.monotonic() + self.acquire_timeout_s
        while True:
            await self._refresh_others()
            url = self._place(kind)
            if url is None:
                if time.monotonic() > deadline:
                    raise SandboxError(
                        f"every Docker host is at capacity ({self._describe()}) and none freed a sandbox "
                        f"within {self.acquire_timeout_s:g} s; add hosts or capacity, or run fewer episodes at once"
                    )
                self._released.clear()
                try:
                    await asyncio.wait_for(self._released.wait(), min(self.refresh_s, 0.25))
                except TimeoutError:
                    pass
                continue
            self._reserved[url] += 1
            try:
                sandbox = await self.backends[url].acquire(kind, episode_id=episode_id, labels=labels)
            except SandboxError as exc:
                self._mark_down(url, str(exc))
                if all(h.url in self._down for h in self.hosts):
                    raise SandboxError(
                        f"no Docker host could make a {kind!r} sandbox: {self._down_reasons()}"
                    ) from None
                continue
            finally:
                self._reserved[url] -= 1
            self._where[sandbox.id] = url
            self.placed[url] += 1
            return sandbox

    async def release(self, sandbox: AgentSandbox, *, broken: bool = False) -> None:
        url = self._where.pop(sandbox.id, None)
        if url is None:
            return
        await self.backends[url].release(sandbox, broken=broken)
        if self._released is not None:
            self._released.set()

    async def aclose(self) -> None:
        """Destroy every sandbox on every host."""
        await asyncio.gather(*(b.aclose() for b in self.backends.values()), return_exceptions=True)

    async def settle(self) -> None:
        await asyncio.gather(*(b.settle() for b in self.backends.values()))

    # -- placement -------------------------------------------------------------------------------

    def load(self, url: str) -> int:
        """Sandboxes on host ``url``: this process's (idle, busy, being created) and others'."""
        return len(self.backends[url].live) + self._reserved[url] + self.others[url]

    def free(self, url: str) -> int:
        return self.capacity.get(url, 0) - self.load(url)

    def _up(self) -> list[str]:
        now = time.monotonic()
        for url, (until, _) in list(self._down.items()):
            if now >= until:
                del self._down[url]
        return [h.url for h in self.hosts if h.url not in self._down]

    def _place(self, kind: str) -> str | None:
        up = self._up()
        reuse = [u for u in up if self.backends[u].idle_count(kind) > 0]
        if reuse:
            return min(reuse, key=lambda u: self.load(u) / max(self.capacity.get(u, 1), 1))
        roomy = [u for u in up if self.free(u) > 0]
        if roomy:
            return max(roomy, key=self.free)  # ties: the first listed
        for u in sorted(up, key=self.free, reverse=True):
            if self.backends[u].discard_idle():
                return u
        return None

    async def _refresh_others(self) -> None:
        """Recount other processes' sandboxes per host when the last count is older than
        ``refresh_s``; concurrent callers wait for one recount instead of placing on stale ones."""
        if time.monotonic() - self._refreshed < self.refresh_s:
            return
        assert self._refresh_lock is not None
        async with self._refresh_lock:
            if time.monotonic() - self._refreshed < self.refresh_s:
                return
            up = self._up()
            counts = await asyncio.gather(
                *(engine.call(self._count_others, self.backends[u]) for u in up), return_exceptions=True
            )
            for url, count in zip(up, counts, strict=True):
                if isinstance(count, BaseException):
                    self._mark_down(url, f"{type(count).__name__}: {count}")
                else:
                    self.others[url] = count
            self._refreshed = time.monotonic()

    def _count_others(self, backend: PooledBackend) -> int:
        api = backend.api  # type: ignore[attr-defined]
        n = 0
        for c in api.containers(filters={"label": engine.LABEL}):
            labels = c.get("Labels") or {}
            if labels.get("toolgym.owner") != self.owner and labels.get(engine.LABEL) != "agent-fill":
                n += 1
        return n

    def _mark_down(self, url: str, reason: str) -> None:
        log.warning("leaving Docker host %s out for %gs: %s", url, self.down_s, reason)
        self._down[url] = (time.monotonic() + self.down_s, reason)

    def _down_reasons(self) -> str:
        return "; ".join(f"{url}: {reason}" for url, (_, reason) in self._down.items())

    def _describe(self) -> str:
        return ", ".join(f"{h.name} {self.load(h.url)}/{self.capacity.get(h.url, '?')}" for h in self.hosts)

    def placement(self) -> dict[str, dict[str, Any]]:
        """Per host: capacity, this process's live sandboxes, others', handed out so far, down reason."""
        return {
            h.url: {
                "capacity": self.capacity.get(h.url),
                "live": len(self.backends[h.url].live),
                "others": self.others[h.url],
                "placed": self.placed[h.url],
                "down": self._down.get(h.url, (0, None))[1],
            }
            for h in self.hosts
        }
