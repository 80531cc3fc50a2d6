"""``within``: ``asyncio.timeout``'s meaning, with no timer for a coroutine that finishes at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from toolgym.core.deadline import within


def hold_the_loop(seconds: float) -> None:
    """A long synchronous stretch of a coroutine (nothing else runs meanwhile)."""
    time.sleep(seconds)


def count_timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The deadlines of the timers the running loop schedules from now on."""
    loop = asyncio.get_running_loop()
    scheduled: list[float] = []
    call_at = loop.call_at

    def counting(when: float, *args: Any, **kwargs: Any) -> Any:
        scheduled.append(when)
        return call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    return scheduled


async def test_a_coroutine_that_does_not_wait_arms_no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    async def at_once() -> int:
        return 7

    timers = count_timers(monkeypatch)
    assert await within(at_once(), 5.0) == 7
    assert timers == []


async def test_a_coroutine_that_waits_gets_the_deadline_counted_from_before_its_first_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def waits() -> str:
        hold_the_loop(0.05)  # a long first step, then a wait
        await asyncio.sleep(0)
        return "done"

    timers = count_timers(monkeypatch)
    before = asyncio.get_running_loop().time()
    assert await within(waits(), 5.0) == "done"
    assert len(timers) == 1 and before + 5.0 <= timers[0] < before + 5.04  # not 5 s after the first step


async def test_it_times_out_as_asyncio_timeout_does() -> None:
    async def slow() -> None:
        await asyncio.sleep(10)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await within(slow(), 0.05)
    assert time.monotonic() - started < 5

    async def long_first_step() -> None:
        hold_the_loop(0.1)  # past the deadline before it first waits: cancelled at that wait
        await asyncio.sleep(10)

    with pytest.raises(TimeoutError):
        await within(long_first_step(), 0.01)

    async def never_waits() -> str:
        hold_the_loop(0.05)
        return "finished"  # nothing can interrupt code that does not wait, with either

    assert await within(never_waits(), 0.01) == "finished"
    async with asyncio.timeout(0.01):
        assert await never_waits() == "finished"


async def test_values_exceptions_and_cancellation_pass_through() -> None:
    async def fails_at_once() -> None:
        raise ValueError("first step")

    with pytest.raises(ValueError, match="first step"):
        await within(fails_at_once(), 1.0)

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    with pytest.raises(KeyError, match="later"):
        await within(fails_later(), 1.0)

    async def sums() -> int:
        loop = asyncio.get_running_loop()
        total = 0
        for k in range(3):
            fut = loop.create_future()
            loop.call_soon(fut.set_result, k + 1)
            total += await fut  # the values the awaited futures give come back in
        return total

    assert await within(sums(), 1.0) == 6

    caught: list[str] = []

    async def handles_cancel() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            caught.append("cancelled")
            raise
        return "never"

    task = asyncio.create_task(within(handles_cancel(), 5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):  # cancelled from outside: not a timeout
        await task
    assert caught == ["cancelled"]

    async def swallows_timeout() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "cleaned up"  # a coroutine that returns after its cancellation
        return "never"

    async with asyncio.timeout(0.02):
        assert await swallows_timeout() == "cleaned up"
    assert await within(swallows_timeout(), 0.02) == "cleaned up"  # as under asyncio.timeout


async def test_nested_limits_the_inner_one_first() -> None:
    async def inner() -> None:
        await asyncio.sleep(10)

    async def outer() -> str:
        try:
            await within(inner(), 0.02)
        except TimeoutError:
            return "inner timed out"
        return "never"

    assert await within(outer(), 5.0) == "inner timed out"

    async def outer_first() -> None:
        await within(inner(), 5.0)

    with pytest.raises(TimeoutError):
        await within(outer_first(), 0.02)


async def test_other_awaitables_and_no_limit() -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    loop.call_soon(fut.set_result, "future")
    assert await within(fut, 1.0) == "future"
    with pytest.raises(TimeoutError):
        await within(loop.create_future(), 0.01)

    async def value() -> int:
        await asyncio.sleep(0)
        return 3

    assert await within(value(), None) == 3
