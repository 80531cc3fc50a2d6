"""Tool-call parsers: correct on well-formed output, an INVALID action (never an exception) otherwise."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.core.parsing.base import EnvActionParser, HermesParser, XMLTagParser
from toolgym.core.tools import tool
from toolgym.core.types import ActionKind


@tool
def run_python(code: str) -> str:
    """Run Python code."""
    return code


@tool
def add(a: int, b: int = 0) -> int:
    """Add two numbers."""
    return a + b


@tool
def search(query: str, topk: int = 3) -> str:
    """Search the corpus."""
    return query


TOOLS = {t.name: t for t in (run_python, add, search)}


def test_hermes_parses_calls_and_answers() -> None:
    p = HermesParser()
    a = p.parse(
        '<think>hmm</think>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', TOOLS
    )
    assert (
        a.kind is ActionKind.TOOL_CALLS
        and a.tool_calls[0].arguments == {"a": 1, "b": 2}
        and a.thought == "hmm"
    )
    two = p.parse(
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>',
        TOOLS,
    )
    assert [c.name for c in two.tool_calls] == ["add", "search"] and two.tool_calls[1].arguments == {
        "query": "x"
    }
    ans = p.parse("The answer is 42.", TOOLS)
    assert ans.kind is ActionKind.ANSWER and ans.answer == "The answer is 42."


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "unknown tool 'nope'"),
        ('<tool_call>{"name": "add", "arguments": {"a": "x"}}</tool_call>', "argument 'a'"),
        ('<tool_call>{"name": "add", "arguments": {}}</tool_call>', "missing required argument 'a'"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "c": 2}}</tool_call>', "unexpected argument 'c'"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1}}', "unclosed <tool_call>"),
        ('<tool_call>["add"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'missing "name"'),
        ("oops </tool_call>", "without a matching"),
    ],
)
def test_hermes_malformed_is_invalid_with_reason(text: str, fragment: str) -> None:
    a = HermesParser().parse(text, TOOLS)
    assert a.kind is ActionKind.INVALID and fragment in (a.error or "")


def test_hermes_call_limit() -> None:
    call = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    a = HermesParser(max_calls=1).parse(call * 2, TOOLS)
    assert a.kind is ActionKind.INVALID and "at most 1" in (a.error or "")


def test_xml_tags() -> None:
    p = XMLTagParser()
    a = p.parse("I will compute.\n<run_python>print(1+1)</run_python>", TOOLS)
    assert a.kind is ActionKind.TOOL_CALLS and a.tool_calls[0].arguments == {"code": "print(1+1)"}
    assert p.parse("<answer> 2 </answer>", TOOLS).answer == "2"
    assert "unclosed" in (p.parse("<search>paris", TOOLS).error or "")
    assert "2 actions" in (p.parse("<search>a</search><answer>b</answer>", TOOLS).error or "")
    assert p.parse("no tags at all", TOOLS).kind is ActionKind.INVALID
    assert "</search>" in p.stop_strings(TOOLS) and "</answer>" in p.stop_strings(TOOLS)


def test_env_actions() -> None:
    free = EnvActionParser()
    assert free.parse("search[red shoes]").command == "search[red shoes]"
    assert free.parse("\n go to desk 1 \nextra").command == "go to desk 1"
    assert free.parse("   ").kind is ActionKind.INVALID
    tagged = EnvActionParser(require_tags=True)
    a = tagged.parse("<think>the drawer</think><action>open drawer 1</action>")
    assert a.command == "open drawer 1" and a.thought == "the drawer"
    assert tagged.parse("open drawer 1").kind is ActionKind.INVALID
    assert "several" in (tagged.parse("<action>a</action><action>b</action>").error or "")
    assert "unclosed" in (tagged.parse("<action>a").error or "")


fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<search>",
        "</search>",
        "<action>",
        "</action>",
        "{",
        "}",
        '"name"',
        '"arguments"',
        ":",
        ",",
        "[",
        "]",
        '"add"',
        '"run_python"',
        "null",
        "1",
        '"x"',
        "\n",
    ]
)
fuzz_text = st.lists(st.one_of(fragments, st.text(max_size=8)), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=fuzz_text)
def test_parsers_never_raise(text: str) -> None:
    for parser in (
        HermesParser(),
        HermesParser(max_calls=1),
        XMLTagParser(),
        EnvActionParser(),
        EnvActionParser(require_tags=True),
    ):
        action = parser.parse(text, TOOLS)
        assert action.text == text
        if action.kind is ActionKind.INVALID:
            assert action.error
        if action.kind is ActionKind.TOOL_CALLS:
            assert action.tool_calls and all(c.name in TOOLS for c in action.tool_calls)
            for c in action.tool_calls:
                TOOLS[c.name].validate(c.arguments)  # only valid calls get through


@settings(max_examples=200, deadline=None)
@given(
    args=st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.integers(), st.text(alphabet="xyz", max_size=4), st.none()),
    )
)
def test_hermes_argument_types_checked(args: dict) -> None:
    text = "<tool_call>" + json.dumps({"name": "add", "arguments": args}) + "</tool_call>"
    action = HermesParser().parse(text, TOOLS)
    valid = (
        "a" in args
        and isinstance(args["a"], int)
        and set(args) <= {"a", "b"}
        and isinstance(args.get("b", 0), int)
    )
    assert (action.kind is ActionKind.TOOL_CALLS) == valid
