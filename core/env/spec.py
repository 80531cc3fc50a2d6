"""How a plugin registers an environment (``EnvSpec``), and the helpers that build one from text:
``load_object`` (``"package.module:Name"``) and ``parse_flag`` (a boolean ``--env-arg``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.env.contract import Env
from toolgym.core.errors import ConfigError


@dataclass(slots=True)
class EnvSpec:
    """How a plugin registers an environment: a name and a ``"module:Class"`` (or a class/factory)."""

    name: str
    entry: str | type[Env] | Callable[..., Env]
    description: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    plugin: str = ""
    scripted_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options a ``--model scripted`` run uses unless the user gives them (MiniWoB++:
    ``tasks=solvable``, the tasks that have a scripted solver); also the fix its error suggests."""

    def make(self, **overrides: Any) -> Env:
        factory = self.entry
        if isinstance(factory, str):
            factory = load_object(factory)
        env = factory(**{**self.kwargs, **overrides})
        if not isinstance(env, Env):
            raise ConfigError(
                f"environment {self.name!r}: {self.entry!r} made a {type(env).__name__}, not an Env"
            )
        return env


def parse_flag(value: bool | str | int | None, name: str, default: bool = True) -> bool:
    """A boolean option given as a bool or as text (``--env-arg sql_sandbox=false``); None or empty → ``default``."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def load_object(path: str) -> Any:
    """Import ``"package.module:Attr"``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{path!r} is not of the form 'package.module:Name'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
