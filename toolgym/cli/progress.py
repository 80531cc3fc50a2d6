"""Progress bars of the CLI: ``LiveProgress`` (a rich progress display shown only on a terminal)
and ``EngineProgress`` (live engine counts: done, running, failed, mean reward, tokens/s)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from toolgym.cli.common import shown

if TYPE_CHECKING:
    from toolgym.core.rollout.engine import EngineStats


class LiveProgress:
    """A rich ``Progress`` that runs (as a context manager) only when enabled and on a terminal;
    off a terminal (CI logs) subclasses print plain lines instead."""

    def __init__(self, console: Console, *columns: Any, enabled: bool = True, **options: Any) -> None:
        self.console = console
        self.live = enabled and console.is_terminal
        self.progress = Progress(*columns, console=console, **options)

    def __enter__(self) -> Any:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()


class EngineProgress(LiveProgress):
    def __init__(
        self, console: Console, *, total: int, enabled: bool = True, label: str = "episodes"
    ) -> None:
        super().__init__(
            console,
            TextColumn("[bold blue]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            enabled=enabled,
            transient=False,
        )
        self._plain = enabled and not console.is_terminal
        self._last_plain = -1
        self.label = label
        self._task = self.progress.add_task(label, total=total, counts="")
        self._images: Any = None

    def warm(self, done: int, total: int, image: str, what: str) -> None:
        """Progress of the per-task images warmed before the episodes (a second row; off a
        terminal, a line per image pulled or missing)."""
        if self.live:
            if self._images is None:
                self._images = self.progress.add_task("images", total=total, counts="")
            self.progress.update(
                self._images, completed=done, counts=f"{what} {shown(image)}"
            )  # a dataset's name
        elif self._plain and what != "present":
            self.console.print(f"images {done}/{total}: {what} {shown(image)}", soft_wrap=True)

    def update(self, stats: EngineStats) -> None:
        counts = (
            f"running {stats.running} · failed {stats.failed} · reward {stats.mean_reward:.3f} · "
            f"{stats.tokens_per_s:.0f} tok/s"
        )
        if self.live:
            self.progress.update(self._task, total=stats.total or None, completed=stats.done, counts=counts)
        elif (
            self._plain
            and stats.total
            and stats.done != self._last_plain
            and (stats.done == stats.total or stats.done % max(1, stats.total // 10) == 0)
        ):
            # not a terminal (CI logs): a line every 10%
            self._last_plain = stats.done
            self.console.print(f"{self.label} {stats.done}/{stats.total} · {counts}")
