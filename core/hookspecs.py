"""The hooks a toolgym plugin can implement. Each returns a list; built-ins use the same hooks.

A plugin is any module or object with ``@hookimpl`` functions, found through the entry-point
group ``toolgym`` (``[project.entry-points.toolgym] myplugin = "mypkg.plugin"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

PROJECT = "toolgym"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:
    from toolgym.core.env.spec import EnvSpec
    from toolgym.core.parsing.base import ToolParser

    from .commands import AuditCheck, CliCommand
    from .llm.base import LLMBackendSpec
    from .sandbox import SandboxBackendSpec
    from .tools import Tool
    from .trajectory import Trajectory


@hookspec
def toolgym_tools() -> list[Tool]:
    """Tools this plugin provides (objects made with ``@tool``). Names are unique across plugins."""


@hookspec
def toolgym_envs() -> list[EnvSpec]:
    """Environments and tasks this plugin provides, as ``EnvSpec`` (name plus ``"module:Class"``)."""


@hookspec
def toolgym_sandbox_backends() -> list[SandboxBackendSpec]:
    """Sandbox backends (Docker, local, remote) this plugin provides."""


@hookspec
def toolgym_llm_backends() -> list[LLMBackendSpec]:
    """Model backends (token-in/token-out or chat) this plugin provides."""


@hookspec
def toolgym_tool_parsers() -> list[ToolParser]:
    """Parsers that turn model output text into actions (tool calls, answers, commands)."""


@hookspec
def toolgym_trajectory_done(trajectory: Trajectory) -> Any:
    """Called once per finished trajectory (export, logging). Must not block: hand heavy work off."""


@hookspec
def toolgym_cli_commands() -> list[CliCommand]:
    """Command groups this plugin adds to the ``toolgym`` command line (``toolgym index`` is the search
    plugin's). The group's module is imported only when it runs or its help is shown."""


@hookspec
def toolgym_audit_checks() -> list[AuditCheck]:
    """Checks this plugin adds to ``toolgym sandbox audit`` (the SQL tool's database checks)."""
