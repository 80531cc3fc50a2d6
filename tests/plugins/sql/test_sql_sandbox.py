"""The SQL tools inside real ``sql`` sandboxes (Docker with the ``sql`` image, and local bubblewrap):
the same results, text and rewards as the host path on every shipped question, writes refused,
timeouts (the statement's own and the sandbox's), output caps, a broken sandbox replaced, and
the text2sql task end to end through the engine in sandboxed mode.

A backend this host lacks is skipped here and fails under ``CI`` (``tests/sandboxes/helpers.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.builtin import parsers as builtin
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.plugins.sql import plugin as sql_plugin
from toolgym.plugins.sql import sandboxed
from toolgym.plugins.sql.backends import QueryTimeout, ReadOnlyViolation, SQLError, SQLiteBackend
from toolgym.plugins.sql.databases import open_database, shipped_names
from toolgym.plugins.sql.sandboxed import SandboxSQLiteBackend, episode_backend, snapshot
from toolgym.plugins.sql.text2sql.env import Text2SQLEnv
from toolgym.plugins.sql.tools import make_sql_tools, sql_query
from toolgym.sandboxes.pool import PooledBackend

pytestmark = pytest.mark.asyncio(loop_scope="module")

FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def sandboxes(request: pytest.FixtureRequest) -> AsyncIterator[PooledBackend]:
    backend = make_backend(request.param, images=("sql",), profiles={"sql": TEST_PROFILE})
    yield backend
    await backend.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox(sandboxes: PooledBackend) -> AsyncIterator[Any]:
    sb = await sandboxes.acquire("sql", episode_id="sql-tests")
    yield sb
    await sandboxes.release(sb)


async def test_shipped_questions_same_in_the_sandbox_as_on_the_host(sandboxes: PooledBackend) -> None:
    ctx = EpisodeContext(episode_id="sql-same", sandbox_backend=sandboxes)
    boxed, host = Text2SQLEnv(), Text2SQLEnv(sql_sandbox="false")
    boxed.bind(ctx)
    host.bind(ctx)
    tasks = boxed.tasks
    try:
        for seed, task in enumerate(tasks):
            (_, info_b), (_, info_h) = await boxed.reset(seed=seed), await host.reset(seed=seed)
            assert (info_b["sql_where"], info_h["sql_where"]) == ("sandbox", "host")
            other = next(
                t for t in tasks[seed + 1 :] + tasks[:seed] if t.metadata["db"] == task.metadata["db"]
            )
            answers = [
                f"```sql\n{task.answer}\n```",
                f"```sql\n{other.answer}\n```",
                "```sql\nDELETE FROM x\n```",
            ]
            rewards_b = [(await boxed.score(task, a))[0] for a in answers]
            rewards_h = [(await host.score(task, a))[0] for a in answers]
            assert rewards_b == rewards_h and rewards_b[0] == 1.0 and rewards_b[2] == 0.0, (
                task.id,
                rewards_b,
                rewards_h,
            )
            by_b, by_h = {t.name: t for t in boxed.tools}, {t.name: t for t in host.tools}
            out_b = await boxed.call_tool(by_b["sql_query"], {"query": task.answer})
            out_h = await host.call_tool(by_h["sql_query"], {"query": task.answer})
            assert (out_b.text, out_b.error) == (out_h.text, out_h.error), task.id
            assert {k: out_b.metadata[k] for k in ("rows", "truncated")} == {
                k: out_h.metadata[k] for k in ("rows", "truncated")
            }
        for name in shipped_names():
            lite = open_database(f"shipped:{name}")
            inside = await episode_backend(ctx, lite)
            assert isinstance(inside, SandboxSQLiteBackend)
            (_, s_b), (_, s_h) = make_sql_tools(inside), make_sql_tools(lite, sandbox=False)
            assert (await s_b.call({})).text == (await s_h.call({})).text
            for table in await lite.tables():
                args = {"table": table.name, "sample_rows": 3}
                assert (await s_b.call(args)).text == (await s_h.call(args)).text
    finally:
        await ctx.aclose()


VALUE_QUERIES = [
    "SELECT id, name, score, note FROM people ORDER BY id",
    "SELECT 0.1 + 0.2, 1e999, -1e999, -0.0, 9223372036854775807, -9223372036854775808, 1.0 / 3",
    "SELECT x'00ff10', zeroblob(5000), NULL, '', 'ünïcødé ✓ \u2028', char(0) || 'after-nul'",
    "SELECT printf('%.*c', 100000, 'x') AS long_text, replace(printf('%.*c', 3000, 'y'), 'y', 'y' || char(10) || '  ') AS spaced",
    "SELECT 'a' || char(9) || 'b' || char(10) || 'c', 'tab' || char(9) || printf('%.*c', 300, ' ') || 'z'",
    "SELECT n, n * 2 AS twice FROM numbers",
    "SELECT name FROM team_sizes WHERE size > 10",
    "PRAGMA table_info(people)",
    "EXPLAIN QUERY PLAN SELECT * FROM people WHERE id = 1",
    "INSERT INTO teams (id, name) VALUES (9, 'gold')",
    "CREATE TEMP TABLE scratch (a INTEGER)",
    "ATTACH DATABASE 'other.sqlite' AS other",
    "PRAGMA journal_mode = DELETE",
    "COMMIT",
    "SELECT 1; DELETE FROM numbers",
    "SELEC name FROM people",
    "SELECT * FROM ghosts",
    "SELECT CAST(x'ff' AS TEXT)",
    "VACUUM",
]


async def test_values_errors_and_caps_read_the_same(sandbox: Any, sqlite_db: SQLiteBackend) -> None:
    inside = SandboxSQLiteBackend(sqlite_db, sandbox)
    for kwargs in ({}, {"max_rows": 20, "max_chars": 10_000}, {"max_rows": 1000, "max_chars": 300}):
        (q_b, _), (q_h, _) = (
            make_sql_tools(inside, **kwargs),
            make_sql_tools(sqlite_db, sandbox=False, **kwargs),
        )
        for query in VALUE_QUERIES:
            out_b, out_h = await q_b.call({"query": query}), await q_h.call({"query": query})
            assert (out_b.text, out_b.error) == (out_h.text, out_h.error), (kwargs, query)
            assert out_h.metadata.get("where", "host") == "host"
    for query in VALUE_QUERIES[:9]:  # exact values (what scoring reads), not only their rendering
        b, h = await inside.query(query, max_rows=10_000), await sqlite_db.query(query, max_rows=10_000)
        assert (b.columns, b.rows, b.truncated) == (h.columns, h.rows, h.truncated), query
    shown = await inside.query(VALUE_QUERIES[3], cell_chars=200)  # display-only: long text comes back short
    assert len(shown.rows[0][0]) == 201 and "\n" not in shown.rows[0][1] and len(shown.rows[0][1]) == 201


async def test_writes_are_refused_and_nothing_changes(sandbox: Any, sqlite_db: SQLiteBackend) -> None:
    inside = SandboxSQLiteBackend(sqlite_db, sandbox)
    before = snapshot(sqlite_db.path)
    for statement in (
        "DELETE FROM numbers",
        "UPDATE people SET name = 'x'",
        "DROP TABLE people",
        "CREATE TABLE extra (a INTEGER)",
        "ALTER TABLE people ADD COLUMN age INTEGER",
        "PRAGMA writable_schema = ON",
        "BEGIN",
    ):
        with pytest.raises(ReadOnlyViolation, match="the database is read-only"):
            await inside.query(statement)
    assert (await inside.query("SELECT COUNT(*) FROM numbers")).rows == [(5000,)]
    assert await sandbox.read_file(inside.db_path) == before == snapshot(sqlite_db.path)


async def test_fts3_tokenizer_leaks_no_pointer_in_the_sandbox(sandbox: Any, sqlite_db: SQLiteBackend) -> None:
    inside = SandboxSQLiteBackend(sqlite_db, sandbox)
    with pytest.raises(ReadOnlyViolation, match="fts3_tokenizer is not allowed"):
        await inside.query("SELECT fts3_tokenizer('simple')")
    assert (await inside.query("SELECT COUNT(*) FROM teams")).rows == [(3,)]


async def test_timeouts(sandbox: Any, sqlite_db: SQLiteBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    inside = SandboxSQLiteBackend(sqlite_db, sandbox)
    with pytest.raises(QueryTimeout, match=r"ran past the 0\.3s time limit"):
        await inside.query(FOREVER, timeout_s=0.3)
    query, _ = make_sql_tools(inside, timeout_s=0.3)
    out = await query.call({"query": FOREVER})
    assert (
        out.error
        and out.text
        == "Error: " + "the query ran past the 0.3s time limit and was stopped; simplify it or add a LIMIT"
    )
    # the sandbox's own limit stands behind the statement's: here it strikes first
    monkeypatch.setattr(sandboxed, "START_MARGIN_S", -1.5)
    with pytest.raises(QueryTimeout, match=r"ran past the 2s time limit"):
        await inside.query(FOREVER, timeout_s=2.0)
    monkeypatch.undo()
    assert (await inside.query("SELECT 7")).rows == [(7,)]


async def test_output_caps(sandbox: Any, sqlite_db: SQLiteBackend) -> None:
    inside = SandboxSQLiteBackend(sqlite_db, sandbox, max_output_bytes=2000)
    capped = await inside.query("SELECT n FROM numbers ORDER BY n", max_rows=10)
    assert capped.truncated and [n for (n,) in capped.rows] == list(range(1, 11))
    with pytest.raises(SQLError, match=r"more than the 2000 bytes the sandbox returns; select fewer rows"):
        await inside.query("SELECT n FROM numbers", max_rows=5000)
    query, _ = make_sql_tools(inside)
    out = await query.call({"query": "SELECT printf('%.*c', 1000000, 'x') AS big, zeroblob(1000000) AS blob"})
    assert not out.error and out.text.splitlines()[1] == "x" * 199 + "… | <1000000 bytes>"


async def test_episodes_pick_where_sql_runs(
    sandboxes: PooledBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    lite = open_database("shipped:shop")
    ctx = EpisodeContext(episode_id="sql-where", sandbox_backend=sandboxes)
    try:
        inside = await episode_backend(ctx, lite)
        assert isinstance(inside, SandboxSQLiteBackend) and await episode_backend(ctx, lite) is inside
        assert await episode_backend(ctx, lite, enabled=False) is lite
        first = await ctx.sandbox("sql")
        assert (await inside.query("SELECT COUNT(*) FROM products")).rows[0][0] > 0
        first.mark_broken("broken by the test")  # the episode gets a fresh sandbox, and the copy follows
        assert (await inside.query("SELECT COUNT(*) FROM products")).rows[0][0] > 0
        assert await ctx.sandbox("sql") is not first
        monkeypatch.setenv("TOOLGYM_SQL_DATABASE", "shipped:shop")
        out = await sql_query.call({"query": "SELECT COUNT(*) FROM customers"}, ctx=ctx)
        assert not out.error and out.metadata["where"] == "sandbox"
        monkeypatch.setenv("TOOLGYM_SQL_SANDBOX", "false")
        host = await sql_query.call({"query": "SELECT COUNT(*) FROM customers"}, ctx=ctx)
        assert host.metadata["where"] == "host" and host.text == out.text
    finally:
        await ctx.aclose()


async def test_text2sql_end_to_end_in_the_sandbox(sandboxes: PooledBackend, qwen_chat: ChatFormat) -> None:
    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("sql", sql_plugin)])
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=registry,
        policy=ScriptedPolicy(qwen_chat),
        config=EngineConfig(max_turns=6),
        sandbox_backend=sandboxes,
        on_trajectory=out.append,
    )
    n = 12
    await engine.run(plan_episodes("text2sql", num_tasks=n, group_size=1))
    assert len(out) == n
    for t in out:
        assert t.status is Status.OK and t.reward == 1.0, (t.status_reason, t.steps[-1].info)
        assert t.metadata["env_info"]["sql_where"] == "sandbox"
        assert [s.action_kind for s in t.steps] == ["tool_calls", "tool_calls", "answer"]
        assert all(not c.error for s in t.steps for c in s.tool_calls)
