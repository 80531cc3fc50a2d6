"""The asyncio rollout engine: one coroutine per episode, no lock-step batches.

Semaphores bound live episodes, model calls (in the policy) and sandboxes (in the episode
context); every await has a timeout. An episode that fails is recorded with ``status=error`` and
its reason, and the run goes on. Cancelling the run (Ctrl-C) cancels every episode, and each one
releases its sandboxes and environment on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.core.env.context import EpisodeContext
from toolgym.core.env.contract import Env
from toolgym.core.env.spec import EnvSpec
from toolgym.core.registry import Registry
from toolgym.core.rollout.arpo import BranchBudget
from toolgym.core.rollout.branching import Checkpoint, ForkRefused
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.episode import Episode, EpisodeSetup
from toolgym.core.rollout.policy import Policy, TurnFailed
from toolgym.core.rollout.requests import EpisodeRequest, plan_episodes, trajectory_id
from toolgym.core.rollout.stats import EngineStats
from toolgym.core.sandbox import ImageNeed, SandboxBackend
from toolgym.core.trajectory import Trajectory

__all__ = ["EngineStats", "EpisodeRequest", "RolloutEngine", "plan_episodes", "trajectory_id"]


_tuned_runs = 0
_saved_threshold: tuple[int, int, int] | None = None


@contextlib.contextmanager
def _collector_tuned(enabled: bool, gen0: int = 100_000, gen1: int = 100) -> Iterator[None]:
    """Fewer garbage-collector passes while episodes run.

    A run keeps thousands of live token lists and messages; Python's default collector revisits
    them every few hundred allocations, which costs more CPU per turn than the engine itself.
    For the run's duration, what existed before it is frozen out of collection and the first two
    generations' thresholds are raised: a second-generation pass walks every live episode's
    token lists (0.37 s at 5,000 live episodes, during which no episode moves), so it comes once
    per ``gen1`` first-generation passes instead of every 10. Nearly all of a run's garbage is
    freed by reference counting; the rest waits longer. Both are restored when the last
    concurrent run ends (``bench/engine_efficiency.py`` measures the CPU per turn).
    """
    global _tuned_runs, _saved_threshold
    if not enabled:
        yield
        return
    if _tuned_runs == 0:
        _saved_threshold = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(max(_saved_threshold[0], gen0), max(_saved_threshold[1], gen1), _saved_threshold[2])
    _tuned_runs += 1
    try:
        yield
    finally:
        _tuned_runs -= 1
        if _tuned_runs == 0 and _saved_threshold is not None:
            gc.set_threshold(*_saved_threshold)
            gc.unfreeze()


async def _drain(tasks: set[asyncio.Task[None]]) -> None:
    """Wait until the set is empty: finished tasks leave it, forks may join it while we wait."""
    while tasks:
        await asyncio.gather(*list(tasks))


async def _cancel_unfinished(tasks: set[asyncio.Task[None]]) -> None:
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


@dataclass
class _GroupRun:
    """The episodes of one ``run_group`` call: its tasks (forks join them) and what they returned."""

    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    out: list[Trajectory] = field(default_factory=list)

    def launch(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class RolloutEngine:
    """Runs episodes of registered environments with one policy.

    ``on_trajectory`` is called (in the event loop) once per finished episode, in finishing order;
    stores append there. Observers registered through ``toolgym_trajectory_done`` are called too.
    With ``config.arpo.enabled``, episodes may fork after tool results (see ``toolgym.core.rollout.arpo``):
    forks are extra episodes of the same group, run under the same concurrency limit; with
    ``arpo.fill_budget`` a group whose episodes have all ended short of the budget gets fresh
    rollouts, one at a time, until it holds ``arpo.budget`` (stored samples of a resumed run count).
    A fork whose replay does not reproduce its parent's recorded observations (a tool that is not
    deterministic) is refused: no trajectory, its budget slot back to the group, counted in
    ``stats.forks_refused`` (:mod:`toolgym.core.rollout.branching`).
    """

    def __init__(
        self,
        *,
        registry: Registry,
        policy: Policy,
        config: EngineConfig | None = None,
        sandbox_backend: SandboxBackend | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        artifacts_dir: str | None = None,
        on_trajectory: Callable[[Trajectory], Any] | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.config = config or EngineConfig()
        self.sandbox_backend = sandbox_backend
        self.env_kwargs = dict(env_kwargs or {})
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.artifacts_dir = artifacts_dir
        vision = getattr(getattr(policy, "chat", None), "vision", None)
        if vision is not None and vision.root is None and artifacts_dir:
            vision.root = Path(artifacts_dir).parent  # the dataset directory, where screenshots are stored
        self.on_trajectory = on_trajectory
        self.stats = EngineStats(count_groups=self.config.arpo.enabled)
        self.arpo: BranchBudget | None = None
        self._sandbox_slots = asyncio.Semaphore(self.config.max_sandboxes)
        self._live = asyncio.Semaphore(self.config.max_live_episodes)
        self._tasks: set[asyncio.Task[None]] = set()
        self._specs: dict[str, EnvSpec] = {}
        self._probes: dict[str, Env] = {}  # an environment per name, asked which images a batch needs
        self.on_warm: Callable[[int, int, str, str], None] | None = None
        """Progress of warming a batch's images: ``(done, total, image, what)``; None: the backend's own display."""
        self._groups: dict[str, _GroupRun] = {}
        self._group_live: dict[str, int] = {}  # ARPO: episodes of each group started and not yet finished

    # -- running many ----------------------------------------------------------------------------

    async def run(
        self, requests: Iterable[EpisodeRequest], *, stored: Mapping[str, Iterable[int]] | None = None
    ) -> EngineStats:
        """Run every request (and any ARPO forks), at most ``max_live_episodes`` at once.

        ``stored``: for a resumed ARPO collection, the sample indices of each group's trajectories
        already stored; they count against the group's branch budget and forks skip them.
        """
        with _collector_tuned(self.config.tune_gc):
            return await self._run(list(requests), stored or {})

    async def _run(self, requests: list[EpisodeRequest], stored: Mapping[str, Iterable[int]]) -> EngineStats:
        self.stats = EngineStats(total=len(requests), count_groups=self.config.arpo.enabled)
        self._live = asyncio.Semaphore(self.config.max_live_episodes)
        self.arpo = (
            BranchBudget(self.config.arpo) if self.config.arpo.enabled else None
        )  # budgets reset every batch
        self._group_live = {}
        if self.arpo is not None:
            for req in requests:
                self.arpo.start(req.group_id, req.sample_index)
                self._group_live[req.group_id] = self._group_live.get(req.group_id, 0) + 1
            for group_id, indices in stored.items():
                self.arpo.stored(group_id, indices)
        await self.warm_images(requests)
        try:
            for req in requests:
                await self._live.acquire()
                self._launch(self._run_and_emit(self._new_episode(req), acquired=True))
            await _drain(self._tasks)
        finally:
            await _cancel_unfinished(self._tasks)
        return self.stats

    async def warm_images(self, requests: Sequence[EpisodeRequest]) -> None:
        """Have the sandbox backend warm the images the requests' episodes run in (``Env.sandbox_images``):
        pulled where missing, or one error naming the missing image before any episode starts.
        Backends without images (local) skip it."""
        if self.sandbox_backend is None or not hasattr(self.sandbox_backend, "warm_images") or not requests:
            return
        seeds: dict[str, list[int]] = {}
        for req in requests:
            seeds.setdefault(req.env, []).append(req.seed)
        needs: list[ImageNeed] = []
        for name, env_seeds in seeds.items():
            if name not in self._probes:  # one instance per engine: its constructor may load a dataset
                try:
                    self._probes[name] = self._spec(name).make(**self.env_kwargs)
                except Exception:
                    continue  # a wrong option: every episode fails with it, as without warming
            needs.extend(self._probes[name].sandbox_images(sorted(set(env_seeds))))
        if needs:
            await self.sandbox_backend.warm_images(
                needs, **({"progress": self.on_warm} if self.on_warm else {})
            )

    def _launch(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_and_emit(self, ep: Episode, *, acquired: bool) -> None:
        if not acquired:
            await self._live.acquire()
        try:
            traj = await self._finish(ep)
            if traj is not None:
                if self.on_trajectory is not None:
                    self.on_trajectory(traj)
                self.registry.notify_trajectory_done(traj)
        finally:
            self._live.release()
        self._episode_ended(ep)

    def _episode_ended(self, ep: Episode) -> None:
        """ARPO with ``fill_budget``: when the last running episode of a group ends and the group
        holds fewer than ``budget`` trajectories, start one fresh rollout from the prompt (it may
        branch in turn). The published rollout does the same: a task none of whose rollouts is
        still active gets one new rollout per round until it has ``n`` = M of them."""
        if self.arpo is None:
            return
        group_id = ep.req.group_id
        left = self._group_live[group_id] = self._group_live.get(group_id, 1) - 1
        if left > 0:
            return
        index = self.arpo.refill(group_id)
        if index is None:
            return
        req = ep.req.sibling(index)
        self._group_live[group_id] = 1
        self.stats.total += 1
        fresh = self._new_episode(req)
        group = self._groups.get(group_id)
        if group is not None:
            group.launch(self._run_into(group, fresh))
        else:
            self._launch(self._run_and_emit(fresh, acquired=False))

    def _spawn_fork(self, parent: Episode, checkpoint: Checkpoint, sample_index: int) -> None:
        """Start an ARPO fork of ``parent`` from ``checkpoint`` as sample ``sample_index`` of its group."""
        p = parent.req
        req = p.sibling(sample_index)
        self.stats.total += 1
        self._group_live[p.group_id] = self._group_live.get(p.group_id, 0) + 1
        fork = Episode.fork(parent, checkpoint, req, self._context(req))
        group = self._groups.get(p.group_id)
        if group is not None:  # a run_group call waits for it
            group.launch(self._run_into(group, fork))
        else:
            self._launch(self._run_and_emit(fork, acquired=False))

    def _fork_refused(self, ep: Episode, reason: str) -> None:
        """A fork refused at its replay: it is no trajectory and not counted as one; the episode it
        came from goes on unforked, and its budget slot goes back to the group."""
        stats = self.stats
        stats.total -= 1
        stats.forks_refused += 1
        stats.fork_refused_reason = reason
        if self.arpo is not None:
            self.arpo.release(ep.req.group_id)

    async def run_group(
        self, requests: Sequence[EpisodeRequest], *, stored: Iterable[int] = ()
    ) -> list[Trajectory]:
        """Run the episodes of one task group and any ARPO forks they spawn; their trajectories, in
        finishing order (``on_trajectory`` is not called). Calls for different groups may run at
        once, each with its own branch budget (``stored``: sample indices of the group's
        trajectories already stored, as in :meth:`run`); at most ``max_live_episodes`` episodes of
        all of them run at a time."""
        if not requests:
            return []
        group_id = requests[0].group_id
        if any(r.group_id != group_id for r in requests):
            raise ValueError("run_group takes the requests of one group")
        if group_id in self._groups:
            raise ValueError(f"group {group_id} is already running")
        if self.config.arpo.enabled:
            if self.arpo is None:
                self.arpo = BranchBudget(self.config.arpo)
            for req in requests:
                self.arpo.start(group_id, req.sample_index)
            self.arpo.stored(group_id, stored)
            self._group_live[group_id] = len(requests)
        group = self._groups[group_id] = _GroupRun()
        self.stats.total += len(requests)
        try:
            for req in requests:
                group.launch(self._run_into(group, self._new_episode(req)))
            await _drain(group.tasks)
        finally:
            await _cancel_unfinished(group.tasks)
            del self._groups[group_id]
            self._group_live.pop(group_id, None)
            if self.arpo is not None:
                self.arpo.forget(group_id)
        return group.out

    async def _run_into(self, group: _GroupRun, ep: Episode) -> None:
        async with self._live:
            traj = await self._finish(ep)
            if traj is not None:
                group.out.append(traj)
        self._episode_ended(ep)

    # -- one episode ---------------------------------------------------------------------------

    def _spec(self, name: str) -> EnvSpec:
        if name not in self._specs:
            self._specs[name] = self.registry.env(name)
        return self._specs[name]

    def _context(self, req: EpisodeRequest) -> EpisodeContext:
        return EpisodeContext(
            episode_id=req.trajectory_id,
            run_id=self.run_id,
            group_id=req.group_id,
            sandbox_backend=self.sandbox_backend,
            sandbox_slots=self._sandbox_slots,
            acquire_timeout_s=self.config.sandbox_acquire_timeout_s,
            artifacts_dir=self.artifacts_dir,
            registry=self.registry,
        )

    def _new_episode(self, req: EpisodeRequest) -> Episode:
        setup = EpisodeSetup(
            spec=self._spec(req.env),
            env_kwargs=self.env_kwargs,
            policy=self.policy,
            config=self.config,
            parser=self.registry.parser,
            run_id=self.run_id,
            stats=self.stats,
            branch_budget=self.arpo,
            fork=self._spawn_fork if self.arpo is not None else None,
        )
        return Episode(setup, req, self._context(req))

    async def run_episode(self, req: EpisodeRequest) -> Trajectory:
        """Run one episode to its end and return its trajectory; never raises for episode errors."""
        traj = await self._finish(self._new_episode(req))
        assert traj is not None, "only forks are refused"
        return traj

    async def _finish(self, ep: Episode) -> Trajectory | None:
        """Play the episode and build its trajectory; None for a refused ARPO fork."""
        stats = self.stats
        stats.running += 1
        started = time.perf_counter()
        refused: str | None = None
        try:
            try:
                async with asyncio.timeout(self.config.episode_timeout_s):
                    await ep.play()
            except ForkRefused as exc:
                refused = str(exc)
            except TimeoutError:
                ep.fail(f"episode timed out after {self.config.episode_timeout_s:g}s")
            except TurnFailed as exc:
                ep.fail(str(exc))
            except Exception as exc:
                ep.fail(f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(Exception):
                if ep.env is not None:
                    await asyncio.shield(asyncio.wait_for(ep.env.close(), 30))
            await asyncio.shield(ep.ctx.aclose())
            stats.running -= 1
        if refused is not None:
            self._fork_refused(ep, refused)
            return None
        traj = ep.build(total_s=time.perf_counter() - started, sandbox_s=ep.ctx.sandbox_s)
        stats.record(traj, turns_counted=True)  # the episode counted its turns as they returned
        return traj
