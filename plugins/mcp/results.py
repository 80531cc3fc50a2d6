"""What a model reads of an MCP tool's result (a ``ToolOutput``), and the errors the client turns into
observations: every message says which server and what went wrong."""

from __future__ import annotations

import json
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev set
import mcp_types

from toolgym import ToolOutput
from toolgym.plugins.mcp.servers import McpServer


def describe(error: jsonschema.ValidationError) -> str:
    """A JSON Schema error in words a model can act on: ``argument 'a': '2' is not of type 'integer'``."""
    where = ".".join(str(p) for p in error.absolute_path)
    return f"argument {where!r}: {error.message}" if where else error.message


def to_output(
    server: McpServer, remote: str, result: mcp_types.CallToolResult, output_schema: Any
) -> ToolOutput:
    """What the model reads of a result: its text parts, other parts named, capped head and tail."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[resource {res.uri}, {res.mime_type or 'binary'}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    error = bool(result.is_error)
    if not error and output_schema is not None:
        if result.structured_content is None:
            return ToolOutput(
                f"Error: {server.label} declares an output schema for {remote!r} but returned no structured "
                "result",
                error=True,
                metadata={"mcp_server": server.name, "schema_violation": True},
            )
        problem = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(output_schema)(output_schema).iter_errors(
                result.structured_content
            )
        )
        if problem is not None:
            return ToolOutput(
                f"Error: {server.label} returned a result for {remote!r} that does not match its own output "
                f"schema: {describe(problem)}",
                error=True,
                metadata={"mcp_server": server.name, "schema_violation": True},
            )
    text = "\n".join(parts)
    capped = cap(text, server.max_output_chars)
    return ToolOutput(
        capped or "(no output)",
        error=error,
        metadata={"mcp_server": server.name, "truncated": len(capped) != len(text)},
    )


def cap(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, head and tail kept, the cut said in the middle."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def error_output(server: McpServer, message: str, **metadata: Any) -> ToolOutput:
    return ToolOutput(f"Error: {message}", error=True, metadata={"mcp_server": server.name, **metadata})


def is_schema_lie(exc: BaseException) -> bool:
    """The SDK's own check of a result against the tool's output schema failed (it raises RuntimeError)."""
    return isinstance(exc, RuntimeError) and str(exc).startswith("Invalid structured content")


def schema_lie(server: McpServer, remote: str, exc: BaseException) -> ToolOutput:
    reason = str(exc).split(": ", 1)[-1].splitlines()[0]
    return error_output(
        server,
        f"{server.label} returned a result for {remote!r} that does not match its own output schema: {reason}",
        schema_violation=True,
    )


def innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
