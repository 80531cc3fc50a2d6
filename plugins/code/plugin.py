"""Registers the ``python`` and ``bash`` tools, as any third-party tool plugin would."""

from __future__ import annotations

from toolgym import Tool, hookimpl
from toolgym.plugins.code.tools import bash, python


@hookimpl
def toolgym_tools() -> list[Tool]:
    return [python, bash]
