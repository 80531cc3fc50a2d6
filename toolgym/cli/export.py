"""``toolgym export``: write a dataset out in another format (every export streams)."""

from __future__ import annotations

from pathlib import Path

import typer

from toolgym.cli.common import console, warn_skipped

app = typer.Typer(no_args_is_help=True, help="Export a trajectory dataset to other formats.")


@app.command("parquet")
def parquet(
    path: Path = typer.Argument(..., help="A dataset directory."),
    out: Path = typer.Option(..., "--out", "-o", help="The .parquet file to write."),
    include_failures: bool = typer.Option(False, help="Also export episodes that ended in error."),
) -> None:
    """Token ids, loss masks, logprobs and steps, one row per trajectory (streamed)."""
    from toolgym.trajectories.parquet import write_parquet
    from toolgym.trajectories.store import ReadReport, iter_trajectories

    skipped = ReadReport()
    n = write_parquet(iter_trajectories(path, include_failures=include_failures, report=skipped), out)
    console().print(f"wrote {n} trajectories to {out} ({out.stat().st_size / 1e6:.2f} MB)")
    warn_skipped(skipped)


@app.command("hf")
def hf(
    path: Path = typer.Argument(..., help="A dataset directory."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="The directory to write (datasets.load_dataset(OUT) reads it)."
    ),
    test_fraction: float = typer.Option(0.0, help="Fraction of task instances (groups) put in a test split."),
    rows_per_file: int = typer.Option(10_000, help="Rows per Parquet file."),
    include_failures: bool = typer.Option(False, help="Also export episodes that ended in error."),
    success_threshold: float = typer.Option(
        1.0, help="Reward at or above which an episode counts as a success (dataset card)."
    ),
) -> None:
    """A Hugging Face `datasets` directory: Parquet files and a dataset card (README.md).

    One row per trajectory: token ids, loss masks, logprobs, steps, and a `messages` column with
    the conversation in TRL's conversational format (role, content, tool_calls, tool_call_id)."""
    from toolgym.trajectories.export_hf import write_hf_dataset
    from toolgym.trajectories.store import ReadReport, dataset_manifest, iter_trajectories

    skipped = ReadReport()
    result = write_hf_dataset(
        iter_trajectories(path, include_failures=include_failures, report=skipped),
        out,
        manifest=dataset_manifest(path),
        test_fraction=test_fraction,
        rows_per_file=rows_per_file,
        success_threshold=success_threshold,
        images_root=path,
    )
    splits = ", ".join(f"{s}: {n} rows in {len(result.files[s])} file(s)" for s, n in result.rows.items())
    console().print(f"wrote {out} ({splits}); load it with datasets.load_dataset({str(out)!r})")
    warn_skipped(skipped)


@app.command("sft")
def sft(
    path: Path = typer.Argument(..., help="A dataset directory."),
    out: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="The file to write: .jsonl (one chat per line) or .parquet (a messages and a tools column, "
        "as verl's MultiTurnSFTDataset and datasets.load_dataset read).",
    ),
    min_reward: float = typer.Option(None, help="Keep only trajectories with at least this reward."),
    only_success: bool = typer.Option(
        False, help="Keep only successful trajectories (reward ≥ --success-threshold)."
    ),
    success_threshold: float = typer.Option(1.0, help="Reward at or above which an episode is a success."),
    untrainable: bool = typer.Option(
        True, help="Keep trajectories marked untrainable (SFT retokenises text)."
    ),
) -> None:
    """OpenAI-format chat messages with tool_calls and tool results, plus the tool schemas
    (JSONL, or Parquet when --out ends in .parquet)."""
    from toolgym.trajectories.export_sft import write_sft
    from toolgym.trajectories.images import has_image_store
    from toolgym.trajectories.store import ReadReport, iter_trajectories

    skipped = ReadReport()
    floor = success_threshold if only_success else min_reward
    written, dropped = write_sft(
        iter_trajectories(path, report=skipped),
        out,
        min_reward=floor,
        include_untrainable=untrainable,
        images=has_image_store(path),
    )
    console().print(f"wrote {written} conversations to {out} ({dropped} filtered out)")
    warn_skipped(skipped)


@app.command("verl")
def verl(
    path: Path = typer.Argument(..., help="A dataset directory."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="The .parquet file to write (verl's data.train_files)."
    ),
    min_success_rate: float = typer.Option(
        0.0, help="Keep task instances the collection solved at least this often."
    ),
    max_success_rate: float = typer.Option(
        1.0,
        help="Keep task instances the collection solved at most this often (0.99 drops always-solved ones).",
    ),
    success_threshold: float = typer.Option(1.0, help="Reward at or above which an episode is a success."),
) -> None:
    """verl's prompt Parquet: one row per task instance, for the toolgym_agent loop."""
    from toolgym.trajectories.export_verl import write_verl_prompts
    from toolgym.trajectories.store import ReadReport, dataset_manifest, iter_raw

    skipped = ReadReport()
    manifest = dataset_manifest(path)
    env_kwargs = (manifest.get("fingerprint") or {}).get("env_kwargs") or {}
    result = write_verl_prompts(
        lambda: iter_raw(path, report=skipped),
        out,
        env_kwargs=env_kwargs,
        success_threshold=success_threshold,
        min_success_rate=min_success_rate,
        max_success_rate=max_success_rate,
        images_root=path,
    )
    console().print(
        f"wrote {result.rows} task instances to {out} ({result.filtered} of {result.groups} left out by the success-rate bounds)"
    )
    warn_skipped(skipped)
