"""Fuzzed actions against every installed environment's ``step``: nothing a model can send may
raise out of it.

Three kinds of action, drawn by hypothesis, are sent to one live episode of each environment
(reset again whenever an action ends it):

- model text (random Unicode with lone surrogates and control characters, format fragments such as
  ``<tool_call>`` and ``search[``, strings of up to a few hundred thousand characters) parsed by the
  environment's own parser, as the engine does;
- tool calls naming tools that do not exist;
- tool calls of real tools with arguments of the wrong JSON types.

Every step must return a ``StepResult``; an invalid action (unparsable text, an unknown tool, wrong
argument types) must give ``valid=False`` and an observation that says what was wrong. The sandbox
backend is the cheapest one the environment starts on (memory, then local, then Docker); an
environment that cannot start on this machine (its data or its browser image missing) is skipped
with the reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgym.core.env.contract import EpisodeContext, StepResult
from toolgym.core.registry import get_registry
from toolgym.core.sandbox import LazySandboxBackend
from toolgym.core.types import Action, ActionKind, ToolCall

ENVS = sorted(get_registry().envs)
FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    '{"name": ',
    '"arguments": ',
    "<answer>",
    "</answer>",
    "<action>",
    "</action>",
    "<think>",
    "</think>",
    "search[",
    "click[",
    "]",
    "{",
    "}",
    "\\u0000",
    "\x00",
    "\ud800",
    "\udfff",
    "\n",
]
JSON_TYPES: dict[str, Any] = {
    "string": "text",
    "integer": 7,
    "number": 1.5,
    "boolean": True,
    "array": [1, "a"],
    "object": {"k": None},
    "null": None,
}

weird_text = st.text(st.characters(categories=["Cs", "Cc", "Co", "So", "Lo", "Zs", "Mn"]), max_size=200)
model_text = st.one_of(
    st.text(max_size=300),
    weird_text,
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), weird_text, st.text(max_size=30)), max_size=12).map(
        "".join
    ),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=16), st.integers(1_000, 25_000)),  # huge
)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | weird_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _wrong_value(schema: dict[str, Any], index: int) -> Any:
    """A value whose JSON type is not the property's declared type(s); ``object()`` when the
    property takes any type."""
    declared = schema.get("type")
    if not declared:
        return object()
    allowed = set(declared if isinstance(declared, list) else [declared])
    if "number" in allowed:
        allowed.add("integer")
    if allowed & {"integer", "number"}:
        allowed.add(
            "boolean"
        )  # tools validate in pydantic's lax mode, where true is 1 (a documented coercion)
    wrong = [v for k, v in JSON_TYPES.items() if k not in allowed]
    return wrong[index % len(wrong)] if wrong else object()


class Episode:
    """One live episode of an environment, on the cheapest sandbox backend it starts on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.registry = get_registry()
        self.env: Any = None
        self.backend: Any = None
        self.ctx: Any = None
        self.resets = 0
        self.reset_s = 0.0
        reasons = []
        for backend in ("memory", "local", "docker"):
            try:
                self.loop.run_until_complete(self._start(backend))
                return
            except Exception as exc:  # try the next backend
                reasons.append(f"{backend}: {type(exc).__name__}: {str(exc)[:160]}")
                self.loop.run_until_complete(self._stop())
        self.loop.close()
        pytest.skip(f"{name} does not start here ({'; '.join(reasons)})")

    async def _start(self, backend: str) -> None:
        self.backend = LazySandboxBackend(self.registry, backend)
        self.env = self.registry.env(self.name).make()
        await self._reset()
        self.parser = self.registry.parser(self.env.parser)

    async def _reset(self) -> None:
        if self.ctx is not None:
            await self.env.close()
            await self.ctx.aclose()
        self.resets += 1
        self.ctx = EpisodeContext(
            episode_id=f"fuzz-{self.name}-{self.resets}", sandbox_backend=self.backend, registry=self.registry
        )
        self.env.bind(self.ctx)
        started = time.perf_counter()
        await asyncio.wait_for(self.env.reset(seed=self.resets), 120)
        self.reset_s = max(self.reset_s, time.perf_counter() - started)

    async def _stop(self) -> None:
        try:
            if self.ctx is not None:
                await self.env.close()
                await self.ctx.aclose()
        finally:
            if self.backend is not None:
                await self.backend.aclose()
            self.ctx = None

    def step(self, action: Action) -> StepResult:
        result = self.loop.run_until_complete(asyncio.wait_for(self.env.step(action), 120))
        assert isinstance(result, StepResult)
        assert isinstance(_observed(result), str)
        if result.terminated or result.truncated:
            self.loop.run_until_complete(self._reset())
        return result

    def close(self) -> None:
        self.loop.run_until_complete(self._stop())
        self.loop.close()


@pytest.fixture(params=ENVS)
def episode(request: pytest.FixtureRequest) -> Iterator[Episode]:
    ep = Episode(request.param)
    try:
        yield ep
    finally:
        ep.close()


def _observed(result: StepResult) -> str:
    """The observation's text: a string (inline, Search-R1 style) or the messages' contents."""
    if isinstance(result.observation, str):
        return result.observation
    return " ".join(str(m.get("content") or "") for m in result.observation)


def _assert_error_observation(result: StepResult, what: str) -> None:
    assert result.valid is False, what
    assert _observed(result).strip(), f"{what}: no observation says what was wrong"


def test_fuzzed_actions_never_raise(episode: Episode) -> None:
    tools = {t.name: t for t in episode.env.tools}
    # environments that take a sandbox or a browser a second to reset get fewer examples
    FUZZ = settings(
        max_examples=40 if episode.reset_s < 0.5 else 8,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )

    @FUZZ
    @given(text=model_text)
    def model_output(text: str) -> None:
        action = episode.parser.parse(text, tools)
        result = episode.step(action)
        if action.kind is ActionKind.INVALID:
            _assert_error_observation(result, f"invalid text {text[:60]!r}")

    @FUZZ
    @given(
        name=st.text(max_size=40) | weird_text,
        args=st.dictionaries(st.text(max_size=10), json_value, max_size=4),
    )
    def unknown_tool(name: str, args: dict[str, Any]) -> None:
        if name in tools:
            return
        result = episode.step(
            Action("call", ActionKind.TOOL_CALLS, tool_calls=[ToolCall(name=name, arguments=args, id="c0")])
        )
        _assert_error_observation(result, f"unknown tool {name[:40]!r}")

    @FUZZ
    @given(which=st.integers(0, 1_000), pick=st.integers(0, 1_000))
    def wrong_argument_types(which: int, pick: int) -> None:
        if not tools:
            return
        tool = list(tools.values())[which % len(tools)]
        props: dict[str, Any] = tool.parameters.get("properties") or {}
        args = {name: _wrong_value(schema, pick) for name, schema in props.items()}
        if not args or any(type(v) is object for v in args.values()):
            return  # no parameter, or one that takes any type: no wrong type to give
        result = episode.step(
            Action(
                "call", ActionKind.TOOL_CALLS, tool_calls=[ToolCall(name=tool.name, arguments=args, id="c0")]
            )
        )
        _assert_error_observation(result, f"{tool.name}({args})")

    model_output()
    unknown_tool()
    wrong_argument_types()
