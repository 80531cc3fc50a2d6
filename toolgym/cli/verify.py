"""``toolgym verify``: check token faithfulness of a stored dataset."""

from __future__ import annotations

from pathlib import Path

import typer

from toolgym.cli.common import console, shown, warn_skipped


def command(
    path: Path = typer.Argument(..., help="A dataset directory (JSONL) or a .parquet file."),
    tokenizer: str = typer.Option(None, help="Also check prompts against this tokenizer's chat template."),
    limit: int = typer.Option(20, help="Trajectories with violations to print in full."),
) -> None:
    """Check every token-faithfulness invariant; exit 1 if any trajectory violates one or a line
    of the dataset cannot be read (the readable rest is still checked)."""
    from toolgym.core.errors import ConfigError
    from toolgym.trajectories.parquet import read_parquet
    from toolgym.trajectories.store import ReadReport, iter_trajectories
    from toolgym.trajectories.verify import verify

    chat = None
    if tokenizer:
        from toolgym.core.rollout.policies import policy_tokenizer
        from toolgym.core.tokens.chat import ChatFormat

        chat = ChatFormat(policy_tokenizer(tokenizer))
    skipped = ReadReport()
    if path.suffix == ".parquet" and path.is_file():
        import pyarrow as pa

        try:
            report = verify(read_parquet(path), chat=chat)
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise ConfigError(
                f"{path} is not a Parquet file of trajectories ({exc}); give a file `toolgym export parquet` wrote"
            ) from None
    else:
        report = verify(iter_trajectories(path, include_failures=True, report=skipped), chat=chat, root=path)
    c = console()
    for i, (tid, problems) in enumerate(report.violations.items()):
        if i >= limit:
            c.print(f"… and {len(report.violations) - limit} more trajectories with violations")
            break
        c.print(f"[red]✗ {shown(tid)}[/]")
        for p in problems:
            c.print(f"    {shown(p)}")
    verdict = (
        "[green]all invariants hold[/]"
        if report.ok
        else f"[red]{len(report.violations)} trajectories violate invariants[/]"
    )
    if skipped.bad:
        verdict += f"; [red]{len(skipped.bad)} unreadable line(s) skipped[/]"
    c.print(
        f"checked {report.checked} trajectories ({report.skipped} not token-faithful by design): {verdict}"
    )
    warn_skipped(skipped)
    if not report.ok or skipped.bad:
        raise typer.Exit(1)
