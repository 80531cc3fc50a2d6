"""The ``toolgym train`` config file, composed the same way for both trainers.

A file has a ``toolgym`` section (environment, estimator, engine limits, task splits), a ``verl``
section (verl's ``ppo_trainer`` keys) and, for the local trainer, an optional ``warm_start``
section. :func:`compose_file` finds it (a path, or a shipped example's name), loads it with
OmegaConf, applies command-line overrides in OmegaConf's dotlist grammar (``section.key=value``;
values are YAML, so ``toolgym.env_kwargs={split: test}`` merges a mapping and
``verl.trainer.logger=[console,file]`` sets a list) and resolves ``${...}`` interpolations against
the whole file. A ``+`` before an override (``+verl.KEY=VALUE``) adds a key on purpose: the verl
bridge merges these past verl's check of its own keys, and the local trainer past its check of the
``verl`` keys it reads. Every mistake found here is one :class:`ConfigError` line, whichever
trainer reads the file; each trainer then checks what it reads (``training/verl/compose.py``,
``training/runner.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from toolgym.core.errors import ConfigError

SECTIONS = ("toolgym", "verl", "warm_start")
LOCAL_EXAMPLES = Path(__file__).parent / "local" / "configs"
"""The examples shipped with the local trainer (``keychain_gigpo.yaml``, ...)."""
VERL_EXAMPLES = Path(__file__).parent / "verl" / "configs"
"""The examples shipped with the verl bridge (``alfworld_gigpo.yaml``, ...)."""


@dataclass(frozen=True)
class ConfigFile:
    """A config file with its overrides applied; interpolations resolved in both parts."""

    path: Path
    """The file that was read (a shipped example when a name was given)."""
    written: DictConfig
    """The file as written, before any override (interpolations unresolved)."""
    config: DictConfig
    """The file with its plain ``section.key=value`` overrides."""
    additions: DictConfig
    """The ``+section.key=value`` overrides alone: keys the file need not have."""

    def merged(self) -> DictConfig:
        """:attr:`config` with :attr:`additions` merged over it."""
        out = OmegaConf.merge(self.config, self.additions)
        assert isinstance(out, DictConfig)
        return out

    def to_dict(self) -> dict[str, Any]:
        """:meth:`merged` as plain Python values."""
        out = OmegaConf.to_container(self.merged(), resolve=True)
        assert isinstance(out, dict)
        return {str(k): v for k, v in out.items()}


def resolve_config(name: str | os.PathLike[str], *, examples: Path) -> Path:
    """A config file path, or the name of a shipped example (``webshop_gigpo``): ``examples`` first
    (the calling trainer's own folder, where both ship a file of that name), then the other one."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    folders = (examples, *(f for f in (LOCAL_EXAMPLES, VERL_EXAMPLES) if f != examples))
    for folder in folders:
        candidate = folder / f"{Path(name).stem}.yaml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for folder in (LOCAL_EXAMPLES, VERL_EXAMPLES) for p in folder.glob("*.yaml")})
    raise ConfigError(
        f"config file {str(name)!r} not found; give a path or one of the shipped examples: {', '.join(known)}"
    )


def compose_file(
    name: str | os.PathLike[str], overrides: Sequence[str] = (), *, examples: Path
) -> ConfigFile:
    """The file ``name`` (see :func:`resolve_config`) with ``overrides`` applied, checked and resolved."""
    path = resolve_config(name, examples=examples)
    try:
        written = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        raise ConfigError(f"config file {str(name)!r} is not valid YAML: {_yaml_error(exc)}") from None
    if not isinstance(written, DictConfig) or "toolgym" not in written:
        raise ConfigError(f"config file {str(name)!r} needs a `toolgym:` section (env, advantage, ...)")
    unknown = sorted(str(k) for k in set(written.keys()) - set(SECTIONS))
    if unknown:
        raise ConfigError(
            f"config file {str(name)!r} has unknown section(s) {', '.join(unknown)}; "
            f"the sections are {', '.join(SECTIONS)}"
        )
    config: DictConfig | ListConfig = written
    additions: DictConfig | ListConfig = OmegaConf.create()
    for item in overrides:
        parsed = _parse_override(item)
        try:
            if item.startswith("+"):
                additions = OmegaConf.merge(additions, parsed)
            else:
                config = OmegaConf.merge(config, parsed)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override {item!r} does not fit the file: {_first_line(exc)}") from None
    try:  # interpolations see the whole file, additions included
        resolved = OmegaConf.to_container(OmegaConf.merge(config, additions), resolve=True)
    except OmegaConfBaseException as exc:
        where = getattr(exc, "full_key", None)
        raise ConfigError(
            f"config file {str(name)!r}: cannot resolve {where or 'an interpolation'}: {_first_line(exc)} "
            "(an interpolation names a key of the file or its overrides, e.g. ${toolgym.group_size})"
        ) from None
    assert isinstance(resolved, dict)
    return ConfigFile(
        path=path,
        written=written,
        config=OmegaConf.create(_shaped(resolved, OmegaConf.to_container(config))),
        additions=OmegaConf.create(_shaped(resolved, OmegaConf.to_container(additions))),
    )


def _parse_override(item: str) -> DictConfig:
    """One override, ``[+]section.key=value``, as a config of its own (the value parsed as YAML)."""
    key, eq, _ = item.partition("=")
    parts = key.lstrip("+").split(".")
    if not eq or len(parts) < 2 or not all(parts):
        raise ConfigError(
            f"override {item!r} is not of the form section.key=value (e.g. verl.trainer.total_training_steps=2)"
        )
    if parts[0] not in SECTIONS:
        raise ConfigError(
            f"override {item!r} must start with one of {', '.join(SECTIONS)} (e.g. toolgym.env=webshop)"
        )
    try:
        return OmegaConf.from_dotlist([item.lstrip("+")])
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        raise ConfigError(
            f"override {item!r} has a value that is not valid YAML: {_yaml_error(exc)}"
        ) from None


def _shaped(resolved: dict[Any, Any], shape: Any) -> Any:
    """The values of ``resolved`` at the keys of ``shape`` (a mapping: its keys, recursively)."""
    if not isinstance(shape, dict) or not isinstance(resolved, dict):
        return resolved
    return {k: _shaped(resolved[k], v) for k, v in shape.items()}


def _yaml_error(exc: Exception) -> str:
    """A YAML parser's complaint in one line, with where it was found."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
