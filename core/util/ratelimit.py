"""Client-side rate limits for hosted model APIs: requests per second and tokens per minute.

Two token buckets. The request bucket holds up to ``max(1, requests_per_s)`` requests (one
second's burst) and refills at ``requests_per_s``; the token bucket holds ``tokens_per_min``
tokens (one minute's burst, as hosted APIs meter per minute) and refills at ``tokens_per_min / 60``
per second. A call first takes one request and an *estimate* of its tokens (prompt plus the most
it may generate, as providers count them before answering); when the answer reports its usage,
:meth:`RateLimiter.settle` corrects the bucket by the difference. An estimate above the bucket's
size is charged at the size (else it could never run) and the rest is settled as debt, so later
calls wait for it.

Waiters are served in arrival order (one lock); a waiter sleeps exactly until the buckets hold what
it needs. ``clock`` and ``sleep`` can be replaced (a fake clock in tests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from toolgym.core.errors import ConfigError

_EPSILON = 1e-9
"""Shortfalls below this count as none: float rounding must not make a waiter sleep for 1e-17 s
forever (a clock that cannot advance by so little)."""


@dataclass
class _Bucket:
    rate: float
    """Units added per second."""
    capacity: float
    level: float
    last: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.last) * self.rate)
        self.last = now

    def wait_for(self, now: float, amount: float) -> float:
        """Seconds until ``amount`` units are available (0 when they are now)."""
        self.refill(now)
        short = amount - self.level
        return 0.0 if short <= _EPSILON else short / self.rate


class RateLimiter:
    """Token buckets shared by every model call of a run. Safe to share between coroutines of one
    event loop; not between processes (each shard of a collection has its own limits)."""

    def __init__(
        self,
        *,
        requests_per_s: float | None = None,
        tokens_per_min: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if requests_per_s is None and tokens_per_min is None:
            raise ConfigError("a rate limiter needs requests_per_s or tokens_per_min (or both)")
        for name, value in (("requests per second", requests_per_s), ("tokens per minute", tokens_per_min)):
            if value is not None and value <= 0:
                raise ConfigError(f"the limit on {name} must be positive, got {value:g}")
        self.requests_per_s = requests_per_s
        self.tokens_per_min = tokens_per_min
        self._clock = clock
        self._sleep = sleep
        now = clock()
        self._requests = (
            None
            if requests_per_s is None
            else _Bucket(requests_per_s, max(1.0, requests_per_s), max(1.0, requests_per_s), now)
        )
        self._tokens = (
            None
            if tokens_per_min is None
            else _Bucket(tokens_per_min / 60.0, tokens_per_min, tokens_per_min, now)
        )
        self._lock = asyncio.Lock()
        self.requests = 0
        """Requests let through so far."""
        self.tokens = 0
        """Tokens charged so far, after settling."""
        self.waited_s = 0.0
        """Total seconds callers spent waiting for the limits."""

    async def acquire(self, tokens: int = 0) -> int:
        """Wait until one more request and ``tokens`` (an estimate) fit the limits, then take them.
        Returns the tokens charged, to hand back to :meth:`settle`."""
        charge = 0 if self._tokens is None else int(min(max(0, tokens), self._tokens.capacity))
        async with self._lock:
            while True:
                now = self._clock()
                wait = max(
                    self._requests.wait_for(now, 1.0) if self._requests is not None else 0.0,
                    self._tokens.wait_for(now, charge) if self._tokens is not None else 0.0,
                )
                if wait <= 0:
                    break
                self.waited_s += wait
                await self._sleep(wait)
            if self._requests is not None:
                self._requests.level -= 1.0
            if self._tokens is not None:
                self._tokens.level -= charge
            self.requests += 1
            self.tokens += charge
        return charge

    def settle(self, charged: int, used: int) -> None:
        """Replace the estimate ``charged`` by the tokens the call really ``used`` (may go into debt)."""
        if self._tokens is None:
            return
        self._tokens.level -= used - charged
        self.tokens += used - charged

    def describe(self) -> dict[str, float | None]:
        """The limits, for manifests."""
        return {"requests_per_s": self.requests_per_s, "tokens_per_min": self.tokens_per_min}
