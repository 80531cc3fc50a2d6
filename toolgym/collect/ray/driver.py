"""``collect_ray``: a collection spread over Ray actors, written by this process into one store.

The driver plans the episodes (the same deterministic ids as ``toolgym collect``), skips those the
output directory already holds, starts ``num_workers`` ``RolloutWorker`` actors (each an asyncio
engine with its own model client and sandbox pool), and feeds them through a ``Dispatcher``
(bounded in-flight work, retries when an actor dies). Finished trajectories come back to the
driver, which alone appends them to the store: the dataset is the one ``toolgym collect`` writes
(``trajectories.jsonl``, ``failures.jsonl``, ``manifest.json``), in finishing order, and a
resumed run (with or without Ray) picks up what is missing.

Ray connection (``RayOptions.address``): ``"auto"`` joins the cluster this machine is part of
(``ray start`` or ``RAY_ADDRESS``), ``"HOST:PORT"`` a cluster's head, ``"ray://HOST:10001"`` through
Ray Client, ``"local"`` starts a private single-machine Ray for this run. When Ray is already
initialised in this process (a notebook, a test, a trainer), that connection is used as is.

Environment variables ``TOOLGYM_*`` and ``DOCKER_*`` of the driver are set on the actors too, so
``TOOLGYM_DOCKER_HOSTS`` (remote sandbox hosts, see ``toolgym.sandboxes.remote``) applies to all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from toolgym.collect.guard import apply_scripted_defaults, check_sandbox_isolation, check_scripted_solver
from toolgym.collect.plan import CollectPlan, check_options, open_store, plan_collection, stored_samples
from toolgym.collect.ray.dispatch import Dispatcher, DispatchStats, GroupRequest, Unit
from toolgym.collect.ray.worker import RolloutWorker, WorkerSpec, load_registry
from toolgym.collect.redact import Scrubber
from toolgym.collect.run import CollectOptions, CollectResult, describe_run
from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry
from toolgym.core.rollout.engine import EngineStats, EpisodeRequest
from toolgym.core.trajectory import Trajectory
from toolgym.trajectories.store import TrajectoryWriter, read_manifest, write_manifest

log = logging.getLogger("toolgym.collect.ray")
FORWARDED_ENV_PREFIXES = ("TOOLGYM_", "DOCKER_")


@dataclass
class RayOptions:
    """How to spread a collection over Ray."""

    address: str = "auto"
    """``auto``, ``HOST:PORT``, ``ray://HOST:PORT`` or ``local`` (see the module docstring)."""
    num_workers: int = 2
    """Rollout actors (processes) to start."""
    worker_cpus: float = 1.0
    """CPUs Ray reserves per actor (its scheduling unit; the engine itself is mostly waiting)."""
    max_live_per_worker: int | None = None
    """Episodes each actor runs at once; None: the engine's ``max_live_episodes``."""
    in_flight_per_worker: int | None = None
    """Episodes submitted to an actor and not yet back; None: ``max_live`` plus a quarter (at
    least 2), so an actor never idles waiting for the driver. The driver's memory is bounded by
    ``num_workers × in_flight_per_worker`` episodes, not by the number planned."""
    max_replacements: int | None = None
    """Actors started to replace dead ones over the run; None: ``num_workers``."""
    max_attempts: int = 3
    """Actor deaths an episode may see before it is recorded as failed (retried on resume)."""
    registry: str | None = None
    """``"module:function"`` giving the plugin ``Registry`` on every actor; None: the installed plugins."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """More environment variables for the actors (on top of the forwarded ``TOOLGYM_*``/``DOCKER_*``)."""
    setup_timeout_s: float = 600.0
    """Seconds an actor may take to start and build its engine (model clients load tokenizers)."""


@dataclass
class RayCollectResult(CollectResult):
    dispatch: DispatchStats = field(default_factory=DispatchStats)
    workers: list[dict[str, Any]] = field(default_factory=list)
    """Per live actor at the end: pid, node, peak live episodes, RSS (see ``RolloutWorker.info``)."""


class RayWorker:
    """A started actor, as the dispatcher sees it."""

    def __init__(self, handle: Any, index: int, info: dict[str, Any]) -> None:
        self.handle, self.index, self.info = handle, index, info

    def submit(self, request: Unit) -> asyncio.Future[Any]:
        if isinstance(request, GroupRequest):
            return asyncio.wrap_future(self.handle.run_group.remote(request).future())
        return asyncio.wrap_future(self.handle.run_episode.remote(request).future())

    def kill(self) -> None:
        import ray

        ray.kill(self.handle, no_restart=True)


def worker_name(run_id: str, index: int) -> str:
    """The Ray actor name of worker ``index`` of run ``run_id`` (``ray.get_actor(name)``; the run id is
    in every trajectory's ``metadata["run_id"]``)."""
    return f"toolgym-{run_id}-worker-{index}"


def is_worker_death(exc: BaseException) -> bool:
    """Whether a failed call means its actor (process or node) is gone, rather than a bug."""
    import ray.exceptions as rex

    return isinstance(
        exc,
        (
            rex.RayActorError,
            rex.WorkerCrashedError,
            rex.NodeDiedError,
            rex.ObjectLostError,
            rex.OutOfMemoryError,
        ),
    )


def check_head(address: str, *, timeout_s: float = 5.0) -> None:
    """Fail fast when ``address`` is ``HOST:PORT`` and nothing listens there (Ray itself would
    retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
            "`ray start --head`, check HOST:PORT, or use --ray local for a one-machine run"
        ) from None


def connect(address: str, *, num_cpus: int) -> bool:
    """Make sure this process is connected to Ray; whether it connected now (and must disconnect)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'toolgym[ray]'") from None
    if ray.is_initialized():
        return False
    if address == "local":
        ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING)
        return True
    check_head(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address!r} ({exc}); start one with `ray start --head`, "
            "give its HOST:PORT, or use --ray local for a one-machine run"
        ) from None
    return True


