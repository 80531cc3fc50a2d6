"""``text2sql``: answer a question about a shipped database by writing the SQL query that answers it.

The model explores with ``sql_schema`` and ``sql_query`` (read-only, capped), then replies without
a tool call, giving its final query in a fenced ```` ```sql ```` block (or ``<answer>…</answer>``).
Reward: 1 when that query's result matches the gold query's under execution match (rows as a
multiset, in order when the gold query orders them; see ``reward.py``), else 0.

Options: ``backend`` ``sqlite`` (default; files built from the shipped scripts) or ``postgres``
(the same databases created on the server of ``dsn`` / ``$TOOLGYM_POSTGRES_DSN`` and read through
a read-only role); ``databases`` (comma-separated names); ``split`` ``train`` / ``test`` (every
fifth question) / ``all``; ``sql_sandbox`` (default true): with SQLite and a sandbox backend,
the episode's database is copied into its ``sql`` sandbox at reset and every statement the
model writes, its final query included, runs there (``false``: from the host). Gold queries
always run from the host. The scripted policy reads the schema, runs the gold query, and answers
with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym import Action, ActionKind, ConfigError, Message, StepResult, Task, ToolTaskEnv, parse_flag

from ..backends import DEFAULT_TIMEOUT_S, SQLBackend, SQLError
from ..databases import DATA_DIR, open_database, shipped_names, shipped_postgres
from ..sandboxed import SandboxSQLiteBackend, episode_backend
from ..tools import make_sql_tools
from .reward import extract_sql, orders_result, results_match

QUESTIONS = DATA_DIR / "questions.jsonl"
SCORED_ROWS = 10_000
"""Rows of a final query compared against the gold result; a longer result scores 0."""

SYSTEM_PROMPT = (
    "You answer questions about a {dialect} database by writing SQL. Use sql_schema to see the tables and "
    "sql_query to try read-only queries. When you are sure, reply without a tool call and give the one final "
    "query in a ```sql code block: its result is your answer."
)


def load_questions(path: str | Path = QUESTIONS) -> list[Task]:
    tasks = []
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                q = json.loads(line)
                if not all(isinstance(q.get(k), str) for k in ("db", "question", "sql")):
                    raise ConfigError(
                        f"{path}:{n}: a question needs string fields 'db', 'question' and 'sql'"
                    )
                tasks.append(
                    Task(
                        id=str(q.get("id", n - 1)),
                        question=q["question"],
                        answer=q["sql"],
                        metadata={"db": q["db"]},
                    )
                )
    return tasks


class Text2SQLEnv(ToolTaskEnv):
    max_turns = 8

    def __init__(
        self,
        backend: str = "sqlite",
        databases: str | None = None,
        split: str = "all",
        dsn: str | None = None,
        max_rows: int | str = 50,
        timeout_s: float | str = DEFAULT_TIMEOUT_S,
        questions: str | None = None,
        sql_sandbox: bool | str = True,
    ) -> None:
        super().__init__()
        if backend not in ("sqlite", "postgres"):
            raise ConfigError(f"backend must be 'sqlite' or 'postgres', got {backend!r}")
        if split not in ("train", "test", "all"):
            raise ConfigError(f"split must be 'train', 'test' or 'all', got {split!r}")
        tasks = load_questions(questions or QUESTIONS)
        if databases:
            wanted = [d.strip() for d in databases.split(",") if d.strip()]
            unknown = sorted(set(wanted) - set(shipped_names()))
            if unknown:
                raise ConfigError(f"unknown databases {unknown}; shipped: {', '.join(shipped_names())}")
            tasks = [t for t in tasks if t.metadata["db"] in wanted]
        if split != "all":
            tasks = [t for i, t in enumerate(tasks) if (i % 5 == 0) == (split == "test")]
        if not tasks:
            raise ConfigError("no questions match the chosen databases and split")
        self.tasks = tasks
        self.backend_kind, self.dsn, self.timeout_s = backend, dsn, float(timeout_s)
        self.sql_sandbox = parse_flag(sql_sandbox, "sql_sandbox")
        self.database: SQLBackend | None = None
        """The episode's database as the model's statements reach it (in the sandbox, or the host's)."""
        self.host_database: SQLBackend | None = None
        """The same database from the host, for the gold queries."""
        self.system_prompt = SYSTEM_PROMPT.format(dialect="SQLite" if backend == "sqlite" else "PostgreSQL")
        self.tools = make_sql_tools(
            self._database, max_rows=int(max_rows), timeout_s=self.timeout_s, sandbox=False
        )
        self._gold: dict[str, Any] = {}
        self._turn = 0

    def _database(self) -> SQLBackend:
        if self.database is None:
            raise ConfigError("the episode has no database yet: reset() first")
        return self.database

    async def _open(self, name: str) -> SQLBackend:
        if self.backend_kind == "sqlite":
            return open_database(f"shipped:{name}")
        return await shipped_postgres(name, self.dsn)

    def user_prompt(self, task: Task) -> str:
        return f"Database: {task.metadata['db']}\nQuestion: {task.question}"

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self._turn = 0
        task = self.load_task(seed)
        self.host_database = await self._open(task.metadata["db"])
        self.database = await episode_backend(
            getattr(self, "ctx", None), self.host_database, enabled=self.sql_sandbox
        )
        if isinstance(self.database, SandboxSQLiteBackend):
            await (
                self.database.prepare()
            )  # copy the database in now: a sandbox that fails, fails the episode here
        messages, info = await super().reset(seed=seed, options=options)
        info["db"] = task.metadata["db"]
        info["sql_where"] = "sandbox" if isinstance(self.database, SandboxSQLiteBackend) else "host"
        return messages, info

    async def score(self, task: Task, answer: str) -> tuple[float, dict[str, Any]]:
        """(reward, info) for a final answer: execution match of its SQL against the gold query."""
        sql = extract_sql(answer)
        if sql is None:
            return 0.0, {"error": "no SQL found in the answer (give it in a ```sql block)"}
        database = self._database()
        try:
            predicted = await database.query(sql, max_rows=SCORED_ROWS, timeout_s=self.timeout_s)
        except SQLError as exc:
            return 0.0, {"sql": sql, "error": str(exc)}
        gold = self._gold.get(task.id)
        if gold is None:
            host = self.host_database or database
            gold = self._gold[task.id] = await host.query(
                task.answer, max_rows=SCORED_ROWS, timeout_s=self.timeout_s * 4
            )
        if predicted.truncated or gold.truncated:
            return 0.0, {"sql": sql, "error": f"result longer than {SCORED_ROWS} rows"}
        match = results_match(predicted.rows, gold.rows, ordered=orders_result(task.answer))
        return float(match), {"sql": sql, "rows": len(predicted.rows), "gold_rows": len(gold.rows)}

    async def step(self, action: Action) -> StepResult:
        assert self.task is not None, "reset() first"
        self._turn += 1
        if action.kind is ActionKind.ANSWER:
            answer = action.answer if action.answer is not None else action.text
            reward, info = await self.score(self.task, answer)
            return StepResult(observation=[], reward=reward, terminated=True, info=info)
        return await super().step(action)

    async def scripted_action(self) -> str | None:
        """Read the schema, run the gold query, then answer with it."""
        assert self.task is not None
        if self._turn == 0:
            call: dict[str, Any] = {"name": "sql_schema", "arguments": {}}
            return f"Let me look at the tables first.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
        if self._turn == 1:
            call = {"name": "sql_query", "arguments": {"query": self.task.answer}}
            return f"This query should answer it.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return f"The query returns the answer.\n```sql\n{self.task.answer}\n```"
