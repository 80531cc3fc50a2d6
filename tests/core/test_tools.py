"""@tool: schema from signature and docstring, validation, sync/async, timeouts, definition errors."""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import pytest

from toolgym.core.tools import ToolDefinitionError, parse_docstring, tool


class Opaque:
    """A type pydantic cannot describe."""


@tool(timeout_s=5)
async def lookup(
    query: str, limit: int = 3, mode: Literal["fast", "exact"] = "fast", *, ctx=None
) -> list[str]:
    """Look something up.

    Args:
        query: What to look for.
        limit: How many results, at most.
        mode: Matching mode; exact is slower
            but precise.
    """
    return [f"{query}:{i}" for i in range(limit)]


@tool
def slow(seconds: float) -> str:
    """Sleep (a blocking sync tool runs in a thread)."""
    time.sleep(seconds)
    return "done"


def test_schema_from_signature_and_docstring() -> None:
    schema = lookup.schema
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "lookup" and fn["description"] == "Look something up."
    params = fn["parameters"]
    assert params["required"] == ["query"]
    assert params["properties"]["limit"] == {
        "default": 3,
        "description": "How many results, at most.",
        "type": "integer",
    }
    assert params["properties"]["mode"]["enum"] == ["fast", "exact"]
    assert params["properties"]["mode"]["description"] == "Matching mode; exact is slower but precise."
    assert "ctx" not in params["properties"]


async def test_call_validates_and_runs() -> None:
    out = await lookup.call({"query": "x", "limit": 2})
    assert not out.error and out.text == '["x:0", "x:1"]' and out.duration_s >= 0
    bad = await lookup.call({"limit": "many"})
    assert bad.error and "missing required argument 'query'" in bad.text and "limit" in bad.text
    assert (await lookup.call('{"query": "y"}')).text.startswith('["y:0"')
    assert "not valid JSON" in (await lookup.call("{oops")).text


async def test_sync_tool_runs_off_loop_and_times_out() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(10):
            await asyncio.sleep(0.01)
            ticks += 1

    out, _ = await asyncio.gather(slow.call({"seconds": 0.2}), ticker())
    assert out.text == "done" and ticks == 10  # the loop kept running
    late = await slow.call({"seconds": 0.5}, timeout_s=0.05)
    assert late.error and "timed out after 0.05s" in late.text


async def test_tool_exception_becomes_error_output() -> None:
    @tool
    def boom() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    out = await boom.call({})
    assert out.error and "RuntimeError: disk on fire" in out.text


def test_definition_errors() -> None:
    with pytest.raises(ToolDefinitionError, match="needs a type annotation"):

        @tool
        def untyped(x) -> int:  # type: ignore[no-untyped-def]
            """Has an untyped argument."""
            return x

    with pytest.raises(ToolDefinitionError, match="no description"):

        @tool
        def nodoc(x: int) -> int:
            return x

    with pytest.raises(ToolDefinitionError, match="no JSON schema"):

        @tool
        def bad(x: Opaque) -> None:
            """Takes something with no schema."""

    with pytest.raises(ToolDefinitionError, match="keyword-only 'sandbox'"):

        @tool(sandbox="python")
        def needs(code: str) -> None:
            """Runs code."""


def test_parse_docstring_sphinx() -> None:
    summary, args = parse_docstring("Do it.\n\n:param x: the x\n:param int y: the y\n")
    assert summary == "Do it." and args == {"x": "the x", "y": "the y"}


@tool
def typed(count: int, ratio: float = 1.0, name: str = "", flag: bool = False) -> str:
    """Echo typed arguments.

    Args:
        count: An integer.
        ratio: A number.
        name: A string.
        flag: A boolean.
    """
    return f"{count!r} {ratio!r} {name!r} {flag!r}"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"count": True}, "'count'"),  # a boolean is not an integer (pydantic's lax mode took it as 1)
        ({"count": False}, "'count'"),
        ({"count": 1, "ratio": True}, "'ratio'"),  # nor a number
        ({"count": "3"}, "'count'"),  # a numeric string is not a number: refused, never coerced
        ({"count": 1, "ratio": "2.5"}, "'ratio'"),
        ({"count": 3.0}, "'count'"),  # a float is not an integer, even a whole one
        ({"count": 1, "name": 5}, "'name'"),  # a number is not a string
        ({"count": 1, "flag": 1}, "'flag'"),  # an integer is not a boolean
        ({"count": 1, "flag": "true"}, "'flag'"),
        ({"count": 1, "extra": 1}, "unexpected argument 'extra'"),
        ({"count": object()}, "JSON"),  # not a JSON value at all
    ],
)
async def test_validation_is_strict_about_json_types(arguments: dict[str, object], problem: str) -> None:
    out = await typed.call(arguments)
    assert out.error and problem in out.text and out.text.startswith("invalid arguments for typed")


async def test_strict_validation_keeps_what_json_allows() -> None:
    out = await typed.call({"count": 2, "ratio": 3, "name": "x", "flag": True})  # an integer is a number
    assert not out.error and out.text == "2 3.0 'x' True"
    assert (await typed.call('{"count": 2, "ratio": 0.5}')).text == "2 0.5 '' False"
    assert (await lookup.call({"query": "q", "mode": "exact"})).text == '["q:0", "q:1", "q:2"]'


async def test_kwargs_tool_takes_undeclared_arguments() -> None:
    @tool
    def tagged(name: str, **tags: str) -> str:
        """Record a name with free-form tags."""
        return f"{name} {sorted(tags.items())}"

    assert tagged.parameters["additionalProperties"] is True
    assert "tags" not in tagged.parameters["properties"]
    out = await tagged.call({"name": "n", "colour": "red"})
    assert not out.error and out.text == "n [('colour', 'red')]"
    assert "unexpected argument" not in (await tagged.call({"name": "n", "tags": "x"})).text
    assert (await tagged.call({"name": 1})).error  # declared arguments stay strict
    injected = await tagged.call({"name": "n", "ctx": "forged"})  # never an engine-supplied name
    assert injected.error and "unexpected argument 'ctx'" in injected.text
    assert "additionalProperties" not in typed.parameters  # a closed tool's schema says nothing extra


def test_timeout_s_and_its_old_name() -> None:
    """``timeout_s`` is the per-call limit (as ``Tool.timeout_s``); ``timeout=`` still works, with a warning."""
    assert lookup.timeout_s == 5.0

    def ping() -> str:
        """Answer pong."""
        return "pong"

    with pytest.warns(
        FutureWarning, match=r"@tool\(timeout=\.\.\.\) is deprecated: write @tool\(timeout_s=\.\.\.\)"
    ):
        old = tool(timeout=7)(ping)
    assert old.timeout_s == 7.0
    with pytest.warns(FutureWarning), pytest.raises(ToolDefinitionError, match="give only timeout_s"):
        tool(timeout_s=3, timeout=7)(ping)
