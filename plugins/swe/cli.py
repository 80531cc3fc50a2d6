"""``toolgym swe``: the per-instance images of SWE-bench / SWE-Gym / SWE-smith task files.

toolgym swe images TASKS.jsonl                       # which images the file needs, which are here
toolgym swe images TASKS.jsonl --build --repo-dir D  # pull them, or build them from clones under D
toolgym swe images --prune --max-gb 200              # drop least-recently-used ones over 200 GB
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from toolgym import ConfigError, SandboxError
from toolgym.cli.common import console
from toolgym.core.util.terminal import visible

app = typer.Typer(no_args_is_help=True, help="SWE tasks: the per-instance Docker images of a task file.")


def _api() -> Any:
    from toolgym.sandboxes.docker import engine

    if not engine.engine_answers():
        raise SandboxError(
            "no Docker engine answers: start one (bash scripts/ensure-docker.sh), then run this again"
        )
    return engine.api()


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "-"


@app.command("images")
def images(
    taskfile: Path = typer.Argument(
        None, help="A .json, .jsonl or .parquet file of SWE-bench, SWE-Gym or SWE-smith rows."
    ),
    family: str = typer.Option("auto", help="auto | swebench | swegym | swesmith (as --env-arg family=)."),
    image_namespace: str = typer.Option(
        None, help="Registry namespace of the images (as --env-arg image_namespace=)."
    ),
    instance_ids: str = typer.Option(None, help="Comma-separated instance ids (default: every row)."),
    build: bool = typer.Option(
        False,
        "--build",
        help="Make the missing images: pulled when a registry answers, else built from --repo-dir.",
    ),
    repo_dir: Path = typer.Option(
        None,
        "--repo-dir",
        help="Folder of git clones named like the rows' repo (owner/name, owner__name or name).",
    ),
    base: str = typer.Option(
        None,
        "--base",
        help="Base image of offline builds (default toolgym/sandbox-shell:latest: git, Python, pytest).",
    ),
    pull: bool = typer.Option(
        True, help="Try the registry before building (--no-pull: build from --repo-dir only)."
    ),
    prune: bool = typer.Option(
        False, "--prune", help="Remove least-recently-used toolgym-built images beyond --max-gb."
    ),
    max_gb: float = typer.Option(
        None, "--max-gb", help="With --prune: the budget, in GB (10^9 bytes), of the images' own layers."
    ),
    match: str = typer.Option(
        "*", "--match", help="With --prune: only images with a tag matching this glob (e.g. 'swebench/*')."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --prune: say what would go, remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON rows instead of the table."),
) -> None:
    """List the images a task file needs and which are present; build the missing ones; prune by an LRU budget."""
    from toolgym.plugins.swe import images as swe_images

    if prune != (max_gb is not None):
        raise ConfigError("--prune and --max-gb go together: `toolgym swe images --prune --max-gb 100`")
    if max_gb is not None and max_gb < 0:
        raise ConfigError(f"--max-gb must be at least 0, got {max_gb}")
    if taskfile is None and not prune:
        raise ConfigError("give a task file (toolgym swe images TASKS.jsonl), or --prune --max-gb N")
    if repo_dir is not None and not repo_dir.is_dir():
        raise ConfigError(
            f"--repo-dir {repo_dir} is not a folder; give the folder that holds the repositories' clones"
        )
    api = _api()
    if taskfile is not None:
        from toolgym.plugins.swe.datasets import load_tasks

        ids = [i.strip() for i in instance_ids.split(",") if i.strip()] if instance_ids else None
        plans = swe_images.plan_images(
            load_tasks(taskfile, family, instance_ids=ids, image_namespace=image_namespace)
        )
        if build:
            started = time.monotonic()
            result = swe_images.build_missing(
                api,
                plans,
                repo_dir=repo_dir,
                base=base or swe_images.DEFAULT_BASE,
                pull=pull,
                progress=lambda line: typer.echo(visible(line), err=True),
            )
            typer.echo(
                f"{len(result.built)} built, {len(result.pulled)} pulled, {len(result.present)} already present, "
                f"{len(result.failed)} failed in {time.monotonic() - started:.1f} s",
                err=True,
            )
        _show(swe_images.image_rows(api, plans), as_json=as_json)
        if build and result.failed:
            raise typer.Exit(1)
    if prune:
        _prune(api, max_gb or 0.0, match=match, dry_run=dry_run)


def _show(rows: list[Any], *, as_json: bool) -> None:
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "image": r.plan.image,
                        "repo": r.plan.repo,
                        "commit": r.plan.commit,
                        "instances": r.plan.instance_ids,
                        "present": r.present,
                        "size": r.size,
                        "built_here": r.built_here,
                        "last_used": r.last_used,
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    from rich.table import Table

    table = Table("image", "instances", "commit", "state", "size", "last used")
    table.columns[0].overflow = "fold"
    for r in rows:
        ids = r.plan.instance_ids
        shown = ids[0] + (f" +{len(ids) - 1}" if len(ids) > 1 else "")
        state = (
            ("[green]built here[/]" if r.built_here else "[green]present[/]")
            if r.present
            else "[red]missing[/]"
        )
        table.add_row(
            r.plan.image,
            shown,
            r.plan.commit[:8] or "-",
            state,
            _bytes(r.size) if r.present else "-",
            _when(r.last_used),
        )
    console().print(table)
    present = [r for r in rows if r.present]
    missing = len(rows) - len(present)
    hint = "" if not missing else " · make them with --build (offline: --repo-dir DIR)"
    typer.echo(f"{len(rows)} images: {len(present)} present, {missing} missing{hint}")


def _prune(api: Any, max_gb: float, *, match: str, dry_run: bool) -> None:
    from toolgym.plugins.swe import images as swe_images

    result = swe_images.prune(api, int(max_gb * 1e9), match=match, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for tag, size in result.removed:
        typer.echo(f"{verb} {tag} ({_bytes(size)})", err=True)
    if result.in_use:
        typer.echo(
            f"kept {len(result.in_use)} images a container still uses: {', '.join(result.in_use[:5])}",
            err=True,
        )
    freed = sum(size for _, size in result.removed)
    typer.echo(
        f"{verb} {len(result.removed)} images ({_bytes(freed)}); toolgym's per-instance images now hold "
        f"{_bytes(result.kept_bytes)} of their {max_gb:g} GB budget (their own layers, not the shared base)"
    )
