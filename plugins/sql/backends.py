"""Read-only SQL backends: the interface, the result and schema types, and SQLite on the host.

Every query runs as one statement in a read-only transaction that is always rolled back, under a
statement timeout, with at most ``max_rows + 1`` rows fetched (the extra row only tells that
there were more), and at most ``DISPLAY_RESULT_BYTES`` (rows shown to a model) or
``EXACT_RESULT_BYTES`` (exact values, for scoring) of rows brought to this process.

SQLite is opened with a ``file:…?mode=ro`` URI, ``PRAGMA query_only``, no ATTACH (limit 0) and an
authorizer that lets only reads through (SELECT, WITH, EXPLAIN, read-only PRAGMAs, no
``fts3_tokenizer``), so a write fails with an error naming what was refused. A progress handler
aborts statements past their deadline, so a timed-out query stops using the CPU too. That logic lives in
:mod:`.readonly_sqlite`, which the sandboxed backend (:mod:`.sandboxed`) runs inside the ``sql``
sandbox as well, so that both paths answer alike.

On the host, each query runs that same script as a process of its own (``python -I -S``, JSON in
and out), limited to ``memory_bytes`` of address space, its answer read up to the result's byte
budget. Why a process and not this one: SQLite builds every value of a row before the row is
returned (``randomblob(4e8)``, ``zeroblob`` expanded on fetch, a wide row of large values), and
nothing in the ``sqlite3`` module bounds that (``setlimit(SQLITE_LIMIT_LENGTH)`` caps one value,
not a row of a thousand; a progress handler sees no memory; the heap limit is process-wide and
not exposed). ``SELECT zeroblob(400000000)`` four times grew this process by 1.9 GiB; in a process
of its own it costs this one nothing. The price: starting an interpreter per query (about 30 ms;
``bench/tool_reply_memory.py``). The schema (``tables``) is read in this process: its statements
are toolgym's own and their rows the schema's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import queue
import sqlite3
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from toolgym import ConfigError, ExecResult, ToolExecutionError

from . import readonly_sqlite
from .readonly_sqlite import Refused

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_ROWS = 50
DISPLAY_RESULT_BYTES = 1024 * 1024
"""Most bytes of rows a display-only query (``cell_chars`` given) brings to this process."""
EXACT_RESULT_BYTES = 16 * 1024 * 1024
"""Most bytes of rows a query of exact values (scoring, the schema) brings; more is an error."""
RUNNER_MEMORY_BYTES = 512 * 1024 * 1024
"""Address space of the process a host SQLite query runs in (its interpreter takes about 30 MB)."""
START_MARGIN_S = 5.0
"""Seconds a query's process may take past the statement's own timeout (start-up, opening)."""
T = TypeVar("T")


class SQLError(ToolExecutionError):
    """The database refused or failed a query; the message is the database's, for the model."""


class UnsafeRoleError(SQLError):
    """The DSN's role may reach the server's programs or files, or other sessions' SQL (see :mod:`.pg_guard`)."""


class QueryTimeout(SQLError):
    """A query ran past its statement timeout and was cancelled."""


class ReadOnlyViolation(SQLError):
    """A query tried to change the database."""


