"""Feeding episodes to a set of workers: bounded in-flight work, and retries when a worker dies.

Ray-agnostic: a worker is anything with ``submit(request) -> awaitable trajectory`` and ``kill()``;
``toolgym.collect.ray.driver`` wraps Ray actors that way, and tests can use in-process fakes.

Contract:
- at most ``in_flight_per_worker`` requests are submitted to a worker at once, the least loaded
  worker first; the driver therefore holds at most ``workers × in_flight_per_worker`` requests and
  results at a time (back-pressure), however many episodes are planned;
- each request has at most one submission outstanding, so a finished episode is reported once;
- a request may be a ``GroupRequest`` (one task group, for ARPO): its worker returns a list of
  trajectories, each reported; if it is given up, each of its episodes is reported lost;
- a submission that fails because its worker died (``is_worker_death``) marks the worker dead
  (it is killed for good, so it cannot finish a copy later), and its request goes back to the
  front of the queue for the remaining workers; a replacement worker is started while
  ``max_replacements`` allows; a request that has been on ``max_attempts`` dead workers is
  reported as an error trajectory instead (the collection's failures file; a resume retries it);
- any other exception from a worker (a bug, a failed setup) stops the run and is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from toolgym.core.rollout.engine import EpisodeRequest
from toolgym.core.trajectory import Status, Timings, Trajectory

log = logging.getLogger("toolgym.collect.ray")


@dataclass(frozen=True)
class GroupRequest:
    """The episodes of one task group, run together on one worker: ARPO forks need their group's
    episodes and branch budget in one engine. The worker returns every trajectory of the group."""

    requests: tuple[EpisodeRequest, ...]
    stored: tuple[int, ...] = ()
    """Sample indices of the group's trajectories already stored (a resumed run)."""

    @property
    def trajectory_id(self) -> str:
        """The dispatcher's key for this unit of work."""
        return f"group:{self.requests[0].group_id}"


Unit: TypeAlias = EpisodeRequest | GroupRequest


class Worker(Protocol):
    index: int

    def submit(self, request: Unit) -> Awaitable[Trajectory | list[Trajectory]]: ...

    def kill(self) -> None: ...


class NoWorkersLeft(RuntimeError):
    """Every worker died and no replacement could be started."""


@dataclass
class DispatchStats:
    """Counts of one dispatch run (all integers are episodes unless named otherwise)."""

    submitted: int = 0
    completed: int = 0
    retried: int = 0
    """Requests sent again after their worker died."""
    gave_up: int = 0
    """Requests reported as errors after ``max_attempts`` dead workers."""
    worker_deaths: int = 0
    replacements: int = 0
    """Workers started to replace dead ones."""
    max_in_flight: int = 0
    """Most requests outstanding at once (bounded by workers × in_flight_per_worker)."""
    per_worker: dict[int, int] = field(default_factory=dict)
    """Completed episodes per worker index."""


@dataclass
class _Slot:
    worker: Worker
    in_flight: int = 0
    alive: bool = True


def lost_episode(req: EpisodeRequest, reason: str) -> Trajectory:
    """The error trajectory of an episode that could not be run (kept in the failures file)."""
    return Trajectory(
        trajectory_id=req.trajectory_id,
        group_id=req.group_id,
        task=req.env,
        env=req.env,
        task_index=req.task_index,
        sample_index=req.sample_index,
        seed=req.seed,
        status=Status.ERROR,
        status_reason=reason,
        timings=Timings(),
        created_at=time.time(),
        metadata={"lost": True},
    )


