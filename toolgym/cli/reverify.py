"""``toolgym reverify DIR``: re-score stored trajectories with the current reward functions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from toolgym.cli.common import console, registry_or_exit, shown, warn_skipped


def command(
    path: Path = typer.Argument(..., help="A dataset directory."),
    changes: Path = typer.Option(
        None, "--changes", help="Write every changed trajectory to this JSONL file."
    ),
    sandbox_backend: str = typer.Option(
        "auto",
        help="Sandboxes for tool replays: auto | docker | local | none | memory (in-process, NO isolation: needs --unsafe-in-process-sandbox).",
    ),
    unsafe_in_process_sandbox: bool = typer.Option(
        False,
        "--unsafe-in-process-sandbox",
        help="Let an in-process sandbox backend (memory) replay the stored, model-written tool calls: no isolation at all.",
    ),
    concurrency: int = typer.Option(8, help="Trajectories replayed at once."),
    tolerance: float = typer.Option(1e-9, help="Reward differences up to this are no change."),
    limit: int = typer.Option(20, help="Changed trajectories to print."),
) -> None:
    """Replay each trajectory's actions in its environment and compare the rewards; exit 1 if any changed."""
    from toolgym.core.sandbox import lazy_sandbox_backend, require_isolation
    from toolgym.trajectories.reverify import Change, ReverifyReport, reverify
    from toolgym.trajectories.store import ReadReport, dataset_manifest, iter_trajectories

    registry = registry_or_exit()
    if not unsafe_in_process_sandbox:  # the replayed actions are a model's
        require_isolation(registry, sandbox_backend, allow="--unsafe-in-process-sandbox")
    manifest = dataset_manifest(path)
    env_kwargs = (manifest.get("fingerprint") or {}).get("env_kwargs") or {}
    versions = manifest.get("environment", {}).get("package")
    sink = changes.open("w", encoding="utf-8") if changes else None
    skipped = ReadReport()

    def on_change(change: Change) -> None:
        if sink is not None:
            sink.write(json.dumps(change.to_dict()) + "\n")

    async def run() -> ReverifyReport:
        sandboxes = lazy_sandbox_backend(registry, sandbox_backend)
        try:
            return await reverify(
                iter_trajectories(path, report=skipped),
                registry,
                env_kwargs=env_kwargs,
                sandbox_backend=sandboxes,
                concurrency=concurrency,
                tolerance=tolerance,
                keep=limit,
                on_change=on_change,
            )
        finally:
            if sandboxes is not None:
                await sandboxes.aclose()

    try:
        r = asyncio.run(run())
    finally:
        if sink is not None:
            sink.close()
    c = console()
    for ch in r.changes:
        if ch.error:
            c.print(f"[red]✗ {shown(ch.trajectory_id)}[/] replay failed: {shown(ch.error)}")
            continue
        steps = ", ".join(f"step {s['index']}: {s['stored']:g} → {s['new']:g}" for s in ch.step_changes)
        c.print(
            f"[yellow]Δ {shown(ch.trajectory_id)}[/] reward {ch.stored_reward:g} → {ch.new_reward:g}"
            + (f" ({steps})" if steps else "")
            + (
                f"; terminated {ch.stored_terminated} → {ch.new_terminated}"
                if ch.stored_terminated != ch.new_terminated
                else ""
            )
        )
    n = r.checked or 1
    c.print(
        f"re-scored {r.checked} trajectories: {r.unchanged} unchanged, {r.changed} changed, {r.replay_errors} replay errors"
        f" · mean reward stored {r.stored_reward_sum / n:.4f} → now {r.new_reward_sum / n:.4f}"
        f" · {r.observation_mismatches} with different observations, {r.parse_mismatches} steps parsed differently"
    )
    if versions:
        c.print(
            f"[dim]collected with {versions.get('name')} {versions.get('version')} (environment package)[/]"
        )
    if changes:
        c.print(f"all changes: {changes}")
    warn_skipped(skipped)
    if r.changed or r.replay_errors:
        raise typer.Exit(1)
