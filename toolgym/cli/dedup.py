"""``toolgym dedup DIR --out NEW``: copy a dataset without duplicate trajectories."""

from __future__ import annotations

from pathlib import Path

import typer

from toolgym.cli.common import console


def command(
    path: Path = typer.Argument(..., help="A dataset directory."),
    out: Path = typer.Option(..., "--out", "-o", help="The new dataset directory."),
    by: str = typer.Option(
        "prompt",
        help="id: drop repeated trajectory ids · prompt: also drop task instances whose prompt repeats an earlier one.",
    ),
    include_failures: bool = typer.Option(False, help="Also copy episodes that ended in error."),
) -> None:
    """Write a copy of the dataset with duplicates removed (the first occurrence is kept)."""
    from toolgym.trajectories.dedup import dedup_dataset

    r = dedup_dataset(path, out, by=by, include_failures=include_failures)  # type: ignore[arg-type]
    console().print(
        f"kept {r.kept} trajectories → {out}; dropped {r.dropped_ids} repeated ids and "
        f"{r.dropped} trajectories of {r.dropped_groups} task instances with a repeated prompt"
    )
