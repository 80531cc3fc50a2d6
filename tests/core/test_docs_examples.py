"""Every example in docs/writing-a-tool.md runs as written, within its advertised size."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

import pytest

from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.builtin import parsers as builtin
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-tool.md"
LIMITS = {"stateless": 10, "stateful": 30, "env": 40, "tool_task": 30}


def _examples() -> dict[str, str]:
    text = DOC.read_text()
    return dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", text, re.DOTALL))


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(f"doc_example_{name}")
    exec(compile(_examples()[name], f"{DOC}:{name}", "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_example_sizes(name: str) -> None:
    code = [ln for ln in _examples()[name].splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(code) <= LIMITS[name], (
        f"the {name} example has {len(code)} lines of code; the doc promises ≤ {LIMITS[name]}"
    )


async def test_stateless_example() -> None:
    mod = _module("stateless")
    reg = Registry.load(entry_points=False, plugins=[("doc", mod)])
    tool = reg.tool("convert")
    assert (await tool.call({"celsius": 100})).text == "212.0 °F"
    bad = await tool.call({})
    assert bad.error and "missing required argument 'celsius'" in bad.text


async def test_stateful_example_keeps_state_per_episode() -> None:
    mod = _module("stateful")
    reg = Registry.load(entry_points=False, plugins=[("doc", mod)])
    remember, recall = reg.tool("remember"), reg.tool("recall")
    ep1, ep2 = EpisodeContext(episode_id="a"), EpisodeContext(episode_id="b")
    assert (await remember.call({"note": "milk"}, ctx=ep1)).text == "stored (1 notes)"
    assert (await remember.call({"note": "eggs"}, ctx=ep1)).text == "stored (2 notes)"
    assert (await recall.call({}, ctx=ep1)).text == "milk\neggs"
    assert (await recall.call({}, ctx=ep2)).text == "(no notes)"
    db = await ep1.resource("notes", lambda ctx: None)
    await ep1.aclose()
    with pytest.raises(Exception, match="closed"):
        db.execute("select 1")


async def test_env_example_solved_by_its_scripted_policy(qwen_chat: ChatFormat) -> None:
    mod = _module("env")
    reg = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("doc", mod)])
    out: list[Any] = []
    engine = RolloutEngine(
        registry=reg,
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=10),
        on_trajectory=out.append,
    )
    await engine.run(plan_episodes("guess", num_tasks=20, group_size=1))
    assert len(out) == 20 and all(t.reward == 1.0 for t in out)
    assert all(len({s.anchor for s in t.steps}) == len(t.steps) for t in out)


async def test_tool_task_example_collects_with_its_tool(qwen_chat: ChatFormat) -> None:
    mod = _module("tool_task")
    reg = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("doc", mod)])
    out: list[Any] = []
    engine = RolloutEngine(
        registry=reg,
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=4),
        on_trajectory=out.append,
    )
    await engine.run(plan_episodes("letters", num_tasks=4, group_size=1))
    assert len(out) == 4 and all(t.reward == 1.0 and t.terminated for t in out), [
        t.status_reason for t in out
    ]
    for t in out:
        (call,) = t.steps[0].tool_calls
        assert call.name == "count_letters" and call.output == t.steps[-1].info["answer"]
