"""Built-in tool-call parsers, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from toolgym.core.hookspecs import hookimpl
from toolgym.core.parsing.base import ToolParser, builtin_parsers


@hookimpl
def toolgym_tool_parsers() -> list[ToolParser]:
    return builtin_parsers()
