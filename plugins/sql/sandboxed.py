"""SQLite inside the episode's ``sql`` sandbox, and how an episode picks where its SQL runs.

:class:`SandboxSQLiteBackend` copies a snapshot of a SQLite database into a sandbox once (with
the stdlib script :mod:`.readonly_sqlite`), then runs each statement there as its own
``python3 -I -S`` process reading a JSON request on stdin and writing a JSON answer on stdout.
The statement is refused, timed out and capped exactly as on the host (same code, same SQLite),
and the answer's values travel exactly, so the results, their rendering and the rewards built on
them are the same as the host path's. Two limits stand behind the statement's own: the sandbox
kills the process ``START_MARGIN_S`` after the statement's timeout, and the answer is at most
``max_output_bytes`` (a larger one is an error for the model, never a cut JSON document).

:func:`episode_backend` decides per episode: a SQLite database runs in the sandbox when the
episode has a sandbox backend and the sandboxed mode is on; PostgreSQL always runs from the host
(a sandbox has no network route to a server), and so does everything when no sandbox backend is
configured or none works on this host (a warning says so once).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeAlias

from toolgym import ConfigError, Sandbox, SandboxError, parse_flag

from . import readonly_sqlite
from .backends import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    DISPLAY_RESULT_BYTES,
    EXACT_RESULT_BYTES,
    START_MARGIN_S,
    QueryResult,
    SQLBackend,
    SQLiteBackend,
    Table,
    decode_value,
    runner_answer,
    table_of,
)

log = logging.getLogger(__name__)

SANDBOX_KIND = "sql"
"""The sandbox kind the SQL tools use (image ``toolgym/sandbox-sql``; ``toolgym sandbox build sql``)."""
SANDBOX_DIR = ".toolgym-sql"
"""Where, under the sandbox's work directory, the runner and the database copies go."""
RUNNER = f"{SANDBOX_DIR}/readonly_sqlite.py"
DISPLAY_OUTPUT_BYTES = DISPLAY_RESULT_BYTES
"""Largest answer of a display-only query (cells already shortened to what a model is shown)."""
EXACT_OUTPUT_BYTES = EXACT_RESULT_BYTES
"""Largest answer of a query whose exact values are wanted (scoring), and of the schema."""
COPY_CHUNK_BYTES = 32 * 1024 * 1024
"""Bytes of the database sent per ``write_file`` request (the agent's frames are capped)."""
SANDBOX_ENV = "TOOLGYM_SQL_SANDBOX"
"""``0`` / ``false`` / ``no`` / ``off`` keeps the registered tools on the host path."""

SandboxSource: TypeAlias = Sandbox | Callable[[], Awaitable[Sandbox]]


def sandbox_enabled_by_env() -> bool:
    """Whether ``$TOOLGYM_SQL_SANDBOX`` leaves the sandboxed mode on (it is on when unset)."""
    return parse_flag(os.environ.get(SANDBOX_ENV), SANDBOX_ENV)


# -- the database copy -----------------------------------------------------------------------------

_snapshots: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
_snapshots_lock = threading.Lock()
_SNAPSHOT_CACHE_BYTES = 64 * 1024 * 1024
"""Snapshots kept in memory (least recently used first out); a larger database is read each time."""


def _file_state(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, -1)
    return (st.st_mtime_ns, st.st_size)


def snapshot(path: Path) -> bytes:
    """A consistent image of the database at ``path`` (committed WAL content included), in
    rollback-journal format so that a read-only open needs no ``-wal`` / ``-shm`` files."""
    key = (str(path), _file_state(path), _file_state(path.with_name(path.name + "-wal")))
    with _snapshots_lock:
        if key in _snapshots:
            _snapshots.move_to_end(key)
            return _snapshots[key]
    conn = readonly_sqlite.connect(path)
    try:
        data = bytearray(conn.serialize())
    finally:
        conn.close()
    if len(data) >= 20 and data[18] == 2:  # file format 2 means WAL; 1 is the rollback journal
        data[18] = data[19] = 1
    image = bytes(data)
    if len(image) <= _SNAPSHOT_CACHE_BYTES:
        with _snapshots_lock:
            _snapshots[key] = image
            while sum(map(len, _snapshots.values())) > _SNAPSHOT_CACHE_BYTES:
                _snapshots.popitem(last=False)
    return image


@functools.cache
def runner_source() -> bytes:
    return Path(readonly_sqlite.__file__).read_bytes()


