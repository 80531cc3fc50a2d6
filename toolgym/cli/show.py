"""``toolgym show``: list a dataset or render one trajectory in the terminal."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import typer

from toolgym.cli.common import console, warn_skipped


def command(
    path: Path = typer.Argument(..., help="A dataset directory."),
    trajectory_id: str = typer.Argument(
        None, help="Id (or unique prefix) of the trajectory to render; omit to list."
    ),
    tokens: bool = typer.Option(False, help="Also show the token stream coloured by loss mask."),
    limit: int = typer.Option(50, help="Rows to list."),
) -> None:
    """Render one trajectory readably, or list the dataset's trajectories."""
    from toolgym.trajectories.show import render_trajectory, summary_table
    from toolgym.trajectories.store import ReadReport, find_trajectory, iter_raw

    c = console()
    skipped = ReadReport()
    if trajectory_id is None:
        c.print(summary_table(list(islice(iter_raw(path, include_failures=True, report=skipped), limit))))
    else:
        c.print(render_trajectory(find_trajectory(path, trajectory_id, report=skipped), tokens=tokens))
    warn_skipped(skipped)
