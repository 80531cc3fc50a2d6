"""Tool calls carry ids and tool messages carry the ``tool_call_id`` of the call they answer,
so templates that require it (Mistral's, OpenAI-format ones) render every turn."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from toolgym import EngineConfig, RolloutEngine, Trajectory, plan_episodes
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.parsing.base import HermesParser, XMLTagParser
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.tokens.chat import ChatFormat, with_tool_call_ids
from toolgym.core.trajectory import Status
from toolgym.core.types import ToolCall
from toolgym.trajectories.verify import check_trajectory

from .test_arpo import Plugin, _responder

QWEN = (
    Path(__file__).resolve().parents[2] / "core" / "llm" / "local" / "templates" / "qwen.jinja"
).read_text()
# The tiny model's Qwen-style template, with Mistral's rule for tool results: a tool message must
# carry a 9-character alphanumeric tool_call_id, and the template renders it.
STRICT = QWEN.replace(
    "<tool_response>\n{{ message.content }}",
    "{%- if message.tool_call_id is not defined or message.tool_call_id | length != 9 -%}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}\n"
    '<tool_response id="{{ message.tool_call_id }}">\n{{ message.content }}',
)
ID = re.compile(r"^[A-Za-z0-9]{9}$")


def test_the_strict_template_really_requires_the_id(qwen_tokenizer: Any) -> None:
    assert STRICT != QWEN
    chat = ChatFormat(qwen_tokenizer, template=STRICT)
    with pytest.raises(Exception, match="length 9"):
        chat.render([{"role": "user", "content": "hi"}, {"role": "tool", "content": "out"}])
    assert 'id="abcdefghi"' in chat.render(
        [{"role": "user", "content": "hi"}, {"role": "tool", "content": "out", "tool_call_id": "abcdefghi"}]
    )


def test_parsers_give_every_call_an_id() -> None:
    two = HermesParser().parse(
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "a", "arguments": {}}</tool_call>'
    )
    ids = [c.id for c in two.tool_calls]
    assert all(ID.match(i) for i in ids) and len(set(ids)) == 2  # same call text, different positions
    again = HermesParser().parse('<tool_call>{"name": "a", "arguments": {}}</tool_call>')
    assert again.tool_calls[0].id == ids[0]  # deterministic: a replayed episode renders the same tokens
    own = HermesParser().parse('<tool_call>{"name": "a", "arguments": {}, "id": "Xy12Zq9Ab"}</tool_call>')
    assert own.tool_calls[0].id == "Xy12Zq9Ab"  # the model's own id (Mistral's format) is kept
    xml = XMLTagParser().parse("<answer>no</answer>")
    assert not xml.tool_calls


def test_tool_messages_get_the_id_of_the_call_they_answer() -> None:
    calls = [ToolCall("a", {}, id="aaaaaaaaa"), ToolCall("b", {}, id="bbbbbbbbb")]
    msgs = [
        {"role": "tool", "content": "1"},
        {"role": "user", "content": "x"},
        {"role": "tool", "content": "2"},
    ]
    out = with_tool_call_ids(msgs, calls)
    assert [m.get("tool_call_id") for m in out] == ["aaaaaaaaa", None, "bbbbbbbbb"]
    assert "tool_call_id" not in msgs[0]  # copies
    kept = with_tool_call_ids([{"role": "tool", "content": "1", "tool_call_id": "given0001"}], calls)
    assert kept[0]["tool_call_id"] == "given0001"
    orphan = with_tool_call_ids([{"role": "tool", "content": "Error: no tool call"}], [])
    assert ID.match(orphan[0]["tool_call_id"])  # an error about an invalid action still renders


def _run(tokenizer: Any, responder: Any) -> list[Trajectory]:
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("ids-test", Plugin())])
    cfg = EngineConfig(max_turns=6)
    backend = MockLLMBackend(tokenizer, responder)
    policy = ModelPolicy(backend, cfg, chat=ChatFormat(tokenizer, template=STRICT))
    out: list[Trajectory] = []
    engine = RolloutEngine(registry=registry, policy=policy, config=cfg, on_trajectory=out.append)
    asyncio.run(engine.run(plan_episodes("two-tools", num_tasks=1, group_size=2)))
    return out


def test_episodes_run_and_stay_token_faithful_under_a_template_that_requires_tool_call_id(
    qwen_tokenizer: Any,
) -> None:
    out = _run(qwen_tokenizer, _responder)
    assert len(out) == 2
    for t in out:
        assert t.status is Status.OK, t.status_reason
        assert t.reward == 1.0 and check_trajectory(t) == []
        assert len(t.segments) and all(s.sequence == 0 for s in t.segments)  # no template rewrite
        tool_msgs = [m for m in t.messages if m.get("role") == "tool"]
        assert len(tool_msgs) == 2
        parsed = [HermesParser().parse(m["content"]) for m in t.messages if m.get("role") == "assistant"][:2]
        assert [m["tool_call_id"] for m in tool_msgs] == [p.tool_calls[0].id for p in parsed]
        text = "".join(s.text for s in t.segments)
        assert all(f'<tool_response id="{m["tool_call_id"]}">' in text for m in tool_msgs)


def test_an_invalid_action_does_not_stop_the_episode_under_that_template(qwen_tokenizer: Any) -> None:
    def responder(prompt: str, i: int) -> str:
        return "<tool_call>not json</tool_call>" if "Error" not in prompt else "done"

    out = _run(qwen_tokenizer, responder)
    assert all(t.status is Status.OK and check_trajectory(t) == [] for t in out), [
        t.status_reason for t in out
    ]
