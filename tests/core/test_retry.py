"""The one backoff rule of every retry loop (``core/util/retry.py``)."""

from __future__ import annotations

import pytest

from toolgym.core.util.retry import CAP_S, backoff_delay


@pytest.mark.parametrize(
    "attempt, jitter, want",
    [
        (1, 0.0, 0.25),
        (1, 0.5, 0.5),
        (2, 0.5, 1.0),
        (3, 0.999, 0.5 * 4 * 1.499),
        (10, 0.5, CAP_S),
        (30, 0.0, CAP_S),
    ],
)
def test_exponential_with_jitter_and_a_cap(attempt: int, jitter: float, want: float) -> None:
    assert backoff_delay(attempt, 0.5, jitter=lambda: jitter) == pytest.approx(want)


def test_a_servers_retry_after_wins_within_the_cap() -> None:
    assert backoff_delay(1, 0.5, retry_after_s=3.0) == 3.0
    assert backoff_delay(1, 0.5, retry_after_s=3600.0) == CAP_S
    assert backoff_delay(1, 0.5, retry_after_s=-1.0) == 0.0


def test_both_retry_loops_use_it() -> None:
    import inspect

    from toolgym.core.llm.clients import http
    from toolgym.core.rollout import policy

    for module in (policy, http):
        source = inspect.getsource(module)
        assert "backoff_delay(" in source and "2 **" not in source, module.__name__


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        backoff_delay(0, 0.5)
