"""Sizes of the statistical tests: CI's by default, the full ones with ``TOOLGYM_FULL=1``.

A statistical test (an agreement rate over many random walks, a rate over many episodes) runs in
``make test`` at a size picked to still fail on a real regression in well under a minute, and with
``TOOLGYM_FULL=1`` at the size its documented figure was measured at (``docs/fidelity.md``, the
benches). Each such test says what its CI size keeps of the full one.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

FULL = os.environ.get("TOOLGYM_FULL", "").strip() not in ("", "0")
"""Whether this run asked for the full sizes (``TOOLGYM_FULL=1``)."""


def ci_or_full(ci: T, full: T) -> T:
    """``full`` when ``TOOLGYM_FULL`` is set (and not 0), else ``ci``."""
    return full if FULL else ci
