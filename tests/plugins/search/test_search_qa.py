"""The search-QA task: rewards, the environment, and episodes through the engine."""

from __future__ import annotations

from typing import Any

import pytest

from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.builtin import parsers as builtin
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.parsing.base import XMLTagParser
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ModelPolicy, ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.plugins.search import plugin as search_plugin
from toolgym.plugins.search.index import SearchIndex
from toolgym.plugins.search.qa.env import SearchQAEnv
from toolgym.plugins.search.qa.reward import exact_match, extract_answer, f1, normalize_answer
from toolgym.plugins.search.server import serve_index
from toolgym.testing import MockLLMBackend
from toolgym.trajectories.verify import check_trajectory


def registry() -> Registry:
    return Registry.load(entry_points=False, plugins=[("parsers", builtin), ("search", search_plugin)])


def test_normalisation_and_rewards() -> None:
    assert normalize_answer("  The Salt-Works, of  Oss! ") == "saltworks of oss"
    assert exact_match("the Grey Sea.", ["Grey Sea"]) == 1.0
    assert exact_match("Grey", ["Grey Sea"]) == 0.0
    assert exact_match("1492", ["1491", "1492"]) == 1.0
    assert f1("Grey Sea", ["Grey Sea"]) == 1.0
    assert f1("the grey ocean", ["Grey Sea"]) == pytest.approx(0.5)
    assert f1("", ["Grey Sea"]) == 0.0 and f1("a", ["the"]) == 1.0  # both empty after normalisation
    assert extract_answer("think <answer>x</answer> more <answer> y </answer>") == "y"
    assert extract_answer(" plain ") == "plain"


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="style must be"):
        SearchQAEnv(style="json")
    with pytest.raises(ConfigError, match="reward must be one of em, f1"):
        SearchQAEnv(reward="bleu")
    train, test = SearchQAEnv(split="train"), SearchQAEnv(split="test")
    assert len(train.tasks) + len(test.tasks) == len(SearchQAEnv().tasks)
    assert not {t.id for t in train.tasks} & {t.id for t in test.tasks}
    assert {t.metadata["type"] for t in SearchQAEnv(types="two-hop").tasks} == {"two-hop"}


async def test_xml_steps_by_hand() -> None:
    env = SearchQAEnv(reward="f1")
    env.bind(EpisodeContext())
    messages, _ = await env.reset(seed=0)
    assert messages[-1]["content"].startswith("Question: What is the capital of the island of Sesourn?")
    tools = {t.name: t for t in env.tools}
    parser = XMLTagParser()
    step = await env.step(parser.parse("<search>capital of the island Sesourn</search>", tools))
    assert isinstance(step.observation, str) and step.observation.startswith(
        "\n\n<information>Doc 1(Title: Sesourn)"
    )
    assert step.observation.endswith("</information>\n\n") and step.info["retrieved"][0] == "island-000"
    assert step.valid and step.tool_calls[0].name == "search" and not step.terminated
    bad = await env.step(parser.parse("I will just guess", tools))
    assert not bad.valid and isinstance(bad.observation, str) and "no action found" in bad.observation
    done = await env.step(parser.parse("<answer>the Fouskholt</answer>", tools))
    assert done.terminated and done.reward == 1.0 and done.info["answer"] == "the Fouskholt"


def _check(out: list[Trajectory], n: int) -> None:
    assert len(out) == n
    for t in out:
        assert t.status is Status.OK and t.terminated and t.reward == 1.0, (
            t.status_reason,
            t.steps[-1].observation,
        )
        assert check_trajectory(t) == []
        searches = [s for s in t.steps if s.tool_calls]
        assert searches and all(not s.tool_calls[0].error for s in searches)
        gold = t.steps[-1].info["answer"]
        assert gold in searches[-1].tool_calls[0].output  # the last search really surfaced the answer


@pytest.mark.parametrize("style", ["xml", "hermes"])
async def test_scripted_episodes_through_the_engine(qwen_chat: ChatFormat, style: str) -> None:
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=registry(),
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=6),
        on_trajectory=out.append,
        env_kwargs={"style": style},
    )
    # seeds 0..11 are single-hop; 360.. two-hop (the last questions of the shipped set)
    await engine.run(plan_episodes("search-qa", num_tasks=12, group_size=1))
    await engine.run(plan_episodes("search-qa", num_tasks=6, group_size=1, first_task=360))
    _check(out, 18)
    assert {len(t.steps) for t in out} == {2, 3}
    if style == "xml":
        assert any("<information>" in seg.text for t in out for seg in t.segments)


async def test_episodes_against_a_shared_retrieval_server(
    qwen_chat: ChatFormat, bm25_index: SearchIndex
) -> None:
    with serve_index(bm25_index) as server:
        out: list[Trajectory] = []
        engine = RolloutEngine(
            registry=registry(),
            policy=ScriptedPolicy(qwen_chat),
            config=EngineConfig(max_turns=6, max_live_episodes=8),
            on_trajectory=out.append,
            env_kwargs={"source": server.url},
        )
        await engine.run(plan_episodes("search-qa", num_tasks=16, group_size=2))
    _check(out, 32)


async def test_search_r1_inline_information(qwen_tokenizer: Any) -> None:
    """A model that stops at </search> (no end-of-turn token) gets <information> inside its own turn."""

    def respond(prompt: str, _i: int) -> str:
        if "<information>Doc" not in prompt:
            return "<think>I should look it up.</think>\n<search> capital of the island Sesourn </search>"
        return "<think>Found it.</think>\n<answer> Fouskholt </answer>"

    cfg = EngineConfig(max_turns=4)
    out: list[Trajectory] = []
    policy = ModelPolicy(MockLLMBackend(qwen_tokenizer, respond, add_eos=False), cfg)
    engine = RolloutEngine(registry=registry(), policy=policy, config=cfg, on_trajectory=out.append)
    await engine.run(plan_episodes("search-qa", num_tasks=1, group_size=1))
    t = out[0]
    assert (
        t.status is Status.OK
        and t.reward == 1.0
        and [s.action_kind for s in t.steps] == ["tool_calls", "answer"]
    )
    inline = [seg for seg in t.segments if "<information>" in seg.text]
    assert inline and all(not any(seg.loss_mask) for seg in inline)  # observations are never trained on
    assert check_trajectory(t) == [] and t.token_faithful
