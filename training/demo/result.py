"""What the demo pipeline returns (its own module: the report writer reads it, the pipeline writes it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class DemoResult:
    """Held-out success before and after RL, with where the time went."""

    before: float
    after: float
    seed: int
    out: Path
    wall_s: float
    cpu_s: float
    phases: dict[str, float]
    history: list[dict[str, Any]]
    sft_losses: list[float]
    sft_checks: list[tuple[int, float]]
    """(SFT steps so far, greedy success on the training-split validation tasks) at each check."""
    verify_ok: bool
    config: dict[str, Any]