class SandboxSQLiteBackend(SQLBackend):
    """``source``'s database run inside a sandbox: one given (held by the caller for as long as
    this backend is used), or a function that gives the current one (an episode's sandbox is
    replaced when it breaks, and the copy follows it)."""

    dialect = "sqlite"

    def __init__(
        self,
        source: SQLiteBackend,
        sandbox: SandboxSource,
        *,
        python: str = "python3",
        max_output_bytes: int = EXACT_OUTPUT_BYTES,
    ) -> None:
        self.source = source
        self.name = source.name
        self.python = python
        self.max_output_bytes = max_output_bytes
        self._sandbox = sandbox
        self._ready: Sandbox | None = None
        self._lock = asyncio.Lock()
        digest = hashlib.sha256(str(source.path).encode()).hexdigest()[:12]
        self.db_path = f"{SANDBOX_DIR}/{digest}.sqlite"
        """The copy's path inside the sandbox, relative to its work directory."""

    async def _current(self) -> Sandbox:
        if callable(self._sandbox) and not hasattr(self._sandbox, "run"):
            return await self._sandbox()
        return self._sandbox  # type: ignore[return-value]

    async def prepare(self) -> Sandbox:
        """The sandbox, with the runner and a snapshot of the database copied in (once per sandbox)."""
        sb = await self._current()
        async with self._lock:
            if self._ready is not sb:
                data = await asyncio.to_thread(snapshot, self.source.path)
                try:
                    await sb.write_file(RUNNER, runner_source())
                    for offset in range(0, max(len(data), 1), COPY_CHUNK_BYTES):
                        chunk = data[offset : offset + COPY_CHUNK_BYTES]
                        if offset:
                            await sb.write_file(self.db_path, chunk, append=True)
                        else:
                            await sb.write_file(self.db_path, chunk)
                except SandboxError as exc:
                    raise SandboxError(
                        f"could not copy the {len(data)}-byte database {self.name!r} into the "
                        f"{SANDBOX_KIND} sandbox ({exc}); give the sandbox a larger work directory "
                        "(profile workdir_bytes) or run the SQL tools on the host (sql_sandbox=false)"
                    ) from exc
                self._ready = sb
        return sb

    async def _call(
        self, request: dict[str, Any], *, call_timeout_s: float, max_bytes: int
    ) -> dict[str, Any]:
        sb = await self.prepare()
        request = {**request, "db": self.db_path, "max_bytes": max_bytes}
        result = await sb.run(
            [self.python, "-I", "-S", RUNNER],
            stdin=json.dumps(request),
            timeout=call_timeout_s,
            max_output=max_bytes + 4096,
        )
        hint = (
            "the sandbox image needs python3 (toolgym sandbox build sql)"
            if result.exit_code == 127
            else "run the SQL tools on the host (sql_sandbox=false) if this persists"
        )
        return runner_answer(
            result,
            float(request["timeout_s"]),
            where=f"in the {SANDBOX_KIND} sandbox",
            hint=hint,
            memory_where="in the sandbox",
        )

    async def query(
        self,
        sql: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cell_chars: int | None = None,
    ) -> QueryResult:
        start = time.perf_counter()
        answer = await self._call(
            {
                "op": "query",
                "sql": sql,
                "max_rows": max_rows,
                "timeout_s": timeout_s,
                "cell_chars": cell_chars,
            },
            call_timeout_s=timeout_s + START_MARGIN_S,
            max_bytes=self.max_output_bytes
            if cell_chars is None
            else min(self.max_output_bytes, DISPLAY_OUTPUT_BYTES),
        )
        rows = [tuple(decode_value(v) for v in row) for row in answer["rows"]]
        return QueryResult(
            list(answer["columns"]), rows, bool(answer["truncated"]), time.perf_counter() - start
        )

    async def tables(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Table]:
        answer = await self._call(
            {"op": "tables", "timeout_s": timeout_s},
            call_timeout_s=3 * timeout_s + START_MARGIN_S,
            max_bytes=self.max_output_bytes,
        )
        return [table_of(name, kind, info, fks) for name, kind, info, fks in answer["tables"]]


# -- per episode -----------------------------------------------------------------------------------

_warned: set[str] = set()


async def episode_backend(ctx: Any, database: SQLBackend, *, enabled: bool = True) -> SQLBackend:
    """The backend an episode's SQL runs on: ``database`` copied into the episode's ``sql``
    sandbox when ``enabled``, ``database`` is a SQLite file and the episode context ``ctx`` has a
    sandbox backend that works; otherwise ``database`` itself, from the host. One sandboxed
    backend per database and episode (a ``ctx`` resource)."""
    if (
        not enabled
        or not isinstance(database, SQLiteBackend)
        or ctx is None
        or not getattr(ctx, "has_sandboxes", False)
    ):
        return database
    state: dict[str, str] = await ctx.resource("toolgym.sql.sandbox-state", lambda _ctx: {})
    if "host" in state:
        return database
    try:
        await ctx.sandbox(SANDBOX_KIND)
    except ConfigError as exc:  # a lazily opened backend ('auto') found none that works, or was misconfigured
        state["host"] = str(exc)
        if str(exc) not in _warned:
            _warned.add(str(exc))
            log.warning("SQLite queries run on the host, not in a sandbox: %s", exc)
        return database
    return await ctx.resource(  # type: ignore[no-any-return]
        f"toolgym.sql.sandboxed:{database.path}",
        lambda c: SandboxSQLiteBackend(database, lambda: c.sandbox(SANDBOX_KIND)),
    )
