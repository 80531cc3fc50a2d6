"""Shared by the model-family tests: the families, their parsers, a typed tool, two toy environments
(one answering with tool messages, one with user turns), and the text a family's model writes for
given calls — taken from the family's own chat template, so parser and template are tested together."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym import (
    EngineConfig,
    Env,
    EnvSpec,
    RolloutEngine,
    StepResult,
    Task,
    ToolTaskEnv,
    Trajectory,
    hookimpl,
    plan_episodes,
    tool,
)
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.parsing.auto import with_parser
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import Action, ActionKind, Message, ToolCall, tool_call_id

FAMILY_PARSER = {
    "qwen3": "hermes",
    "qwen3-coder": "qwen3_coder",
    "mistral": "mistral",
    "llama": "llama3_json",
    "llama4": "pythonic",
    "deepseek-v3.1": "deepseek_v31",
    "kimi-k2": "kimi_k2",
    "gpt-oss": "harmony",
    "glm-4.5": "glm45",
}
"""Tiny-model family → the parser ``--parser auto`` must pick from its template."""
FAMILIES = tuple(FAMILY_PARSER)
ONE_CALL_PER_TURN = {"llama", "gpt-oss"}
"""Llama 3.1's format has one call per assistant turn (the template writes each in its own turn);
gpt-oss stops sampling at each call's <|call|>."""
NO_PREAMBLE = {"llama", "llama4", "gpt-oss"}
"""Formats where a call is the whole reply (text before it makes it an answer, or must be a
harmony message of its own)."""
REWRITING = {"qwen3", "gpt-oss", "glm-4.5"}
"""Templates that render history differently from what was sampled (earlier reasoning dropped;
gpt-oss also ends a final answer with <|return|> when sampled and <|end|> in history)."""
STOP_NOT_EOS = {"gpt-oss", "glm-4.5"}
"""Families whose call turn ends with a stop token that is not the end-of-sequence token."""


def call_id(family: str, name: str, index: int, seed: str = "") -> str:
    """The id a call of ``family`` carries: Kimi-K2's model writes ``functions.NAME:INDEX`` itself;
    the others get toolgym's 9-character ids (Mistral's model writes those)."""
    if family == "kimi-k2":
        return f"functions.{name}:{index}"
    return tool_call_id(f"{seed}/{name}", index)


@tool
async def lookup(
    key: str,
    count: int = 1,
    scale: float = 1.0,
    exact: bool = False,
    tags: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """Look a key up.

    Args:
        key: what to look up
        count: how many results
        scale: a weight
        exact: exact match only
        tags: filters
        extra: anything else
    """
    return f"RESULT {key} x{count}"


def assistant_text(chat: ChatFormat, calls: Sequence[ToolCall], content: str = "") -> str:
    """What the family's model writes for ``calls``: the template's render of an assistant message
    carrying them, between the generation prompt and the end-of-turn token."""
    user: list[Message] = [{"role": "user", "content": "go"}]
    prompt = chat.render(user, add_generation_prompt=True)
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
    full = chat.render([*user, message])
    assert full.startswith(prompt), "the template's generation prompt is not a prefix of the assistant turn"
    eos = chat.tokenizer.eos_token
    body = full[len(prompt) :]
    if eos not in body:  # the turn ends with a stop token the model samples (gpt-oss's <|call|>)
        return body
    return body[: body.rindex(eos)]


class LookupEnv(ToolTaskEnv):
    """Call ``lookup`` (any arguments), then answer ``done``: tool results come as tool messages."""

    tools = [lookup]
    tasks = [
        Task("t0", "Look up fox, then answer done.", "done"),
        Task("t1", "Look up cat, then answer done.", "done"),
    ]


class ChatterEnv(Env):
    """Three turns of conversation; each observation is a new user turn (so a template that drops
    earlier reasoning rewrites history every turn). Step reward 1 for an answer containing
    ``yes``; the anchor is the turn number (so GiGPO's step groups are the turns)."""

    parser = "hermes"
    max_turns = 3

    def __init__(self) -> None:
        self.turn = 0

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.turn = 0
        return [
            {"role": "system", "content": "Reply yes or no."},
            {"role": "user", "content": f"Question {seed}: is it day?"},
        ], {}

    async def step(self, action: Action) -> StepResult:
        self.turn += 1
        said = action.answer if action.kind is ActionKind.ANSWER else ""
        reward = 1.0 if said and "yes" in said else 0.0
        return StepResult(
            observation=[{"role": "user", "content": f"Turn {self.turn}: and now?"}],
            reward=reward,
            terminated=self.turn >= 3,
            valid=action.valid,
        )

    def anchor(self) -> str:
        return f"turn-{self.turn}"


class Plugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("family-lookup", LookupEnv), EnvSpec("family-chatter", ChatterEnv)]


def run_family(
    tokenizer: Any,
    env: str,
    responder: Any,
    *,
    parser: str | None = None,
    group_size: int = 2,
    tasks: int = 1,
    max_turns: int = 6,
    add_eos: bool = True,
) -> list[Trajectory]:
    """Run ``env`` with a mock model writing ``responder``'s text, parsing with ``parser`` in place
    of the environment's ``hermes`` (as ``--parser`` does)."""
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("family-test", Plugin())])
    if parser is not None and parser != "hermes":
        registry = with_parser(registry, "hermes", registry.parser(parser))
    cfg = EngineConfig(max_turns=max_turns)
    policy = ModelPolicy(MockLLMBackend(tokenizer, responder, add_eos=add_eos), cfg)
    out: list[Trajectory] = []
    engine = RolloutEngine(registry=registry, policy=policy, config=cfg, on_trajectory=out.append)
    asyncio.run(engine.run(plan_episodes(env, num_tasks=tasks, group_size=group_size)))
    return out
