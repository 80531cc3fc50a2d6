"""Awaiting a coroutine under a time limit, with no timer for one that finishes without waiting.

``asyncio.timeout`` schedules a timer as it is entered and cancels it as it is left. On the rollout
hot path (an environment step and a tool call every turn, many of them answered in memory without
waiting on anything) that timer is a large part of what the await costs. :func:`within` runs the
coroutine's first step at once and arms the timer only when that step suspends, at the deadline
counted from before the step. The time limit means what ``asyncio.timeout``'s means: code that does
not suspend is interrupted by neither (a timeout can only cancel a task that waits), and a
coroutine that suspends after a long first step is cancelled at the same deadline (at once, when
the deadline has passed).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """``await awaitable`` under ``asyncio.timeout(timeout_s)``: raises ``TimeoutError`` when it has
    not finished ``timeout_s`` seconds from now (None: no limit). A coroutine that finishes without
    suspending arms no timer."""
    if timeout_s is None:
        return await awaitable
    if type(awaitable) is not types.CoroutineType:  # a future or another awaitable: the usual way
        async with asyncio.timeout(timeout_s):
            return await awaitable
    coro: Coroutine[Any, Any, T] = awaitable
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        waiting = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    async with asyncio.timeout_at(deadline):
        return await _rest(coro, waiting)


@types.coroutine
def _rest(coro: Coroutine[Any, Any, T], waiting: Any) -> Generator[Any, Any, T]:
    """The rest of ``await coro`` after a first step that suspended on ``waiting`` (what ``yield
    from`` does, PEP 380): what the task sends or throws in goes on to ``coro``, what ``coro``
    yields goes up to the task."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                waiting = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
