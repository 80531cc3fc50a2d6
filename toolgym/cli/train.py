"""``toolgym train --config FILE [section.key=value ...]``: train with verl (or the local trainer).

The config file has a ``toolgym`` section (environment, estimator, engine limits, task splits)
and a ``verl`` section (merged over verl's ``ppo_trainer`` defaults); both trainers compose it the
same way (``toolgym.training.config_file``: OmegaConf, its dotlist overrides, one error line).
``FILE`` may also name a shipped example of either trainer (``alfworld_gigpo``, ``keychain_cpu``,
``keychain_gigpo``, ...; the trainer's own folder first).

``--trainer`` picks the trainer: ``verl`` (the default when verl is installed) or ``local``, the
single-process reference trainer (``toolgym.training.local``, which must expose
``run(config: str, overrides: list[str], *, dry_run: bool) -> None`` and read the same file).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import typer

from toolgym.core.errors import ConfigError

TRAINERS = ("verl", "local")


def default_trainer() -> str:
    """``verl`` when it is installed, else ``local``."""
    return "verl" if importlib.util.find_spec("verl") is not None else "local"


def command(
    config: str = typer.Option(
        ...,
        "--config",
        "-c",
        help="Config file (YAML with toolgym: and verl: sections), or a shipped example's name.",
    ),
    overrides: list[str] = typer.Argument(
        None,
        help="Overrides such as toolgym.env=webshop or verl.trainer.total_training_steps=2 (+verl.KEY=V adds a key verl does not declare).",
    ),
    trainer: str = typer.Option(
        None, "--trainer", help="verl | local (default: verl when installed, else local)."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Compose and check the config, write the task files, print the config, and stop.",
    ),
    data_dir: Path = typer.Option(
        None,
        "--data-dir",
        help="Where to write the task-index Parquet files (default: under trainer.default_local_dir).",
    ),
) -> None:
    """Train a policy on an environment with RL."""
    choice = trainer or default_trainer()
    if choice not in TRAINERS:
        raise ConfigError(f"unknown trainer {choice!r}; use one of {', '.join(TRAINERS)}")
    if choice == "verl":
        _train_verl(config, overrides or [], dry_run=dry_run, data_dir=data_dir)
    else:
        _train_local(config, overrides or [], dry_run=dry_run)


def _errors_only(record: logging.LogRecord) -> bool:
    """A logging filter (one object, so adding it twice adds it once)."""
    return record.levelno >= logging.ERROR


def _train_verl(config: str, overrides: list[str], *, dry_run: bool, data_dir: Path | None) -> None:
    if importlib.util.find_spec("verl") is None:
        raise ConfigError(
            "verl is not installed; install it with `pip install toolgym[verl]` or use --trainer local"
        )
    # verl lists every optional training engine it cannot import (torchtitan, megatron, ...) as a
    # UserWarning on import; none of them is used here.
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    if dry_run:  # composing a config needs no accelerator: verl's "none detected, falling back" is noise here
        # a filter, not a level: verl sets that logger's level again each time the module runs
        logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_errors_only)
    from toolgym.training.verl import compose

    cfg, settings = compose.compose_config(config, overrides, data_dir=data_dir)
    compose.check_config(cfg)
    compose.check_environment(settings)
    for key, value in compose.summary(cfg, settings).items():
        typer.echo(f"{key:>24}: {value}")
    if dry_run:
        typer.echo(compose.to_yaml(cfg))
        return
    compose.run_training(cfg)


def _train_local(config: str, overrides: list[str], *, dry_run: bool) -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' load/save bars
    try:
        local: Any = importlib.import_module("toolgym.training.runner")
    except ModuleNotFoundError:
        local = None
    run = getattr(local, "run", None)
    if run is None:
        raise ConfigError(
            "the local reference trainer is not available in this version of toolgym "
            "(toolgym.training.runner has no run()); install toolgym[verl] and use --trainer verl"
        )
    run(config, overrides, dry_run=dry_run)
