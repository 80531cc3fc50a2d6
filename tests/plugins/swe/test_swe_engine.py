"""End to end through the rollout engine and ``toolgym collect``: the scripted oracle solves every
shipped task (local and Docker sandboxes), a mock model's garbage is handled as invalid steps, and
the tiny model runs whole episodes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.sandboxes.helpers import make_backend, require
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ModelPolicy, ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.plugins.swe.datasets import shipped_tasks
from toolgym.trajectories.verify import check_trajectory


async def run(
    backend_name: str,
    policy: Any,
    num_tasks: int,
    *,
    group_size: int = 1,
    first_task: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    **config: Any,
) -> list[Trajectory]:
    sandboxes = make_backend(backend_name, images=("shell",))
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=Registry.load(),
        policy=policy,
        config=EngineConfig(max_live_episodes=4, **config),
        sandbox_backend=sandboxes,
        on_trajectory=out.append,
        env_kwargs=env_kwargs or {},
    )
    try:
        await engine.run(
            plan_episodes("swe", num_tasks=num_tasks, group_size=group_size, first_task=first_task)
        )
    finally:
        await sandboxes.aclose()
    return sorted(out, key=lambda t: (t.task_index, t.sample_index))


def test_scripted_policy_solves_every_shipped_task(qwen_chat: ChatFormat) -> None:
    n = len(shipped_tasks())
    trajectories = asyncio.run(run("local", ScriptedPolicy(qwen_chat), n, max_turns=30))
    assert len(trajectories) == n
    for t in trajectories:
        assert t.status is Status.OK and t.terminated and not t.truncated, (t.task_index, t.status_reason)
        assert t.reward == 1.0, (t.metadata["env_info"]["task_id"], [s.observation[:300] for s in t.steps])
        assert all(s.valid for s in t.steps) and t.steps[-1].info["resolved"] is True
        assert [c.name for c in t.steps[-1].tool_calls] == ["submit"]
        assert check_trajectory(t) == []
    assert {t.metadata["env_info"]["task_id"] for t in trajectories} == {
        t.instance_id for t in shipped_tasks()
    }


@pytest.mark.docker
def test_scripted_policy_on_docker_with_groups(qwen_chat: ChatFormat) -> None:
    trajectories = asyncio.run(
        run("docker", ScriptedPolicy(qwen_chat), 3, group_size=2, first_task=5, max_turns=30)
    )
    assert len(trajectories) == 6 and all(t.reward == 1.0 and t.terminated for t in trajectories)
    for a, b in zip(trajectories[::2], trajectories[1::2], strict=True):
        assert a.group_id == b.group_id and [s.anchor for s in a.steps] == [s.anchor for s in b.steps]
    assert len({t.steps[0].anchor for t in trajectories}) == 3  # tasks differ from the first step


GARBAGE = [
    "I am not sure what to do here.",
    '<tool_call>{"name": "bash", "arguments": {"command": </tool_call>',
    '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "str_replace_editor", "arguments": {"command": "fly", "path": "/"}}\n</tool_call>',
    '<tool_call>\n{"name": "bash"',
]


def test_mock_model_garbage_is_handled(qwen_tokenizer: Any) -> None:
    backend = MockLLMBackend(qwen_tokenizer, GARBAGE)
    config = EngineConfig(max_turns=6)
    trajectories = asyncio.run(
        run("local", ModelPolicy(backend, config), 2, max_turns=6, env_kwargs={"max_turns": 6})
    )
    for t in trajectories:
        assert t.status is Status.OK and t.truncated and not t.terminated and t.reward == 0.0
        assert [s.valid for s in t.steps] == [False] * 6  # the last, graded on the turn limit, too
        assert t.steps[-1].info["status"] == "empty_patch" and t.steps[-1].info["submitted"] is False
        assert all(s.observation for s in t.steps) and check_trajectory(t) == []
    assert len(backend.requests) == 12


async def test_collect_scripted_and_tiny_model(tmp_path: Path) -> None:
    require("local")  # skips here (fails in CI) without bubblewrap
    scripted = await collect(
        CollectOptions(
            env="swe",
            out=tmp_path / "scripted",
            model="scripted",
            episodes=3,
            sandbox_backend="local",
            engine=EngineConfig(max_turns=30),
        )
    )
    assert (scripted.written, scripted.failed) == (3, 0)
    rows = [
        json.loads(line) for line in (tmp_path / "scripted" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0]
    tiny = await collect(
        CollectOptions(
            env="swe",
            out=tmp_path / "tiny",
            model="tiny",
            episodes=1,
            sandbox_backend="local",
            env_kwargs={"max_turns": "2"},
            group_size=2,
            engine=EngineConfig(max_turns=2, max_tokens_per_turn=24),
        )
    )
    assert (tiny.written, tiny.failed) == (2, 0)
    for line in (tmp_path / "tiny" / "trajectories.jsonl").read_text().splitlines():
        traj = json.loads(line)
        assert traj["status"] == "ok" and traj["reward"] == 0.0 and 1 <= len(traj["steps"]) <= 2
        assert traj["truncated"] or traj["terminated"]