class Dispatcher:
    """Runs requests on workers (see the module docstring)."""

    def __init__(
        self,
        workers: Iterable[Worker],
        *,
        in_flight_per_worker: int,
        is_worker_death: Callable[[BaseException], bool],
        spawn: Callable[[int], Awaitable[Worker]] | None = None,
        max_replacements: int = 0,
        max_attempts: int = 3,
    ) -> None:
        if in_flight_per_worker < 1:
            raise ValueError("in_flight_per_worker must be at least 1")
        self._slots = [_Slot(w) for w in workers]
        self._next_index = 1 + max((s.worker.index for s in self._slots), default=-1)
        self.in_flight_per_worker = in_flight_per_worker
        self.is_worker_death = is_worker_death
        self.spawn = spawn
        self.max_replacements = max_replacements
        self.max_attempts = max_attempts
        self.stats = DispatchStats()
        self.attempts: dict[str, int] = {}
        self._pending: dict[asyncio.Future[Trajectory | list[Trajectory]], tuple[Unit, _Slot]] = {}
        self._spawning: set[asyncio.Task[Worker]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def workers(self) -> list[Worker]:
        """The live workers."""
        return [s.worker for s in self._slots if s.alive]

    async def run(self, requests: Iterable[Unit], on_result: Callable[[Trajectory], Any]) -> DispatchStats:
        """Run every request (an episode, or a group of them); ``on_result`` gets each trajectory
        once, in finishing order."""
        queue: deque[Unit] = deque(requests)
        try:
            while queue or self._pending:  # replacements still starting once all is done are cancelled
                self._fill(queue)
                waitables: set[asyncio.Future[Any]] = set(self._pending) | set(self._spawning)
                if not waitables:
                    raise NoWorkersLeft(
                        f"every worker died ({self.stats.worker_deaths} deaths, {self.stats.replacements} replacements) "
                        f"with {len(queue)} episodes left; what finished is stored, so run the same command again to resume"
                    )
                done, _ = await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
                for item in done:
                    if item in self._spawning:
                        self._spawned(item)  # type: ignore[arg-type]
                    else:
                        self._finished(item, queue, on_result)
        finally:
            for fut in list(self._pending) + list(self._spawning):
                fut.cancel()
            if self._spawning:
                await asyncio.gather(*self._spawning, return_exceptions=True)
        return self.stats

    def _fill(self, queue: deque[Unit]) -> None:
        while queue:
            open_slots = [s for s in self._slots if s.alive and s.in_flight < self.in_flight_per_worker]
            if not open_slots:
                return
            slot = min(open_slots, key=lambda s: s.in_flight)
            req = queue.popleft()
            fut = asyncio.ensure_future(slot.worker.submit(req))
            self._pending[fut] = (req, slot)
            slot.in_flight += 1
            self.stats.submitted += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, len(self._pending))

    def _finished(
        self,
        fut: asyncio.Future[Trajectory | list[Trajectory]],
        queue: deque[Unit],
        on_result: Callable[[Trajectory], Any],
    ) -> None:
        req, slot = self._pending.pop(fut)
        slot.in_flight -= 1
        exc = fut.exception()
        if exc is None:
            result = fut.result()
            results = result if isinstance(result, list) else [result]
            self.stats.completed += len(results)
            self.stats.per_worker[slot.worker.index] = self.stats.per_worker.get(slot.worker.index, 0) + len(
                results
            )
            for traj in results:
                on_result(traj)
            return
        if not self.is_worker_death(exc):
            raise exc
        self._lose(slot, exc)
        n = self.attempts[req.trajectory_id] = self.attempts.get(req.trajectory_id, 0) + 1
        if n >= self.max_attempts:
            reason = f"its worker died {n} times while running it (last: {type(exc).__name__}); a resumed run tries it again"
            for lost in req.requests if isinstance(req, GroupRequest) else (req,):
                self.stats.gave_up += 1
                on_result(lost_episode(lost, reason))
        else:
            self.stats.retried += 1
            queue.appendleft(req)

    def _lose(self, slot: _Slot, exc: BaseException) -> None:
        if not slot.alive:
            return
        slot.alive = False
        self.stats.worker_deaths += 1
        log.warning(
            "worker %d died (%s: %s); its %d unfinished episodes go to other workers",
            slot.worker.index,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
            slot.in_flight + 1,
        )
        with contextlib.suppress(Exception):
            slot.worker.kill()  # never let a half-dead worker finish a copy
        if self.spawn is not None and self.stats.replacements < self.max_replacements:
            self.stats.replacements += 1
            index, self._next_index = self._next_index, self._next_index + 1
            self._spawning.add(asyncio.ensure_future(self.spawn(index)))

    def _spawned(self, task: asyncio.Task[Worker]) -> None:
        self._spawning.discard(task)
        try:
            worker = task.result()
        except Exception as exc:
            log.warning("could not start a replacement worker: %s", exc)
            return
        self._slots.append(_Slot(worker))
