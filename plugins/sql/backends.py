"""Read-only SQL backends: the interface, the result and schema types, and SQLite on the host.

Every query runs as one statement in a read-only transaction that is always rolled back, under a
statement timeout, with at most ``max_rows + 1`` rows fetched (the extra row only tells that
there were more).

SQLite is opened with a ``file:…?mode=ro`` URI, ``PRAGMA query_only``, no ATTACH (limit 0) and an
authorizer that lets only reads through (SELECT, WITH, EXPLAIN, read-only PRAGMAs, no
``fts3_tokenizer``), so a write fails with an error naming what was refused. A progress handler
aborts statements past their deadline, so a timed-out query stops using the CPU too. That logic lives in
:mod:`.readonly_sqlite`, which the sandboxed backend (:mod:`.sandboxed`) runs inside the ``sql``
sandbox as well, so that both paths answer alike.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from toolgym import ConfigError, ToolExecutionError

from . import readonly_sqlite
from .readonly_sqlite import Refused

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_ROWS = 50
T = TypeVar("T")


class SQLError(ToolExecutionError):
    """The database refused or failed a query; the message is the database's, for the model."""


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
    async def query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S,
                    cell_chars: int | None = None) -> QueryResult:
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
    """A SQLite database file, opened read-only from the host. Connections are pooled and used
    from worker threads; the statement itself runs as :mod:`.readonly_sqlite` says."""

    dialect = "sqlite"

    def __init__(self, path: str | Path, *, name: str | None = None) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise ConfigError(f"SQLite database {str(self.path)!r} does not exist; give the path of a database file")
        self.name = name or self.path.stem
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

    def _run(self, sql: str, max_rows: int, timeout_s: float) -> QueryResult:
        start = time.perf_counter()
        columns, rows, truncated = self._with_connection(lambda c: readonly_sqlite.execute(c, sql, max_rows, timeout_s))
        return QueryResult(columns, rows, truncated, time.perf_counter() - start)

    async def query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S,
                    cell_chars: int | None = None) -> QueryResult:
        return await asyncio.to_thread(self._run, sql, max_rows, timeout_s)

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
