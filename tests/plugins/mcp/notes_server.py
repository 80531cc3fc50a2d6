"""A small MCP server written with the SDK (``MCPServer``, FastMCP's name in mcp 2), for the tests:
run over stdio (``python3 notes_server.py``) or served over streamable HTTP (``http_app()``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
_notes: list[str] = []


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def run_python(code: str) -> str:
    """Run Python code; return what it prints."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    return done.stdout + done.stderr


@server.tool()
def remember(note: str) -> str:
    """Keep a note; returns how many notes are kept."""
    _notes.append(note)
    return f"{len(_notes)} notes"


@server.tool()
def big(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os.write(2, b"notes server: crashing on purpose\n")
    os._exit(3)


@server.tool()
def point() -> dict[str, int]:
    """A point, as a structured result."""
    return {"x": 1, "y": 2}


# The server lies: it advertises for `point` a result with a string `label` it never returns.
object.__setattr__(
    server._tool_manager.get_tool("point").fn_metadata,
    "output_schema",
    {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]},
)


@server.tool()
def broken(a: int) -> str:
    """A tool whose advertised input schema is not valid JSON Schema."""
    return str(a)


# Lies again: `broken` advertises an argument of a type JSON Schema does not have.
server._tool_manager.get_tool("broken").parameters = {
    "type": "object",
    "properties": {"a": {"type": "integerish"}},
}


def http_app() -> Any:
    return server.streamable_http_app()


if __name__ == "__main__":
    server.run()
