"""Exceptions a user or plugin author can meet. Each message says what was wrong and what to do."""

from __future__ import annotations


class ToolgymError(Exception):
    """Base of every error toolgym raises on purpose."""


class ConfigError(ToolgymError, ValueError):
    """A setting, argument or file given by the user is invalid."""


class PluginError(ToolgymError):
    """A plugin could not be loaded or declares something invalid. ``plugin`` names it."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"plugin {plugin!r}: {message}")
        self.plugin = plugin
        self.reason = message


class UnknownNameError(ToolgymError, KeyError):
    """A tool, environment, backend or parser name that no loaded plugin provides."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        hint = f"known: {', '.join(sorted(known))}" if known else "none is registered"
        super().__init__(f"unknown {kind} {name!r} ({hint}); check the spelling or install the plugin")
        self.kind = kind
        self.name = name

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ToolArgumentError(ToolgymError):
    """The model called a tool with arguments that do not fit its schema; shown to the model."""


class ToolExecutionError(ToolgymError):
    """A tool failed while running; the message is shown to the model."""


class LLMError(ToolgymError):
    """A model backend failed. ``transient`` errors are retried with backoff."""

    def __init__(self, message: str, *, transient: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


class ContextLengthError(LLMError):
    """A prompt does not fit the model's context (``limit`` tokens): the episode ends truncated, not failed."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class SandboxError(ToolgymError):
    """A sandbox could not be created, reached or used."""


class SandboxBrokenError(SandboxError):
    """The sandbox's agent died or stopped answering; the sandbox must be replaced."""


class PathOutsideSandboxError(SandboxError, PermissionError):
    """A file path leaves the sandbox's work directory (through ``..`` or a symlink)."""
