"""``toolgym demo``: the embedded end-to-end job on a laptop CPU (scripted data → SFT → GiGPO).

See :mod:`toolgym.training.demo.run` for the phases. Prints held-out success before and after RL
and where the outputs went.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from toolgym.cli.progress import LiveProgress

PHASES = {
    "setup": "model",
    "collect": "scripted data",
    "sft": "warm start (SFT)",
    "eval-before": "held-out (before)",
    "rl": "RL (GiGPO)",
    "rl-episodes": "  rollouts",
}


class PhaseBars(LiveProgress):
    """One rich progress bar per phase, created when the phase starts; plain lines off a terminal."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        super().__init__(
            console,
            TextColumn("[bold blue]{task.description:<20}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
        )
        self.tasks: dict[str, Any] = {}
        self._printed: dict[str, int] = {}

    def __call__(self, phase: str, done: int, total: int, note: str) -> None:
        label = PHASES.get(phase, phase)
        if self.live:
            if phase not in self.tasks:
                self.tasks[phase] = self.progress.add_task(label, total=total, note=note)
            self.progress.update(self.tasks[phase], completed=done, total=total, note=note)
            return
        step = max(1, total // 10)
        if phase != "rl-episodes" and (done == total or done - self._printed.get(phase, -step) >= step):
            self._printed[phase] = done
            self.console.print(f"{label}: {done}/{total} {note}")


def command(
    out: Path = typer.Option(
        Path("toolgym-demo"), "--out", "-o", help="Output directory (datasets, PNG, report)."
    ),
    seed: int = typer.Option(0, help="Seed of everything: weights, data, sampling, tasks."),
    quick: bool = typer.Option(
        False, "--quick", help="A one-minute run through every phase (for smoke tests)."
    ),
    threads: int = typer.Option(2, help="Torch CPU threads."),
    rl_steps: int = typer.Option(None, help="RL steps (default: the tuned full run's)."),
) -> None:
    """Collect scripted trajectories, warm-start a tiny model on them, train it with GiGPO on a
    multi-turn tool task, and report held-out success before and after RL."""
    # Idle OpenMP workers sleep instead of spinning: on a shared or busy CPU, spinning threads
    # steal the cores the other thread needs (10x slower decode steps measured on 2 shared cores).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault(
        "HF_HUB_DISABLE_PROGRESS_BARS", "1"
    )  # transformers' load/save bars: the phases have their own
    from toolgym.cli.common import err_console
    from toolgym.training.demo.run import DemoConfig, run_demo

    changes: dict[str, Any] = {"out": out, "seed": seed, "threads": threads}
    if rl_steps is not None:
        changes["rl_steps"] = rl_steps
    cfg = DemoConfig.quick(**changes) if quick else DemoConfig(**changes)
    console = err_console()
    with PhaseBars(console) as bars:
        result = run_demo(cfg, bars)
    console.print(
        f"held-out success: warm start [bold]{result.before:.1%}[/] → after RL [bold green]{result.after:.1%}[/] "
        f"(seed {result.seed}, {result.config['eval_tasks']} tasks) · wall {result.wall_s:.0f} s, CPU {result.cpu_s:.0f} s"
    )
    console.print(
        f"report: {out / 'report.md'} · curve: {out / 'learning_curve.png'} · rollouts: {out / 'trajectories'}"
    )
