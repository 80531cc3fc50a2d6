"""``toolgym warmstart --env alfworld``: build (once; cached) the warm start RL configs start from.

See :mod:`toolgym.training.warmstart.build` for the recipe: the tiny model fine-tuned on scripted
trajectories with injected mistakes for a fixed budget of SFT steps, short of mastery so that RL has
room to show. On one machine, a build with the same ``--threads`` gives bit-identical weights.
"""

from __future__ import annotations

import json
import os
from typing import Any

import typer


def command(
    env: str = typer.Option(
        ...,
        "--env",
        "-e",
        help="Recipe: alfworld, webshop, math-python or miniwob_screenshot (the environment's "
        "name; math_python, the recipe's, works too).",
    ),
    force: bool = typer.Option(False, "--force", help="Build again even when a cached copy exists."),
    threads: int = typer.Option(
        2, help="Torch CPU threads (kept in warmstart.json: another count can round floats differently)."
    ),
    device: str = typer.Option(
        "cpu", help="cpu or cuda: where SFT and validation run (not part of the recipe's cache key)."
    ),
    set_: list[str] = typer.Option(
        None,
        "--set",
        help="Recipe field=value (e.g. --set mistake_rate=0.2 --set sft_max_steps=800); changes the cache key.",
    ),
) -> None:
    """Build the warm start of an environment (cached) and print its directory."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import yaml

    from toolgym.cli.common import err_console
    from toolgym.core.errors import ConfigError
    from toolgym.training.warmstart import build as warmstart

    changes: dict[str, Any] = {}
    for item in set_ or []:
        key, eq, raw = item.partition("=")
        if not eq:
            raise ConfigError(f"--set {item!r} must look like FIELD=VALUE")
        changes[key.strip()] = yaml.safe_load(raw)
    by_env = {
        r.env: name for name, r in warmstart.RECIPES.items()
    }  # collect's name (math-python) or the recipe's
    env = by_env.get(env, env)
    recipe = warmstart.recipe(env, **changes)
    console = err_console()
    out = warmstart.find_built(recipe)
    if out is not None and not force:
        console.print(f"cached: {out}")
    else:
        printed: dict[str, int] = {}

        def progress(phase: str, done: int, total: int, note: str) -> None:
            step = max(1, total // 10)
            # a line every 10 %, and every validation check (a report, or the early stop of a recipe with sft_target)
            if done == total or done - printed.get(phase, -step) >= step or " · validation" in note:
                printed[phase] = done
                console.print(f"{phase}: {done}/{total} {note}", highlight=False)

        out = warmstart.build(recipe, progress=progress, threads=threads, force=force, device=device)
    info = json.loads((out / "warmstart.json").read_text())
    checks = info.get("validation") or []
    target = info["recipe"].get("sft_target")
    checked = f", validation success {checks[-1][1]:.0%}" if checks else ""
    if checks and target is not None:
        checked += f" (early stop at {target:.0%})"
    console.print(
        f"warm start {env}: {info['sft_steps']} SFT steps on {info['rows']} rows{checked}; "
        f"use it with model.path warmstart:{env}"
    )
    typer.echo(str(out))
