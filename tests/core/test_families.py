"""The model families' tool-call formats: template ↔ parser round trips, token faithfulness of the
assembler under each family's template, ``--parser auto`` detection, and a mock model of each
family calling a tool through the engine.

Property tests (hypothesis): random calls rendered by the family's template parse back to the
same calls; random multi-turn episodes (random ids, text, rendered calls; tool or user replies)
keep every call's prompt a prefix of its sequence and its sampled ids verbatim after it.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgym.core.builtin.parsers import builtin_parsers
from toolgym.core.llm.local.tiny import load_tiny_tokenizer, template_source
from toolgym.core.parsing.auto import choose_parser, detect_parser, with_parser
from toolgym.core.registry import Registry
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat, with_tool_call_ids
from toolgym.core.trajectory import Status
from toolgym.core.types import ActionKind, GenerationResult, ToolCall
from toolgym.trajectories.verify import check_trajectory

from .family_helpers import (
    FAMILIES,
    FAMILY_PARSER,
    NO_PREAMBLE,
    ONE_CALL_PER_TURN,
    REWRITING,
    STOP_NOT_EOS,
    assistant_text,
    call_id,
    lookup,
    run_family,
)
from .test_assembly import _check_invariants

PARSERS = {p.name: p for p in builtin_parsers()}
TOOLS = {"lookup": lookup}
SCHEMAS = [lookup.schema]


@pytest.fixture(scope="module")
def chats() -> dict[str, ChatFormat]:
    return {family: ChatFormat(load_tiny_tokenizer(family)) for family in FAMILIES}  # type: ignore[arg-type]


# -- strategies ------------------------------------------------------------------------------------

_SPECIALS = (
    "<|",
    "|>",
    "<｜",
    "｜>",
    "[INST]",
    "[/INST]",
    "[TOOL",
    "[/TOOL",
    "[ARGS]",
    "[SYSTEM",
    "[AVAILABLE",
    "</s>",
    "<s>",
    "<unk>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "</parameter>",
    "</function>",
    "<function=",
    "<parameter=",
)
# NFC-stable: the Qwen tokenizers normalize to NFC (as the published ones do), so text that NFC
# changes cannot come back from token ids unchanged, whatever the format
safe_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24).filter(
    lambda s: not any(t in s for t in _SPECIALS) and unicodedata.normalize("NFC", s) == s
)
json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    safe_text,
)


@st.composite
def lookup_args(draw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"key": draw(safe_text)}
    if draw(st.booleans()):
        args["count"] = draw(st.integers(-1000, 10**9))
    if draw(st.booleans()):
        args["scale"] = draw(st.floats(allow_nan=False, allow_infinity=False, width=32))
    if draw(st.booleans()):
        args["exact"] = draw(st.booleans())
    if draw(st.booleans()):
        args["tags"] = draw(st.lists(safe_text, max_size=3))
    if draw(st.booleans()):
        args["extra"] = draw(
            st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6), json_scalar, max_size=3)
        )
    return args


@st.composite
def calls_st(draw: Any, family: str) -> list[ToolCall]:
    n = 1 if family in ONE_CALL_PER_TURN else draw(st.integers(1, 3))
    calls = []
    for i in range(n):
        args = draw(lookup_args())
        calls.append(
            ToolCall(name="lookup", arguments=args, id=call_id(family, "lookup", i, json.dumps(args)))
        )
    return calls


# -- template ↔ parser -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_calls_rendered_by_the_template_parse_back(
    family: str, data: st.DataObject, chats: dict[str, ChatFormat]
) -> None:
    chat = chats[family]
    calls = data.draw(calls_st(family))
    preamble = "" if family in NO_PREAMBLE else data.draw(st.sampled_from(["", "Let me look that up."]))
    text = assistant_text(chat, calls, preamble)
    # what the model samples is token ids: the parser reads their decoded text
    action = PARSERS[FAMILY_PARSER[family]].parse(chat.decode(chat.encode(text)), TOOLS)
    assert action.kind is ActionKind.TOOL_CALLS, (text, action.error)
    assert [(c.name, c.arguments) for c in action.tool_calls] == [(c.name, c.arguments) for c in calls]
    assert len({c.id for c in action.tool_calls}) == len(calls)
    if family in ("mistral", "kimi-k2"):  # the model writes the ids itself in these formats
        assert [c.id for c in action.tool_calls] == [c.id for c in calls]


@pytest.mark.parametrize("family", FAMILIES)
def test_plain_text_is_an_answer_and_broken_calls_are_invalid(
    family: str, chats: dict[str, ChatFormat]
) -> None:
    parser = PARSERS[FAMILY_PARSER[family]]
    answer = parser.parse("The value is red.", TOOLS)
    assert answer.kind is ActionKind.ANSWER and answer.answer == "The value is red."
    good = assistant_text(chats[family], [ToolCall("lookup", {"key": "fox"}, call_id(family, "lookup", 0))])
    assert parser.parse(good, TOOLS).kind is ActionKind.TOOL_CALLS
    unknown = good.replace("lookup", "launch")
    assert "launch" in unknown
    bad = parser.parse(unknown, TOOLS)
    assert bad.kind is ActionKind.INVALID and "unknown tool 'launch'" in (bad.error or "")
    wrong_type = assistant_text(
        chats[family], [ToolCall("lookup", {"key": "fox", "count": "many"}, call_id(family, "lookup", 0))]
    )
    assert parser.parse(wrong_type, TOOLS).kind is ActionKind.INVALID
    # cut the call short (as a length-limited sample is): never a crash, never a call
    truncated = parser.parse(good[: len(good) - 4], TOOLS)
    assert truncated.kind is not ActionKind.TOOL_CALLS


def test_format_specific_cases() -> None:
    llama = PARSERS["llama3_json"]
    two = llama.parse(
        '<|python_tag|>{"name": "lookup", "parameters": {"key": "a"}}; {"name": "lookup", "arguments": {"key": "b"}}',
        TOOLS,
    )
    assert [c.arguments["key"] for c in two.tool_calls] == ["a", "b"]
    assert llama.parse('{"name": "lookup", "parameters": {"key": ', TOOLS).kind is ActionKind.INVALID
    mistral = PARSERS["mistral"]
    v11 = mistral.parse(
        '[TOOL_CALLS]lookup[ARGS]{"key": "a"}[TOOL_CALLS]lookup[ARGS]{"key": "b", "count": 2}', TOOLS
    )
    assert [(c.name, c.arguments) for c in v11.tool_calls] == [
        ("lookup", {"key": "a"}),
        ("lookup", {"key": "b", "count": 2}),
    ]
    assert mistral.parse("[TOOL_CALLS]not a list", TOOLS).kind is ActionKind.INVALID
    assert mistral.parse("[TOOL_CALLS][]", TOOLS).kind is ActionKind.INVALID
    pythonic = PARSERS["pythonic"]
    ok = pythonic.parse(
        '<|python_start|>[lookup(key="a", exact=true, extra={"n": -3, "x": null})]<|python_end|>', TOOLS
    )
    assert ok.tool_calls[0].arguments == {"key": "a", "exact": True, "extra": {"n": -3, "x": None}}
    for attack in (
        '[lookup(key=__import__("os").system("x"))]',
        '[lookup(key="a" + "b")]',
        '[lookup("positional")]',
        '[lookup(**{"key": "a"})]',
        "[lookup(key=open)]",
    ):
        assert pythonic.parse(attack, TOOLS).kind is ActionKind.INVALID, attack
    assert (
        pythonic.parse("[1, 2, 3]", TOOLS).kind is ActionKind.ANSWER
    )  # a list that is not calls is an answer
    coder = PARSERS["qwen3_coder"]
    typed = coder.parse(
        "<tool_call>\n<function=lookup>\n<parameter=key>\n 7 \n</parameter>\n<parameter=count>\n7\n</parameter>\n</function>\n</tool_call>",
        TOOLS,
    )
    assert typed.tool_calls[0].arguments == {
        "key": " 7 ",
        "count": 7,
    }  # the schema decides: string kept, integer read
    assert (
        coder.parse(
            "<tool_call>\n<function=lookup>\n<parameter=key>\nx\n</function>\n</tool_call>", TOOLS
        ).kind
        is ActionKind.INVALID
    )


# -- --parser auto ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", [*FAMILIES, "qwen"])
def test_auto_picks_the_parser_from_the_template(family: str) -> None:
    want = FAMILY_PARSER.get(family, "hermes")
    assert detect_parser(template_source(family), builtin_parsers()).name == want  # type: ignore[union-attr]


def test_auto_keeps_environment_formats_and_unknown_templates() -> None:
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin)])
    mistral = template_source("mistral")
    assert choose_parser("auto", "hermes", mistral, registry).name == "mistral"  # type: ignore[union-attr]
    assert choose_parser("auto", "xml", mistral, registry) is None  # tags the environment's prompt defines
    assert choose_parser("auto", "hermes", "{{ messages }}", registry) is None
    assert choose_parser("auto", "hermes", template_source("qwen"), registry) is None
    assert choose_parser("pythonic", "xml", None, registry).name == "pythonic"  # type: ignore[union-attr]
    view = with_parser(registry, "hermes", registry.parser("mistral"))
    assert view.parser("hermes").name == "mistral" and registry.parser("hermes").name == "hermes"


# -- token faithfulness under each template ----------------------------------------------------------


@st.composite
def episode_st(draw: Any, family: str, vocab: int) -> list[dict[str, Any]]:
    turns = []
    for _ in range(draw(st.integers(1, 4))):
        mode = draw(st.sampled_from(["ids", "text", "calls"]))
        payload: Any
        if mode == "ids":
            payload = draw(st.lists(st.integers(0, vocab - 1), max_size=12))
        elif mode == "text":
            payload = draw(safe_text)
        else:
            payload = draw(calls_st(family))
        user_reply = family != "mistral" or mode != "calls"  # Mistral answers a call with its results
        reply = draw(st.sampled_from(["tool", "user"])) if user_reply else "tool"
        turns.append({"mode": mode, "payload": payload, "reply": reply, "content": draw(safe_text)})
    return turns


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_assembled_ids_are_what_the_model_sampled(
    family: str, data: st.DataObject, chats: dict[str, ChatFormat]
) -> None:
    chat = chats[family]
    turns = data.draw(episode_st(family, len(chat.tokenizer)))
    asm = TokenAssembler(chat, SCHEMAS)
    asm.start([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "start:fox"}])
    eos = sorted(chat.eos_token_ids)[0]
    calls = []
    for turn in turns:
        prompt = list(asm.prompt_ids)
        if turn["mode"] == "ids":
            ids = [i for i in turn["payload"] if i not in chat.eos_token_ids]
        elif turn["mode"] == "text":
            ids = chat.encode(turn["payload"])
        else:
            ids = chat.encode(assistant_text(chat, turn["payload"]))
        if not (
            turn["mode"] == "calls" and family in STOP_NOT_EOS
        ):  # there sampling stops at the call's own end token
            ids.append(eos)
        completion = asm.add_completion(
            GenerationResult(output_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop")
        )
        calls.append((prompt, ids, completion.sequence))
        tool_calls = turn["payload"] if turn["mode"] == "calls" else []
        if turn["reply"] == "tool":
            replies = [{"role": "tool", "content": turn["content"]} for _ in (tool_calls or [None])]
            asm.add_messages(with_tool_call_ids(replies, tool_calls))
        else:
            asm.add_messages([{"role": "user", "content": turn["content"]}])
    _check_invariants(asm, calls)
    if family not in REWRITING:
        assert asm.rewrites == [], asm.rewrites


# -- a mock model of each family through the engine -------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_a_model_of_each_family_calls_the_tool_through_the_engine(
    family: str, chats: dict[str, ChatFormat]
) -> None:
    chat = chats[family]
    # Qwen3 thinks first; an empty think block would be dropped from history (see test_reasoning_drop)
    reasoning = "<think>\nI will look it up.\n</think>\n\n" if family == "qwen3" else ""
    call_text = assistant_text(
        chat, [ToolCall("lookup", {"key": "fox", "count": 2}, call_id(family, "lookup", 0))], reasoning
    )
    assert not reasoning or call_text.startswith(reasoning)

    final = "<|channel|>final<|message|>done" if family == "gpt-oss" else "done"

    def responder(prompt: str, _i: int) -> str:
        return call_text if "RESULT fox x2" not in prompt else final

    out = run_family(
        chat.tokenizer,
        "family-lookup",
        responder,
        parser=FAMILY_PARSER[family],
        add_eos=family not in STOP_NOT_EOS,
    )
    assert len(out) == 2
    for t in out:
        assert t.status is Status.OK, t.status_reason
        assert check_trajectory(t, chat=chat) == []
        assert [s.action_kind for s in t.steps] == ["tool_calls", "answer"], [s.error for s in t.steps]
        assert t.steps[0].tool_calls[0].arguments == {"key": "fox", "count": 2}
        assert t.reward == 1.0 and t.num_sequences == 1
