"""The plugin manager: loads every plugin of the ``toolgym`` entry-point group and indexes what
they provide. A broken plugin (import error, duplicate name, bad schema) is recorded as one
``PluginError`` naming it; the other plugins still load.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pluggy

from toolgym.core.env.spec import EnvSpec, load_object
from toolgym.core.parsing.base import ToolParser

from . import hookspecs
from .commands import AuditCheck, CliCommand
from .errors import PluginError, UnknownNameError
from .llm.base import LLMBackendSpec
from .sandbox import SandboxBackendSpec
from .tools import Tool
from .trajectory import Trajectory

log = logging.getLogger("toolgym.plugins")

ENTRY_POINT_GROUP = "toolgym"
EXTRA_PLUGINS_ENV = "TOOLGYM_PLUGINS"
"""Comma-separated ``module`` or ``module:attr`` plugins to load besides the installed ones
(handy for trying a plugin before packaging it); a class is instantiated."""
T = TypeVar("T")


class Registry:
    """Everything the loaded plugins provide, by name."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.errors: list[PluginError] = []
        self.tools: dict[str, Tool] = {}
        self.envs: dict[str, EnvSpec] = {}
        self.sandbox_backends: dict[str, SandboxBackendSpec] = {}
        self.llm_backends: dict[str, LLMBackendSpec] = {}
        self.parsers: dict[str, ToolParser] = {}
        self.cli_commands: dict[str, CliCommand] = {}
        self.audit_checks: dict[str, AuditCheck] = {}
        self.plugin_names: list[str] = []

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, *, entry_points: bool = True, plugins: Iterable[tuple[str, Any]] = ()) -> Registry:
        """Build a registry from installed entry points plus explicit ``(name, plugin)`` pairs."""
        reg = cls()
        if entry_points:
            for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                try:
                    obj = ep.load()
                except Exception as exc:
                    reg._fail(
                        ep.name, f"could not be imported from {ep.value!r}: {type(exc).__name__}: {exc}"
                    )
                    continue
                reg.add_plugin(ep.name, obj)
            for spec in filter(None, (s.strip() for s in os.environ.get(EXTRA_PLUGINS_ENV, "").split(","))):
                try:
                    obj = load_object(spec) if ":" in spec else importlib.import_module(spec)
                    if isinstance(obj, type):
                        obj = obj()
                except Exception as exc:
                    reg._fail(
                        spec, f"could not be loaded from {EXTRA_PLUGINS_ENV}: {type(exc).__name__}: {exc}"
                    )
                    continue
                reg.add_plugin(spec, obj)
        for name, obj in plugins:
            reg.add_plugin(name, obj)
        return reg

    def add_plugin(self, name: str, plugin: Any) -> None:
        """Register one plugin and index what it provides; failures are recorded, not raised."""
        if self.pm.has_plugin(name):
            self._fail(
                name, "a plugin of this name is already registered (two packages use one entry-point name)"
            )
            return
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # pluggy validates hook implementations against the specs
            self._fail(name, f"its hooks do not match toolgym's hookspecs: {exc}")
            return
        self.plugin_names.append(name)
        self._collect(name, "toolgym_tools", Tool, self.tools, "tool")
        self._collect(name, "toolgym_envs", EnvSpec, self.envs, "environment")
        self._collect(
            name, "toolgym_sandbox_backends", SandboxBackendSpec, self.sandbox_backends, "sandbox backend"
        )
        self._collect(name, "toolgym_llm_backends", LLMBackendSpec, self.llm_backends, "LLM backend")
        self._collect(name, "toolgym_tool_parsers", ToolParser, self.parsers, "tool parser")
        self._collect(name, "toolgym_cli_commands", CliCommand, self.cli_commands, "command")
        self._collect(name, "toolgym_audit_checks", AuditCheck, self.audit_checks, "audit check")

    def _collect(self, plugin_name: str, hook: str, kind: type, into: dict[str, Any], label: str) -> None:
        plugin = self.pm.get_plugin(plugin_name)
        impl_fn: Callable[[], Any] | None = getattr(plugin, hook, None)
        if impl_fn is None or not hasattr(impl_fn, f"{hookspecs.PROJECT}_impl"):
            return
        try:
            items = impl_fn()
        except Exception as exc:
            self._fail(plugin_name, f"{hook}() raised {type(exc).__name__}: {exc}")
            return
        if items is None:
            return
        if not isinstance(items, (list, tuple)):
            self._fail(plugin_name, f"{hook}() must return a list, got {type(items).__name__}")
            return
        staged: dict[str, Any] = {}
        for item in items:
            if not isinstance(item, kind):
                hint = " (decorate the function with @tool)" if kind is Tool else ""
                self._fail(plugin_name, f"{hook}() returned {item!r}, which is not a {kind.__name__}{hint}")
                return
            item_name: str = getattr(item, "name", "")
            if item_name in into or item_name in staged:
                owner = getattr(into.get(item_name), "plugin", "") or plugin_name
                self._fail(
                    plugin_name,
                    f"{label} {item_name!r} is already provided by plugin {owner!r}; rename one of them",
                )
                continue
            staged[item_name] = item
        for item_name, item in staged.items():
            try:
                item.plugin = plugin_name  # type: ignore[attr-defined]
            except AttributeError:
                pass
            into[item_name] = item

    def _fail(self, plugin: str, message: str) -> None:
        err = PluginError(plugin, message)
        self.errors.append(err)
        log.warning("%s", err)

    # -- lookups -------------------------------------------------------------------------------

    def tool(self, name: str) -> Tool:
        return _get(self.tools, "tool", name)

    def env(self, name: str) -> EnvSpec:
        return _get(self.envs, "environment", name)

    def parser(self, name: str) -> ToolParser:
        return _get(self.parsers, "tool parser", name)

    def llm_backend(self, name: str) -> LLMBackendSpec:
        return _get(self.llm_backends, "LLM backend", name)

    def sandbox_backend(self, name: str) -> SandboxBackendSpec:
        return _get(self.sandbox_backends, "sandbox backend", name)

    def notify_trajectory_done(self, trajectory: Trajectory) -> None:
        """Call every observer; one failing observer is logged and does not stop the others."""
        for impl in self.pm.hook.toolgym_trajectory_done.get_hookimpls():
            try:
                impl.function(trajectory=trajectory)
            except Exception as exc:
                log.warning("trajectory observer of plugin %r failed: %s", impl.plugin_name, exc)


def _get(table: dict[str, T], kind: str, name: str) -> T:
    try:
        return table[name]
    except KeyError:
        raise UnknownNameError(kind, name, list(table)) from None


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry(*, reload: bool = False) -> Registry:
    """The process-wide registry of installed plugins, loaded once."""
    global _default
    with _default_lock:
        if _default is None or reload:
            _default = Registry.load()
        return _default
