"""The sandboxed SQLite path without a real sandbox (the in-memory test double): what the runner
is given and how each way it can fail reads to the model, database snapshots (WAL included),
and when an episode stays on the host."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.env.spec import parse_flag
from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry
from toolgym.core.sandbox import LazySandboxBackend
from toolgym.core.types import ExecResult
from toolgym.plugins.sql import sandboxed
from toolgym.plugins.sql.backends import QueryTimeout, SQLError, SQLiteBackend
from toolgym.plugins.sql.postgres import PostgresBackend
from toolgym.plugins.sql.sandboxed import (
    RUNNER,
    SandboxSQLiteBackend,
    episode_backend,
    runner_source,
    snapshot,
)
from toolgym.plugins.sql.text2sql.env import Text2SQLEnv
from toolgym.plugins.sql.tools import make_sql_tools
from toolgym.testing import Command, MemoryBackend, MemorySandbox


def real_runner(tmp: Path):  # type: ignore[no-untyped-def]
    """A handler that runs the copied runner on the copied database, as a sandbox would."""

    def handle(cmd: Command) -> ExecResult:
        assert cmd.argv is not None and cmd.argv[:3] == ["python3", "-I", "-S"] and cmd.argv[3] == RUNNER
        request = json.loads(cmd.stdin or b"")
        files = cmd.sandbox.files
        runner, copy = tmp / "runner.py", tmp / "copy.sqlite"
        runner.write_bytes(files[f"{cmd.sandbox.workdir}/{RUNNER}"])
        copy.write_bytes(files[f"{cmd.sandbox.workdir}/{request['db']}"])
        proc = subprocess.run(
            [sys.executable, "-I", "-S", str(runner)],
            input=json.dumps({**request, "db": str(copy)}),
            capture_output=True,
            text=True,
            timeout=cmd.timeout,
        )
        return ExecResult(proc.returncode, proc.stdout, proc.stderr)

    return handle


async def test_runner_gets_the_copy_and_answers(sqlite_db: SQLiteBackend, tmp_path: Path) -> None:
    sb = MemorySandbox("sql", handler=real_runner(tmp_path))
    inside = SandboxSQLiteBackend(sqlite_db, sb)
    query, _ = make_sql_tools(inside)
    host_query, _ = make_sql_tools(sqlite_db, sandbox=False)
    for sql in ("SELECT name, score FROM people ORDER BY id", "DELETE FROM people", "SELECT * FROM nowhere"):
        assert (await query.call({"query": sql})).text == (await host_query.call({"query": sql})).text
    assert sb.files[f"{sb.workdir}/{RUNNER}"] == runner_source()
    assert sb.files[f"{sb.workdir}/{inside.db_path}"] == snapshot(sqlite_db.path)
    assert len(sb.commands) == 3  # copied once, one process per statement


@pytest.mark.parametrize(
    ("result", "error", "message"),
    [
        (ExecResult(124, "", "", timed_out=True), QueryTimeout, "ran past the 5s time limit"),
        (ExecResult(137, "", "", oom_killed=True), SQLError, "ran out of memory in the sandbox"),
        (ExecResult(1, "", "Traceback (most recent call last):\nMemoryError"), SQLError, "ran out of memory"),
        (
            ExecResult(127, "", "sh: python3: not found"),
            SQLError,
            r"exit 127\): sh: python3: not found; the sandbox image needs python3",
        ),
        (
            ExecResult(0, "{not json", ""),
            SQLError,
            r"runner failed in the sql sandbox \(exit 0\): no error output",
        ),
        (ExecResult(0, '{"ok": true', "", truncated=True), SQLError, r"exit 0, output cut"),
        (
            ExecResult(0, '{"ok": false, "kind": "too_large", "message": "the result is 9 bytes"}', ""),
            SQLError,
            "the result is 9 bytes",
        ),
    ],
)
async def test_failures_read_clearly(
    sqlite_db: SQLiteBackend, result: ExecResult, error: type, message: str
) -> None:
    inside = SandboxSQLiteBackend(sqlite_db, MemorySandbox("sql", handler=lambda _cmd: result))
    with pytest.raises(error, match=message):
        await inside.query("SELECT 1")


async def test_snapshot_holds_committed_wal_content(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (x INTEGER)")
    writer.execute("INSERT INTO t VALUES (1), (2), (3)")
    writer.commit()
    assert (tmp_path / "wal.sqlite-wal").stat().st_size > 0  # the rows live in the WAL, not yet in the file
    image = snapshot(path)
    assert image[18:20] == b"\x01\x01"
    copy = tmp_path / "elsewhere" / "copy.sqlite"
    copy.parent.mkdir()
    copy.write_bytes(image)
    copy.chmod(0o444)
    assert (await SQLiteBackend(copy).query("SELECT SUM(x) FROM t")).rows == [(6,)]
    writer.execute("INSERT INTO t VALUES (4)")
    writer.commit()
    assert snapshot(path) != image  # a changed database gives a fresh snapshot, not the cached one
    writer.close()


class _NoSandboxPlugin:
    pass


async def test_episodes_without_a_working_sandbox_stay_on_the_host(
    sqlite_db: SQLiteBackend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandboxed, "_warned", set())  # the warning is once per process
    assert await episode_backend(None, sqlite_db) is sqlite_db
    assert await episode_backend(EpisodeContext(), sqlite_db) is sqlite_db
    memory = EpisodeContext(sandbox_backend=MemoryBackend())
    assert await episode_backend(memory, sqlite_db, enabled=False) is sqlite_db
    postgres = PostgresBackend("postgresql://reader@127.0.0.1:9/none")
    assert await episode_backend(memory, postgres) is postgres  # no network route from a sandbox to a server
    assert isinstance(await episode_backend(memory, sqlite_db), SandboxSQLiteBackend)
    await memory.aclose()
    # 'auto' finds no backend that works here: a warning, then the host for the rest of the episode
    nothing = Registry.load(entry_points=False, plugins=[("none", _NoSandboxPlugin())])
    ctx = EpisodeContext(sandbox_backend=LazySandboxBackend(nothing))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="toolgym.plugins.sql.sandboxed"):
        assert await episode_backend(ctx, sqlite_db) is sqlite_db
        assert await episode_backend(ctx, sqlite_db) is sqlite_db
    assert "SQLite queries run on the host, not in a sandbox: no sandbox backend works" in caplog.text
    env = Text2SQLEnv(databases="shop")
    env.bind(ctx)
    _, info = await env.reset(seed=0)
    assert info["sql_where"] == "host"
    assert (await env.score(env.task, f"```sql\n{env.task.answer}\n```"))[0] == 1.0  # type: ignore[arg-type, union-attr]


def test_flags() -> None:
    assert (
        parse_flag("false", "sql_sandbox") is False
        and parse_flag("ON", "x") is True
        and parse_flag(None, "x") is True
    )
    assert parse_flag(False, "x") is False and parse_flag("", "x", default=False) is False
    with pytest.raises(ConfigError, match="sql_sandbox must be true or false, got 'maybe'"):
        parse_flag("maybe", "sql_sandbox")
    with pytest.raises(ConfigError, match="sql_sandbox must be true or false"):
        Text2SQLEnv(sql_sandbox="maybe")
