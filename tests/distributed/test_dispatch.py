"""The dispatcher with in-process fake workers (no Ray): bounded in-flight work, retries on other
workers when one dies, replacements, give-up after max_attempts, and errors that stop the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from toolgym.collect.ray.dispatch import Dispatcher, NoWorkersLeft
from toolgym.core.rollout.engine import EpisodeRequest, plan_episodes
from toolgym.core.trajectory import Status, Trajectory


class Died(Exception):
    """What a fake worker's calls raise once it is dead."""


class FakeWorker:
    def __init__(
        self,
        index: int,
        *,
        die_after: int | None = None,
        delay: float = 0.01,
        fail_with: Exception | None = None,
    ) -> None:
        self.index = index
        self.die_after = die_after
        self.delay = delay
        self.fail_with = fail_with
        self.started = 0
        self.live = 0
        self.peak = 0
        self.dead = False
        self.killed = False
        self._waiting: list[asyncio.Future[None]] = []

    async def _run(self, req: EpisodeRequest) -> Trajectory:
        self.started += 1
        self.live += 1
        self.peak = max(self.peak, self.live)
        try:
            if self.die_after is not None and self.started > self.die_after:
                self.dead = True
                for fut in self._waiting:
                    if not fut.done():
                        fut.set_exception(Died(f"worker {self.index} died"))
            if self.dead:
                raise Died(f"worker {self.index} died")
            if self.fail_with is not None:
                raise self.fail_with
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(fut)
            asyncio.get_running_loop().call_later(self.delay, lambda: fut.done() or fut.set_result(None))
            await fut
            return Trajectory(
                trajectory_id=req.trajectory_id,
                group_id=req.group_id,
                task=req.env,
                metadata={"worker": self.index},
            )
        finally:
            self.live -= 1

    def submit(self, req: EpisodeRequest) -> Any:
        return self._run(req)

    def kill(self) -> None:
        self.killed = True


def run(dispatcher: Dispatcher, requests: list[EpisodeRequest]) -> list[Trajectory]:
    out: list[Trajectory] = []
    asyncio.run(dispatcher.run(requests, out.append))
    return out


def is_death(exc: BaseException) -> bool:
    return isinstance(exc, Died)


def test_in_flight_is_bounded_per_worker() -> None:
    workers = [FakeWorker(0), FakeWorker(1)]
    reqs = plan_episodes("t", num_tasks=40, group_size=1)
    d = Dispatcher(workers, in_flight_per_worker=3, is_worker_death=is_death)
    out = run(d, reqs)
    assert sorted(t.trajectory_id for t in out) == sorted(r.trajectory_id for r in reqs)
    assert d.stats.max_in_flight == 6 and all(w.peak <= 3 for w in workers)
    assert d.stats.per_worker[0] + d.stats.per_worker[1] == 40 and min(d.stats.per_worker.values()) >= 15


def test_a_dead_workers_episodes_run_elsewhere_once() -> None:
    doomed = FakeWorker(0, die_after=5, delay=0.05)
    survivor = FakeWorker(1)
    reqs = plan_episodes("t", num_tasks=30, group_size=2)
    d = Dispatcher([doomed, survivor], in_flight_per_worker=4, is_worker_death=is_death)
    out = run(d, reqs)
    ids = [t.trajectory_id for t in out]
    assert len(ids) == len(set(ids)) == 60 and all(t.status is Status.OK for t in out)
    assert doomed.killed and d.stats.worker_deaths == 1 and d.stats.retried >= 4
    assert d.stats.submitted == 60 + d.stats.retried


def test_replacements_take_over_when_all_workers_die() -> None:
    made: list[FakeWorker] = []

    async def spawn(index: int) -> FakeWorker:
        await asyncio.sleep(0.01)
        made.append(FakeWorker(index))
        return made[-1]

    d = Dispatcher(
        [FakeWorker(0, die_after=2)],
        in_flight_per_worker=2,
        is_worker_death=is_death,
        spawn=spawn,
        max_replacements=1,
    )
    out = run(d, plan_episodes("t", num_tasks=10, group_size=1))
    assert len({t.trajectory_id for t in out}) == 10 and d.stats.replacements == 1
    assert {t.metadata["worker"] for t in out} <= {0, 1} and made[0].index == 1


def test_no_workers_left_stops_with_a_resume_hint() -> None:
    d = Dispatcher(
        [FakeWorker(0, die_after=1)], in_flight_per_worker=2, is_worker_death=is_death, max_attempts=10
    )
    with pytest.raises(NoWorkersLeft, match="run the same command again to resume"):
        run(d, plan_episodes("t", num_tasks=5, group_size=1))


def test_an_episode_that_kills_every_worker_is_recorded_as_failed() -> None:
    made = iter(FakeWorker(i, die_after=0) for i in range(1, 10))

    async def spawn(index: int) -> FakeWorker:
        return next(made)

    req = plan_episodes("t", num_tasks=1, group_size=1)
    d = Dispatcher(
        [FakeWorker(0, die_after=0)],
        in_flight_per_worker=1,
        is_worker_death=is_death,
        spawn=spawn,
        max_replacements=5,
        max_attempts=3,
    )
    out = run(d, req)
    assert len(out) == 1 and out[0].status is Status.ERROR and "died 3 times" in (out[0].status_reason or "")
    assert d.stats.gave_up == 1 and d.stats.worker_deaths == 3


def test_other_worker_errors_stop_the_run() -> None:
    d = Dispatcher(
        [FakeWorker(0, fail_with=ValueError("bad config"))], in_flight_per_worker=2, is_worker_death=is_death
    )
    with pytest.raises(ValueError, match="bad config"):
        run(d, plan_episodes("t", num_tasks=3, group_size=1))