@dataclass(slots=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    """At most ``max_rows`` rows, in the order the database returned them."""
    truncated: bool = False
    """True when the query returned more than ``max_rows`` rows."""
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ElidedBlob:
    """A BLOB of ``size`` bytes whose bytes were not fetched (a display-only result; see
    ``SQLBackend.query``'s ``cell_chars``); it renders as the whole BLOB would."""

    size: int


@dataclass(slots=True)
class Column:
    name: str
    type: str
    nullable: bool = True
    primary_key: bool = False


@dataclass(slots=True)
class ForeignKey:
    columns: list[str]
    ref_table: str
    ref_columns: list[str]


@dataclass(slots=True)
class Table:
    name: str
    columns: list[Column]
    foreign_keys: list[ForeignKey] = field(default_factory=list)
    kind: str = "table"
    """``table`` or ``view``."""


class SQLBackend(ABC):
    """A database the SQL tools can read. Implementations must be safe to share between episodes."""

    dialect: str = ""
    name: str = ""

    @abstractmethod
    async def query(
        self,
        sql: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cell_chars: int | None = None,
    ) -> QueryResult:
        """Run one read-only statement; SQLError (QueryTimeout, ReadOnlyViolation) on failure.

        ``cell_chars`` says the rows are only for display, each cell cut to that many characters
        (:func:`.render.cell`): a backend may then return a long value shortened to what shows
        the same (the sandboxed one does, to keep its transfers small). None: exact values."""

    @abstractmethod
    async def tables(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Table]:
        """The tables and views a query can read, with columns and keys, by name."""

    async def aclose(self) -> None:
        """Close pooled connections (of the running event loop, for async drivers)."""


# -- SQLite ----------------------------------------------------------------------------------------


def runner_answer(
    result: ExecResult, timeout_s: float, *, where: str, hint: str, memory_where: str = ""
) -> dict[str, Any]:
    """The JSON answer of :mod:`.readonly_sqlite` run as a process (``result``: how it ended);
    raises the ``SQLError`` it stands for. ``where``: the place, for messages ("in the sql
    sandbox"; ``memory_where`` for running out of memory, default the same); ``hint``: what to do
    when the process itself failed."""
    if result.timed_out:
        raise QueryTimeout(readonly_sqlite.timeout_message(timeout_s))
    if result.oom_killed or (result.exit_code != 0 and "MemoryError" in result.stderr):
        raise SQLError(
            f"the query ran out of memory {memory_where or where}; select fewer rows or columns, or aggregate"
        )
    try:
        answer = json.loads(result.stdout) if result.exit_code == 0 and not result.truncated else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = result.stderr.strip()
        tail = tail if len(tail) <= 600 else "…" + tail[-600:]
        raise SQLError(
            f"the SQL runner failed {where} (exit {result.exit_code}"
            f"{', output cut' if result.truncated else ''}): {tail or 'no error output'}; {hint}"
        )
    if not answer.get("ok"):
        kind, message = answer.get("kind"), str(answer.get("message"))
        raise (ReadOnlyViolation if kind == "readonly" else QueryTimeout if kind == "timeout" else SQLError)(
            message
        )
    return answer


def decode_value(value: Any) -> Any:
    """A value of the runner's answer as Python has it (BLOBs from base64, elided ones as ``ElidedBlob``)."""
    if isinstance(value, dict):
        return base64.b64decode(value["blob"]) if "blob" in value else ElidedBlob(int(value["blob_size"]))
    return value


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """Everything ``stream`` sends, keeping the first ``cap`` bytes; and whether more came."""
    kept, more = bytearray(), False
    while chunk := await stream.read(1 << 16):
        room = cap - len(kept)
        kept += chunk[: max(room, 0)]
        more = more or len(chunk) > room
    return bytes(kept), more


async def run_on_host(
    request: dict[str, Any],
    *,
    call_timeout_s: float,
    max_output: int,
    script: str = readonly_sqlite.__file__,
    isolated: bool = True,
) -> ExecResult:
    """A runner ``script`` (default :mod:`.readonly_sqlite`) run once as a process of its own on this
    host, ``request`` as JSON on its stdin; at most ``max_output`` bytes of its answer are kept, and
    it is killed past ``call_timeout_s``. ``isolated``: ``python -I -S`` (no site-packages)."""
    start = time.perf_counter()
    flags = ["-I", "-S"] if isolated else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *flags,
        script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    timed_out = False
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        reading = asyncio.gather(
            _read_capped(proc.stdout, max_output), _read_capped(proc.stderr, 64 * 1024), proc.wait()
        )
        try:
            (out, cut), (err, _), code = await asyncio.wait_for(reading, call_timeout_s)
        except TimeoutError:
            timed_out, out, cut, err, code = True, b"", False, b"", 124
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
    return ExecResult(
        code,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        timed_out=timed_out,
        truncated=cut,
        duration_s=time.perf_counter() - start,
    )


def _sql_error(exc: Refused) -> SQLError:
    if exc.kind == "readonly":
        return ReadOnlyViolation(exc.message)
    if exc.kind == "timeout":
        return QueryTimeout(exc.message)
    return SQLError(exc.message)


def table_of(name: str, kind: str, info: list[Any], fks: list[Any]) -> Table:
    """A ``Table`` from the rows of ``PRAGMA table_info`` and ``PRAGMA foreign_key_list``."""
    columns = [Column(str(c[1]), str(c[2] or "").upper(), not c[3] and not c[5], bool(c[5])) for c in info]
    grouped: dict[int, ForeignKey] = {}
    for fk in fks:  # id, seq, table, from, to, …
        entry = grouped.setdefault(fk[0], ForeignKey([], str(fk[2]), []))
        entry.columns.append(str(fk[3]))
        entry.ref_columns.append(str(fk[4]) if fk[4] is not None else "")
    return Table(str(name), columns, list(grouped.values()), str(kind))


class SQLiteBackend(SQLBackend):
    """A SQLite database file, read-only from the host. Each query runs in a process of its own
    limited to ``memory_bytes`` (see the module docstring); the schema is read through pooled
    connections of this process, from worker threads. The statement itself runs as
    :mod:`.readonly_sqlite` says."""

    dialect = "sqlite"

    def __init__(
        self, path: str | Path, *, name: str | None = None, memory_bytes: int = RUNNER_MEMORY_BYTES
    ) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise ConfigError(
                f"SQLite database {str(self.path)!r} does not exist; give the path of a database file"
            )
        self.name = name or self.path.stem
        self.memory_bytes = memory_bytes
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()

    def _take(self) -> sqlite3.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return readonly_sqlite.connect(self.path)

    def _with_connection(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._take()
        reusable = False
        try:
            out = work(conn)
            reusable = True
            return out
        except Refused as exc:
            reusable = exc.reusable
            raise _sql_error(exc) from None
        finally:
            if reusable:
                self._idle.put(conn)
            else:
                conn.close()

    async def query(
        self,
        sql: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cell_chars: int | None = None,
    ) -> QueryResult:
        start = time.perf_counter()
        budget = EXACT_RESULT_BYTES if cell_chars is None else DISPLAY_RESULT_BYTES
        request = {
            "op": "query",
            "db": str(self.path),
            "uri": f"{self.path.as_uri()}?mode=ro",
            "sql": sql,
            "max_rows": max_rows,
            "timeout_s": timeout_s,
            "cell_chars": cell_chars,
            "max_bytes": budget,
            "memory_bytes": self.memory_bytes,
        }
        result = await run_on_host(
            request, call_timeout_s=timeout_s + START_MARGIN_S, max_output=budget + 4096
        )
        answer = runner_answer(
            result, timeout_s, where="in its process", hint="check that this Python has sqlite3"
        )
        rows = [tuple(decode_value(v) for v in row) for row in answer["rows"]]
        return QueryResult(
            list(answer["columns"]), rows, bool(answer["truncated"]), time.perf_counter() - start
        )

    def _tables(self, timeout_s: float) -> list[Table]:
        described = self._with_connection(lambda c: readonly_sqlite.describe(c, timeout_s))
        return [table_of(*t) for t in described]

    async def tables(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Table]:
        return await asyncio.to_thread(self._tables, timeout_s)

    async def aclose(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
