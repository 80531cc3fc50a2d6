"""How long to wait before the next try of a call that failed for a passing reason.

One rule for every retry loop in toolgym (the engine's model calls, the HTTP model clients):
exponential backoff from ``base_s`` with full-range jitter (× 0.5 to 1.5, so many clients that failed
together do not retry together), capped at ``cap_s``. A server's own ``Retry-After`` wins when it
gives one (also capped).
"""

from __future__ import annotations

import random
from collections.abc import Callable

CAP_S = 20.0


def backoff_delay(
    attempt: int,
    base_s: float,
    *,
    cap_s: float = CAP_S,
    retry_after_s: float | None = None,
    jitter: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed try number ``attempt`` (1 for the first)."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, not {attempt}")
    if retry_after_s is not None:
        return max(0.0, min(cap_s, retry_after_s))
    return min(cap_s, base_s * 2 ** (attempt - 1) * (0.5 + jitter()))
