"""Our template renderer gives exactly what transformers' apply_chat_template gives, on every
bundled template, for conversations with tools, tool calls, tool results and missing fields."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest

from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.tokens.chat import ChatFormat

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
    }
]
CONVERSATIONS = [
    [{"role": "user", "content": "q"}],
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
    ],
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "let me",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
        {"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>"},
        {"role": "tool", "content": "r3"},
    ],
]


def _templates() -> list[tuple[str, str | None]]:
    demo = resources.files("toolgym.training.local").joinpath("templates", "compact_qwen.jinja").read_text()
    return [("qwen", None), ("llama", None), ("qwen", demo)]


@pytest.mark.parametrize(("family", "template"), _templates(), ids=["qwen", "llama", "demo-compact"])
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("with_tools", [False, True])
@pytest.mark.parametrize("generation_prompt", [False, True])
def test_render_equals_transformers(
    family: str, template: str | None, conversation: int, with_tools: bool, generation_prompt: bool
) -> None:
    from transformers import AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(str(ensure_tiny_model(family, with_weights=False)))
    if template is not None:
        tok.chat_template = template
    tools = TOOLS if with_tools else None
    ours = ChatFormat(tok).render(
        CONVERSATIONS[conversation], tools=tools, add_generation_prompt=generation_prompt
    )
    theirs = tok.apply_chat_template(
        CONVERSATIONS[conversation], tools=tools, add_generation_prompt=generation_prompt, tokenize=False
    )
    assert ours == theirs