def _actor_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}
    env.update(extra)
    return env


class WorkerFactory:
    """Starts the rollout actors of one run (``await factory(index)``) and waits for their setup;
    a setup that fails with a configuration error is raised as one, with the worker named."""

    def __init__(self, spec: WorkerSpec, ray_opts: RayOptions, *, max_concurrency: int) -> None:
        import ray

        self.spec, self.timeout_s = spec, ray_opts.setup_timeout_s
        env = _actor_env(ray_opts.env_vars)
        self._cls: Any = ray.remote(RolloutWorker)
        self._options = {
            "num_cpus": ray_opts.worker_cpus,
            "max_concurrency": max_concurrency,
            "runtime_env": {"env_vars": env} if env else None,
        }

    async def __call__(self, index: int) -> RayWorker:
        import ray

        handle = self._cls.options(name=worker_name(self.spec.run_id, index), **self._options).remote(
            self.spec, index
        )
        try:
            info = await asyncio.wait_for(asyncio.wrap_future(handle.setup.remote().future()), self.timeout_s)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ConfigError):
                raise ConfigError(f"rollout worker {index} could not start: {cause}") from None
            if isinstance(exc, TimeoutError):
                raise ConfigError(
                    f"rollout worker {index} did not start within {self.timeout_s:g}s; "
                    "does the cluster have free CPUs (`ray status`)?"
                ) from None
            raise
        return RayWorker(handle, index, info)


