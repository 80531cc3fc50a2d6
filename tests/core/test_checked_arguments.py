"""A tool call's arguments are validated once: by the parser, whose validated values the tool then
uses (``Tool.check``, ``CheckedArguments``). They read as the plain dict everywhere, any change
makes the tool validate again, and an episode records exactly what it recorded when the tool
validated the arguments a second time and every step and call armed its timer."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from toolgym import EngineConfig, RolloutEngine, hookimpl, plan_episodes
from toolgym.core.env.spec import EnvSpec
from toolgym.core.env.tool_task import Task, ToolTaskEnv
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.parsing.base import HermesParser, XMLTagParser
from toolgym.core.parsing.families import Llama3JsonParser
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.tools import CheckedArguments, Tool, tool
from toolgym.core.trajectory import ToolCallRecord, Trajectory
from toolgym.core.types import ActionKind


@tool
async def add(a: int, b: int = 0, note: str | None = None) -> str:
    """Add two integers."""
    return f"{a + b} {note}"


@tool
async def tag(items: list[str], limit: int = 2) -> str:
    """Tag items."""
    items.append("seen")  # a tool that changes what it was given
    return ",".join(items[:limit])


@tool
async def run(code: str) -> str:
    """Run code (waits, as a sandboxed tool does)."""
    await asyncio.sleep(0)
    return f"ran {len(code)} characters"


TOOLS = {t.name: t for t in (add, tag, run)}


@contextlib.contextmanager
def counted_validations() -> Iterator[list[str]]:
    names: list[str] = []
    original = Tool.validate

    def counting(self: Tool, arguments: Any) -> dict[str, Any]:
        names.append(self.name)
        return original(self, arguments)

    Tool.validate = counting  # type: ignore[method-assign]
    try:
        yield names
    finally:
        Tool.validate = original  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (HermesParser(), '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'),
        (Llama3JsonParser(), '{"name": "add", "parameters": {"a": 2, "b": 3}}'),
        (XMLTagParser(), "<run>print(1)</run>"),
    ],
)
async def test_a_parsed_call_is_validated_once(parser: Any, text: str) -> None:
    with counted_validations() as validated:
        action = parser.parse(text, TOOLS)
        assert action.kind is ActionKind.TOOL_CALLS, action.error
        call = action.tool_calls[0]
        out = await TOOLS[call.name].call(call.arguments)
    assert not out.error and validated == [call.name]
    assert out.text == (await TOOLS[call.name].call(dict(call.arguments))).text  # as from a plain dict


async def test_checked_arguments_read_as_the_plain_dict() -> None:
    action = HermesParser().parse(
        '<tool_call>{"name": "add", "arguments": {"a": 1, "note": "é \\"q\\""}}</tool_call>', TOOLS
    )
    args = action.tool_calls[0].arguments
    plain = {"a": 1, "note": 'é "q"'}
    assert type(args) is CheckedArguments and args == plain
    assert (json.dumps(args), repr(args), str(args), list(args.items())) == (
        json.dumps(plain),
        repr(plain),
        str(plain),
        list(plain.items()),
    )
    for copied in (pickle.loads(pickle.dumps(args)), copy.copy(args), copy.deepcopy(args), args.copy()):
        assert type(copied) is dict and copied == plain
    record = ToolCallRecord(name="add", arguments=args)
    assert (
        type(record.arguments) is dict
        and record.model_dump_json() == ToolCallRecord(name="add", arguments=plain).model_dump_json()
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda a: a.__setitem__("a", "x"),
        lambda a: a.update(a="x"),
        lambda a: a.setdefault("b", "x"),
        lambda a: a.__ior__({"a": "x"}),
        lambda a: a.pop("a"),
        lambda a: a.popitem(),
        lambda a: a.clear(),
        lambda a: a.__delitem__("a"),
    ],
)
async def test_a_change_makes_the_tool_validate_again(change: Callable[[dict[str, Any]], Any]) -> None:
    args = HermesParser().parse('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', TOOLS)
    checked = args.tool_calls[0].arguments
    change(checked)
    with counted_validations() as validated:
        out = await add.call(checked)
    assert validated == ["add"]
    assert (out.error, out.text) == (
        (await add.call(dict(checked))).error,
        (await add.call(dict(checked))).text,
    )
    assert out.error  # each change above leaves arguments that add refuses


async def test_values_are_handed_out_once_and_only_to_the_tool_that_checked() -> None:
    checked = add.check({"a": 1})
    assert type(checked) is CheckedArguments
    with counted_validations() as validated:
        assert (await add.call(checked)).text == "1 None"
        assert (await add.call(checked)).text == "1 None"  # a replay: validated afresh
    assert validated == ["add"]
    same_name = Tool(**{f: getattr(add, f) for f in Tool.__dataclass_fields__})
    checked = add.check({"a": 1})
    with counted_validations() as validated:
        assert (await same_name.call(checked)).text == "1 None"
    assert validated == ["add"]


async def test_arguments_holding_containers_are_validated_by_the_tool() -> None:
    arguments = {"items": ["a", "b", "c"]}
    assert tag.check(arguments) is arguments  # a container could change inside: not wrapped
    with counted_validations() as validated:
        assert (await tag.call(arguments)).text == "a,b"
    assert validated == ["tag"]


# -- an episode records the same either way ---------------------------------------------------------


class AddEnv(ToolTaskEnv):
    tools = [add, run]
    max_turns = 6

    def load_task(self, seed: int) -> Task:
        return Task(id=str(seed), question=f"Add {seed} and 2, then run it.", answer=str(seed + 2))


REPLIES = [
    '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    '<tool_call>\n{"name": "run", "arguments": {"code": "print(3)"}}\n</tool_call>',
    '<tool_call>\n{"name": "add", "arguments": {"a": "one"}}\n</tool_call>',  # refused by the parser
    '<tool_call>\n{"name": "add", "arguments": {"a": 4, "note": "ok"}}\n</tool_call>',
    "3",
]


class AddPlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("add-env", AddEnv)]


def reply(prompt: str, _index: int) -> str:
    return REPLIES[prompt.count("<|im_start|>assistant") - 1]


async def run_episodes(tokenizer: Any) -> list[Trajectory]:
    from toolgym.core.builtin import parsers

    registry = Registry.load(entry_points=False, plugins=[("parsers", parsers), ("add", AddPlugin())])
    cfg = EngineConfig(
        max_turns=6, max_live_episodes=1
    )  # one at a time: the mock's logprobs follow its calls
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=registry,
        policy=ModelPolicy(MockLLMBackend(tokenizer, reply), cfg),
        config=cfg,
        on_trajectory=out.append,
    )
    await engine.run(plan_episodes("add-env", num_tasks=3, group_size=1))
    return sorted(out, key=lambda t: t.task_index)


VARYING = {"timings", "created_at", "latency_s", "duration_s", "env_s", "run_id"}
"""What differs between two runs of the same episodes: times, and each engine's own run id."""


def comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


async def test_an_episode_records_what_it_did_with_two_validations_and_every_timer(
    qwen_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = await run_episodes(qwen_tokenizer)

    async def with_timer(awaitable: Any, timeout_s: float | None) -> Any:
        async with asyncio.timeout(timeout_s):
            return await awaitable

    monkeypatch.setattr("toolgym.core.tools.within", with_timer)
    monkeypatch.setattr("toolgym.core.rollout.episode.within", with_timer)
    monkeypatch.setattr(Tool, "check", lambda self, arguments: (self.validate(arguments), arguments)[1])
    before = await run_episodes(qwen_tokenizer)
    assert [t.status.value for t in fast] == ["ok"] * 3
    assert [s.valid for s in fast[0].steps] == [True, True, False, True, True]
    assert [comparable(t.model_dump(mode="json")) for t in fast] == [
        comparable(t.model_dump(mode="json")) for t in before
    ]
