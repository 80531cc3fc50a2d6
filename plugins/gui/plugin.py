"""Registers the browser tools (default ``BrowserConfig``), as any third-party tool plugin would."""

from __future__ import annotations

from toolgym import Tool, hookimpl
from toolgym.plugins.gui.tools import BROWSER_TOOLS


@hookimpl
def toolgym_tools() -> list[Tool]:
    return list(BROWSER_TOOLS)