async def collect_ray(
    opts: CollectOptions,
    ray_opts: RayOptions | None = None,
    *,
    registry: Registry | None = None,
    on_progress: Callable[[EngineStats], None] | None = None,
) -> RayCollectResult:
    """Run the collection on Ray actors; returns counts. Resumes whatever ``opts.out`` holds."""
    ray_opts = ray_opts or RayOptions()
    if ray_opts.num_workers < 1:
        raise ConfigError(f"--ray-workers must be at least 1, got {ray_opts.num_workers}")
    if opts.shard is not None:
        raise ConfigError("--shard and --ray do not combine: Ray already spreads the episodes; drop --shard")
    registry = registry or load_registry(ray_opts.registry)
    check_options(opts, registry)
    apply_scripted_defaults(registry, opts)
    check_scripted_solver(registry, opts)
    check_sandbox_isolation(registry, opts)
    plan = await _plan(opts, registry)
    todo, done_ids = plan.todo, plan.done

    if not todo:  # nothing left: no cluster needed
        return _already_complete(opts, len(plan.planned), len(plan.requests))

    n = ray_opts.num_workers
    max_live = ray_opts.max_live_per_worker or opts.engine.max_live_episodes
    in_flight = ray_opts.in_flight_per_worker or max_live + max(2, max_live // 4)
    units: list[Unit] = list(todo)
    if opts.engine.arpo.enabled:  # a group's episodes and forks share one engine's branch budget
        units = group_units(todo, stored_samples(todo, done_ids, opts))
        if ray_opts.in_flight_per_worker is None:
            in_flight = max(2, -(-in_flight // opts.group_size))
    started_ray = connect(
        ray_opts.address, num_cpus=max(os.cpu_count() or 1, int(n * ray_opts.worker_cpus + 0.999))
    )
    import ray

    spec = WorkerSpec(
        opts=opts,
        max_live=max_live,
        run_id=uuid.uuid4().hex[:12],
        registry=ray_opts.registry,
        rate_share=1.0 / n,
    )
    spawn = WorkerFactory(spec, ray_opts, max_concurrency=in_flight + 8)

    workers: list[RayWorker] = []
    writer: TrajectoryWriter | None = None
    manifest: dict[str, Any] = {}
    stats = EngineStats(total=len(todo), count_groups=opts.engine.arpo.enabled)
    result_workers: list[dict[str, Any]] = []
    dispatcher: Dispatcher | None = None
    ticker: asyncio.Task[None] | None = None
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, lambda: me and me.cancel())
    state = "interrupted"
    duplicates = 0
    try:
        spawned = await asyncio.gather(*(spawn(i) for i in range(n)), return_exceptions=True)
        workers = [w for w in spawned if isinstance(w, RayWorker)]
        failed = [e for e in spawned if isinstance(e, BaseException)]
        if failed:
            raise failed[0]
        policy = SimpleNamespace(**workers[0].info["policy"])
        scrubber = Scrubber.for_collection(model=opts.model, backend_options=opts.backend_options)
        run = describe_run(opts, registry, policy, len(plan.planned))  # type: ignore[arg-type]
        run["ray"] = {
            "workers": n,
            "max_live_per_worker": max_live,
            "in_flight_per_worker": in_flight,
            "address": ray_opts.address,
            "nodes": sorted({w.info["node"] for w in workers}),
        }
        writer, manifest = open_store(opts, scrubber.obj(run), plan, scrub=scrubber.bytes)
        seen: set[str] = set()

        def on_result(traj: Trajectory) -> None:
            nonlocal duplicates
            if traj.trajectory_id in seen:  # cannot happen with one submission per request; never write twice
                duplicates += 1
                return
            seen.add(traj.trajectory_id)
            if traj.parent_id is not None:
                stats.total += 1  # an ARPO fork: not planned
            assert writer is not None
            writer.write(traj)
            registry.notify_trajectory_done(traj)
            stats.record(traj)

        dispatcher = Dispatcher(
            workers,
            in_flight_per_worker=in_flight,
            is_worker_death=is_worker_death,
            spawn=spawn,
            max_replacements=n if ray_opts.max_replacements is None else ray_opts.max_replacements,
            max_attempts=ray_opts.max_attempts,
        )
        if on_progress is not None:
            d = dispatcher

            async def tick() -> None:
                while True:
                    stats.running = d.in_flight
                    on_progress(stats)
                    await asyncio.sleep(0.25)

            ticker = asyncio.create_task(tick())
        await dispatcher.run(units, on_result)
        state = "complete" if writer.failed == 0 else "complete_with_failures"
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
        if ticker is not None:
            ticker.cancel()
            stats.running = 0
            on_progress(stats)  # type: ignore[misc]
        live = (
            [w for w in dispatcher.workers if isinstance(w, RayWorker)] if dispatcher is not None else workers
        )
        result_workers = await _shutdown(live)
        if writer is not None:
            writer.close()
            manifest.update(
                state=state, finished_at=time.time(), written=writer.written, failed=writer.failed
            )
            if dispatcher is not None:
                ds = dispatcher.stats
                manifest["ray"].update(
                    worker_deaths=ds.worker_deaths,
                    replacements=ds.replacements,
                    retried=ds.retried,
                    gave_up=ds.gave_up,
                    max_in_flight=ds.max_in_flight,
                    duplicate_results=duplicates,
                )
            write_manifest(opts.out, scrubber.obj(manifest))
        if started_ray:
            ray.shutdown()
    assert writer is not None and dispatcher is not None
    return RayCollectResult(
        out=opts.out,
        planned=len(plan.requests),
        skipped=len(plan.requests) - len(todo),
        written=writer.written,
        failed=writer.failed,
        stats=stats,
        elapsed_s=time.perf_counter() - started,
        duplicates=plan.duplicates,
        dispatch=dispatcher.stats,
        workers=result_workers,
    )


def group_units(requests: list[EpisodeRequest], stored: dict[str, list[int]]) -> list[Unit]:
    """One ``GroupRequest`` per task group, in the order of the groups' first requests."""
    groups: dict[str, list[EpisodeRequest]] = {}
    for req in requests:
        groups.setdefault(req.group_id, []).append(req)
    return [GroupRequest(tuple(reqs), tuple(stored.get(g, ()))) for g, reqs in groups.items()]


def _already_complete(opts: CollectOptions, planned: int, requested: int) -> RayCollectResult:
    """The result of a run whose every trajectory is stored already (its manifest says so)."""
    manifest = read_manifest(opts.out) or {}
    if manifest and not str(manifest.get("state", "")).startswith("complete"):
        manifest.update(state="complete", finished_at=time.time())
        write_manifest(opts.out, manifest)
    return RayCollectResult(
        out=opts.out,
        planned=requested,
        skipped=requested,
        written=0,
        failed=0,
        stats=EngineStats(total=0),
        elapsed_s=0.0,
        duplicates=planned - requested,
    )


async def _plan(opts: CollectOptions, registry: Registry) -> CollectPlan:
    """The shared preamble on the driver; ``--dedup prompt`` resets its instances here, in sandboxes
    opened for that alone, before anything is dispatched."""
    from toolgym.core.sandbox import LazySandboxBackend

    sandboxes = None
    if opts.dedup == "prompt" and opts.sandbox_backend != "none":
        sandboxes = LazySandboxBackend(registry, opts.sandbox_backend)
    try:
        return await plan_collection(opts, registry, sandboxes)
    finally:
        if sandboxes is not None:
            await sandboxes.aclose()


async def _shutdown(workers: list[RayWorker], timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Ask each actor for its figures and to destroy its sandboxes, then end it."""
    import ray

    async def one(w: RayWorker) -> dict[str, Any]:
        info: dict[str, Any] = {"index": w.index}
        try:
            info = await asyncio.wait_for(asyncio.wrap_future(w.handle.info.remote().future()), 10)
            await asyncio.wait_for(asyncio.wrap_future(w.handle.shutdown.remote().future()), timeout_s)
        except Exception as exc:
            log.warning("rollout worker %d did not shut down cleanly: %s", w.index, exc)
        with contextlib.suppress(Exception):
            ray.kill(w.handle, no_restart=True)
        return info

    return list(await asyncio.gather(*(one(w) for w in workers)))
