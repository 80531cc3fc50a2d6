"""The text2sql task: scoring, and scripted episodes through the engine on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.builtin import parsers as builtin
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.plugins.sql import plugin as sql_plugin
from toolgym.plugins.sql.databases import open_database, shipped_postgres
from toolgym.plugins.sql.text2sql.env import Text2SQLEnv, load_questions
from toolgym.plugins.sql.text2sql.reward import orders_result, results_match
from toolgym.trajectories.verify import check_trajectory


def registry() -> Registry:
    return Registry.load(entry_points=False, plugins=[("parsers", builtin), ("sql", sql_plugin)])


def test_options() -> None:
    assert len(Text2SQLEnv().tasks) == len(load_questions()) >= 45
    assert {t.metadata["db"] for t in Text2SQLEnv(databases="shop").tasks} == {"shop"}
    with pytest.raises(ConfigError, match=r"unknown databases \['zoo'\]"):
        Text2SQLEnv(databases="zoo")
    with pytest.raises(ConfigError, match="backend must be"):
        Text2SQLEnv(backend="mysql")
    train, test = Text2SQLEnv(split="train").tasks, Text2SQLEnv(split="test").tasks
    assert len(train) + len(test) == len(load_questions()) and not {t.id for t in train} & {
        t.id for t in test
    }


async def test_scoring() -> None:
    env = Text2SQLEnv(databases="library")
    env.bind(EpisodeContext())
    await env.reset(
        seed=7
    )  # "For every author, ... most books first and ties in alphabetical order of name."
    task = env.task
    assert task is not None and orders_result(task.answer)
    right = await env.score(task, f"```sql\n{task.answer}\n```")
    assert right[0] == 1.0
    reordered_columns = "SELECT COUNT(b.id), a.name FROM authors a LEFT JOIN books b ON b.author_id = a.id GROUP BY a.id, a.name ORDER BY COUNT(b.id) DESC, a.name"
    assert (await env.score(task, f"```sql\n{reordered_columns}\n```"))[0] == 1.0
    unordered = "SELECT a.name, COUNT(b.id) FROM authors a LEFT JOIN books b ON b.author_id = a.id GROUP BY a.id, a.name ORDER BY a.name"
    assert (await env.score(task, f"<answer>{unordered}</answer>"))[0] == 0.0  # right rows, wrong order
    broken = await env.score(task, "```sql\nSELECT nope FROM authors\n```")
    assert broken[0] == 0.0 and "no such column" in broken[1]["error"]
    assert (await env.score(task, "```sql\nDELETE FROM loans\n```"))[1]["error"].startswith(
        "the database is read-only"
    )
    assert (await env.score(task, "I think it is Ingrid."))[1]["error"].startswith("no SQL found")


def _check(out: list[Trajectory], n: int) -> None:
    assert len(out) == n
    for t in out:
        assert t.status is Status.OK and t.terminated and t.reward == 1.0, (t.status_reason, t.steps[-1].info)
        assert [s.action_kind for s in t.steps] == ["tool_calls", "tool_calls", "answer"]
        assert all(not c.error for s in t.steps for c in s.tool_calls)
        assert t.steps[0].tool_calls[0].output.split(" database,")[0] in ("sqlite", "postgresql")
        assert check_trajectory(t) == []


async def test_scripted_episodes_on_sqlite(qwen_chat: ChatFormat) -> None:
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=registry(),
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=6),
        on_trajectory=out.append,
    )
    n = len(load_questions())
    await engine.run(plan_episodes("text2sql", num_tasks=n, group_size=1))
    _check(out, n)


async def test_gold_queries_agree_on_sqlite_and_postgres(shipped_on_postgres: str) -> None:
    mismatched = []
    for task in load_questions():
        name = task.metadata["db"]
        lite = await open_database(f"shipped:{name}").query(task.answer, max_rows=1000)
        pg_backend = await shipped_postgres(name, shipped_on_postgres)
        pg = await pg_backend.query(task.answer, max_rows=1000)
        await pg_backend.aclose()
        assert pg.columns and lite.columns
        if not results_match(pg.rows, lite.rows, ordered=orders_result(task.answer)):
            mismatched.append(task.id)
    assert mismatched == []


async def test_scripted_episodes_on_postgres(qwen_chat: ChatFormat, shipped_on_postgres: str) -> None:
    postgres_dsn = shipped_on_postgres
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=registry(),
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=6),
        on_trajectory=out.append,
        env_kwargs={"backend": "postgres", "dsn": postgres_dsn},
    )
    await engine.run(plan_episodes("text2sql", num_tasks=len(load_questions()), group_size=1))
    _check(out, len(load_questions()))
