"""RunGuard: when a collection stops early, and when it must not."""

from __future__ import annotations

import pytest

from toolgym.collect.guard import RunGuard, failure_kind
from toolgym.core.trajectory import Status, Trajectory
from toolgym.trajectories.store import StoreWriteError


def _t(i: int, reason: str | None) -> Trajectory:
    status = Status.OK if reason is None else Status.ERROR
    return Trajectory(trajectory_id=f"t{i}", group_id="g", task="x", status=status, status_reason=reason)


def _feed(reasons: list[str | None], fail_fast: int = 4) -> tuple[RunGuard, list[str]]:
    stored: list[str] = []
    stops: list[int] = []
    guard = RunGuard(
        lambda t: stored.append(t.trajectory_id), fail_fast=fail_fast, stop=lambda: stops.append(1)
    )
    for i, r in enumerate(reasons):
        guard(_t(i, r))
    assert len(stops) == (1 if guard.reason else 0)
    return guard, stored


@pytest.mark.parametrize(
    ("reasons", "stops"),
    [
        (["boom at port 8001"] * 3 + ["boom at port 8002"], True),  # numbers differ: the same error
        (["boom"] * 3 + [None], False),  # one success: per-episode trouble
        ([None] + ["boom"] * 10, False),  # the window is the run's first episodes
        (["boom", "bang", "boom", "boom"], False),  # different errors
        (["boom"] * 3, False),  # fewer than the window: the run ends by itself
    ],
)
def test_fail_fast_window(reasons: list[str | None], stops: bool) -> None:
    guard, stored = _feed(reasons)
    assert (guard.reason is not None) is stops
    assert len(stored) == len(reasons)  # failures are stored either way


def test_fail_fast_zero_never_stops_and_all_failed_says_why() -> None:
    guard, _ = _feed(["boom 1"] * 20 + ["bang"], fail_fast=0)
    assert guard.reason is None
    assert guard.all_failed() is not None and "all 21 episodes failed" in guard.all_failed()  # type: ignore[operator]
    assert "boom 1" in guard.all_failed()  # type: ignore[operator]


def test_write_error_stops_once_and_stores_nothing_more() -> None:
    calls: list[str] = []
    stops: list[int] = []

    def write(t: Trajectory) -> None:
        calls.append(t.trajectory_id)
        if len(calls) >= 2:
            raise StoreWriteError("disk full")

    guard = RunGuard(write, fail_fast=4, stop=lambda: stops.append(1))
    for i in range(5):
        guard(_t(i, None))
    assert calls == ["t0", "t1"] and stops == [1]
    assert guard.write_error is not None and guard.reason == "disk full"


def test_failure_kind_blanks_numbers() -> None:
    assert failure_kind("timeout after 30s at 0xdeadbeef") == failure_kind("timeout after 31s at 0xfeed")
    assert failure_kind(None) == "unknown error"


def test_any_write_failure_stops_the_run_instead_of_escaping() -> None:
    stops: list[int] = []

    def write(t: Trajectory) -> None:
        raise TypeError("cannot encode this")

    guard = RunGuard(write, fail_fast=4, stop=lambda: stops.append(1))
    guard(_t(0, None))
    guard(_t(1, None))
    assert stops == [1] and guard.write_error is not None
    assert "could not store trajectory t0" in str(
        guard.write_error
    ) and "TypeError: cannot encode this" in str(guard.write_error)
