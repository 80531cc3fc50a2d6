"""The rollout worker: a Ray actor holding one asyncio ``RolloutEngine``, its policy (model
client) and its own sandbox pool, running the episodes the driver sends it.

One actor is one process. Its engine runs episodes concurrently in the actor's event loop (Ray
async actor), at most ``max_live`` at once (a semaphore here; the driver also keeps no more than
its in-flight bound outstanding). Episode errors never raise: they come back as trajectories with
``status=error``, like in a single-process run. Each trajectory is returned to the driver (which
alone writes the store) with ``metadata["worker"]`` saying where it ran.

Setup happens in ``setup()``, not in the constructor, so that a configuration error comes back to
the driver as an ordinary exception with its message (a constructor that raises only kills the
actor, which looks like a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import resource
import socket
from dataclasses import dataclass
from typing import Any

from toolgym.collect.ray.dispatch import GroupRequest
from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry, get_registry
from toolgym.core.rollout.engine import EpisodeRequest, RolloutEngine
from toolgym.core.trajectory import Trajectory


@dataclass
class WorkerSpec:
    """What every worker is built from (pickled to the actors)."""

    opts: Any
    """The collection's ``toolgym.collect.run.CollectOptions``."""
    max_live: int
    """Episodes this worker runs at once."""
    run_id: str
    registry: str | None = None
    """``"module:function"`` returning the ``Registry`` to use; None: the installed plugins."""
    rate_share: float = 1.0
    """This worker's share of the collection's rate limits (1 / number of workers)."""


def load_registry(factory: str | None) -> Registry:
    """The registry named by ``"module:function"`` (None: the installed plugins)."""
    if factory is None:
        return get_registry()
    module, _, name = factory.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"registry factory {factory!r} cannot be loaded on this worker ({exc}); it must be importable "
            "on every node (install it there, or put its directory on PYTHONPATH)"
        ) from None
    registry = fn()
    if not isinstance(registry, Registry):
        raise ConfigError(f"registry factory {factory!r} returned {type(registry).__name__}, not a Registry")
    return registry


def rss_bytes() -> int:
    """This process's resident set size now."""
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RolloutWorker:
    """The actor class (made remote by the driver, with its resources and concurrency)."""

    def __init__(self, spec: WorkerSpec, index: int) -> None:
        self.spec = spec
        self.index = index
        self.engine: RolloutEngine | None = None
        self.sandboxes: Any = None
        self.policy: Any = None
        self.live = 0
        self.peak_live = 0
        self.done = 0
        self.setup_rss = 0
        self.setup_cpu = 0.0
        self._slots: asyncio.Semaphore | None = None
        self._where = {"index": index, "pid": os.getpid(), "node": socket.gethostname()}

    async def setup(self) -> dict[str, Any]:
        """Build the registry, policy, sandbox backend and engine; returns what the driver records."""
        from toolgym.collect.run import make_policy, resolve_parser
        from toolgym.core.sandbox import LazySandboxBackend

        opts = self.spec.opts
        registry = load_registry(self.spec.registry)
        registry.env(opts.env)  # an unknown environment fails here, with the registry's message
        engine_config = opts.engine.model_copy(update={"max_live_episodes": self.spec.max_live})
        self.policy = make_policy(
            opts.model,
            backend=opts.backend,
            tokenizer=opts.tokenizer,
            config=engine_config,
            options=opts.backend_options,
        )
        registry, _ = resolve_parser(opts, registry, self.policy)  # --parser auto|NAME, as in one process
        rps, tpm = getattr(opts, "max_requests_per_s", None), getattr(opts, "max_tokens_per_min", None)
        if (rps or tpm) and hasattr(self.policy, "limiter"):
            from toolgym.core.util.ratelimit import RateLimiter

            share = self.spec.rate_share
            self.policy.limiter = RateLimiter(
                requests_per_s=rps * share if rps else None, tokens_per_min=tpm * share if tpm else None
            )
        if opts.sandbox_backend != "none":
            self.sandboxes = LazySandboxBackend(registry, opts.sandbox_backend)
        self.engine = RolloutEngine(
            registry=registry,
            policy=self.policy,
            config=engine_config,
            sandbox_backend=self.sandboxes,
            env_kwargs=opts.env_kwargs,
            run_id=self.spec.run_id,
            artifacts_dir=str(opts.out / "artifacts"),
        )
        self._slots = asyncio.Semaphore(self.spec.max_live)
        self.setup_rss = rss_bytes()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.setup_cpu = usage.ru_utime + usage.ru_stime
        return {
            **self._where,
            "policy": {
                "name": getattr(self.policy, "name", opts.model),
                "kind": self.policy.kind,
                "token_faithful": self.policy.token_faithful,
            },
        }

    async def run_episode(self, req: EpisodeRequest) -> Trajectory:
        """Run one episode; its trajectory (status error for episode failures, never raises for them)."""
        if self.engine is None or self._slots is None:
            raise RuntimeError("RolloutWorker.setup() must be called first")
        async with self._slots:
            self.live += 1
            self.peak_live = max(self.peak_live, self.live)
            try:
                traj = await self.engine.run_episode(req)
            finally:
                self.live -= 1
        self.done += 1
        traj.metadata["worker"] = dict(self._where)
        return traj

    async def run_group(self, group: GroupRequest) -> list[Trajectory]:
        """Run one task group with its ARPO forks; every trajectory of it (see ``GroupRequest``)."""
        if self.engine is None:
            raise RuntimeError("RolloutWorker.setup() must be called first")
        self.live += len(group.requests)
        self.peak_live = max(self.peak_live, self.live)
        try:
            trajs = await self.engine.run_group(list(group.requests), stored=group.stored)
        finally:
            self.live -= len(group.requests)
        self.done += len(trajs)
        for traj in trajs:
            traj.metadata["worker"] = dict(self._where)
        return trajs

    async def info(self) -> dict[str, Any]:
        """Where the worker runs and what it holds: pid, node, live and peak live episodes, RSS after
        setup, now and at its peak (bytes), CPU seconds used since setup, model calls made."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats = self.engine.stats if self.engine is not None else None
        return {
            **self._where,
            "live": self.live,
            "peak_live": self.peak_live,
            "done": self.done,
            "setup_rss_bytes": self.setup_rss,
            "rss_bytes": rss_bytes(),
            "peak_rss_bytes": usage.ru_maxrss * 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime - self.setup_cpu,
            "turns": stats.turns if stats else 0,
        }

    async def shutdown(self) -> None:
        """Destroy this worker's sandboxes and close its model client."""
        if self.sandboxes is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.sandboxes.aclose(), 60)
        backend = getattr(self.policy, "backend", None)
        if backend is not None:
            with contextlib.suppress(Exception):
                await backend.aclose()
