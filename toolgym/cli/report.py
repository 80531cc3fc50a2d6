"""``toolgym report DIR``: a static HTML report of a dataset."""

from __future__ import annotations

from pathlib import Path

import typer

from toolgym.cli.common import console, warn_skipped


def command(
    path: Path = typer.Argument(..., help="A dataset directory."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the report (default: DIR/report)."),
    sample: int = typer.Option(200, help="Episodes to give a page of their own (a uniform random sample)."),
    seed: int = typer.Option(0, help="Seed of the episode sample."),
    success_threshold: float = typer.Option(1.0, help="Reward at or above which an episode is a success."),
    tokenizer: str = typer.Option(
        None, help="Tokenizer (tiny | local dir) to show tokens one by one with their ids and logprobs."
    ),
) -> None:
    """Write index.html (summary, plots, tables) and one page per sampled episode."""
    from toolgym.core.errors import ConfigError
    from toolgym.trajectories.report import build_report
    from toolgym.trajectories.store import ReadReport

    if not path.is_dir():
        raise ConfigError(f"{path} is not a directory; give the directory a `toolgym collect --out` wrote")
    tok = None
    if tokenizer:
        from toolgym.core.llm.resolve import load_tokenizer

        tok = load_tokenizer(tokenizer)
    target = out or path / "report"
    skipped = ReadReport()
    result = build_report(
        path,
        target,
        sample=sample,
        seed=seed,
        success_threshold=success_threshold,
        tokenizer=tok,
        report=skipped,
    )
    console().print(
        f"report of {result.trajectories} trajectories ({result.episode_pages} episode pages) → {result.index}"
    )
    warn_skipped(skipped)
