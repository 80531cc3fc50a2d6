"""A PostgreSQL result bounded in bytes by the server itself, before it reaches this process.

libpq receives each row whole (a ``DataRow`` message, however large), so no client-side cut can
keep a ``SELECT repeat('x', 200000000)`` out of this process: streaming, server-side cursors and
per-cell loaders all hold the row before they can look at it (six such rows held 1.5 GiB
here). The server must cut. A statement that returns rows of the model's choosing (SELECT,
WITH, VALUES, TABLE) is therefore run as a derived table, each of its columns wrapped::

    SELECT <cut(c1)>, ..., <cut(cN)> FROM (SELECT * FROM (
    <the statement>
    ) AS toolgym_q0 OFFSET 0) AS toolgym_q(c1, ..., cN)

after one ``... LIMIT 0`` run of the same derived table has named its N columns and their types.
A column of a small fixed-size type (integers, floats, booleans, dates, times, UUIDs) travels as
it is; any other goes as two: the value itself when its text form has at most ``T`` bytes (so it
arrives with its own type, exactly as the statement alone would give it), else NULL and beside it
what stands for it: for a display (``cell_chars``) its first ``C`` characters, or a BYTEA's size
(a display shows ``<N bytes>``); for exact values its size in bytes, which is an error (a scorer
must not compare a cut value). ``T`` is ``4 x (cell_chars + 1)`` bytes for a display, so every
cell the model may read whole arrives whole, and ``EXACT_RESULT_BYTES / N`` for exact values.
Rows stop at the result's byte budget as they stop at ``max_rows``.

Why this is safe for any text the model writes: the statement goes inside the parentheses only
when :func:`parse` has read it whole (quotes, quoted names, dollar quotes, nested comments, with
``standard_conforming_strings`` set on for the call) and found its parentheses balanced and no
second statement: the text cannot close the parenthesis it is put in, so every column of the
result is one of the wrappers above. ``OFFSET 0`` keeps the planner from pulling the statement up
into the wrapper (which would evaluate each of its expressions once per reference); a subquery
without an ORDER BY of its own keeps its rows' order. A text :func:`parse` cannot read is first
run as the ``LIMIT 0`` describe alone, which returns no row whatever the text does, and reported
with the server's error (or refused if the server took it).

Statements that cannot be a derived table run as they are. An EXPLAIN's plan may name a constant
the planner folded (``EXPLAIN SELECT * FROM t WHERE a = repeat('x', 1e8)`` held 286 MiB of the host
in one line): it runs in a process of its own limited to ``EXPLAIN_MEMORY_BYTES``
(:mod:`.pg_explain`, :func:`explain_apart`), which sends back only the cut rows. SHOW's rows are the
server's settings; they, and a statement that is no query at all (the server's error comes back),
run here, cut cell by cell and stopped at the budget (:func:`raw_row`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import (
    DISPLAY_RESULT_BYTES,
    EXACT_RESULT_BYTES,
    ElidedBlob,
    QueryResult,
    QueryTimeout,
    ReadOnlyViolation,
    SQLError,
    run_on_host,
)
from .pg_guard import skip_block_comment

WRAPPED_FIRST_WORDS = frozenset({"select", "with", "values", "table"})
"""Statements run as a derived table (all that may return rows of the model's choosing)."""
FIXED_SIZE_TYPES = frozenset(
    {16, 18, 20, 21, 23, 26, 700, 701, 790, 1082, 1083, 1114, 1184, 1186, 1266, 2950}
)
"""Type OIDs whose values are small by construction: bool, "char", int8, int2, int4, oid, float4,
float8, money, date, time, timestamp, timestamptz, interval, timetz, uuid. They are not wrapped."""
BYTEA = 17
SETTINGS_SQL = "SET LOCAL standard_conforming_strings = on"
"""Run with each call's BEGIN: :func:`parse` reads quotes as the server then does."""

_IDENT_START = re.compile(r"[A-Za-z_\u0080-\U0010ffff]")
_IDENT = re.compile(r"[A-Za-z0-9_$\u0080-\U0010ffff]*")
_DOLLAR = re.compile(r"\$([A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*)?\$")


class MultipleStatements(SQLError):
    """The text holds more than one statement."""

    def __init__(self) -> None:
        super().__init__("send one SQL statement per call")


@dataclass(frozen=True, slots=True)
class Statement:
    """What :func:`parse` read of a statement."""

    first_word: str
    """Its first keyword, lower case ('' when it starts with none)."""
    body: str | None
    """The statement without a trailing ``;``, comments or white space, when it was read whole
    with balanced parentheses (None: it could not be, and must not be wrapped unchecked)."""

    @property
    def wrapped(self) -> bool:
        return self.first_word in WRAPPED_FIRST_WORDS


def _skip_quoted(sql: str, i: int, quote: str, *, backslash: bool = False) -> int:
    """The index past the quoted text opening at ``i`` (``''`` / ``""`` escape the quote); -1 if unterminated."""
    n = len(sql)
    i += 1
    while i < n:
        c = sql[i]
        if backslash and c == "\\":
            i += 2
            continue
        if c == quote:
            if i + 1 < n and sql[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return -1


def parse(sql: str) -> Statement:
    """Read ``sql`` as PostgreSQL's lexer would (see the module docstring); raise
    ``MultipleStatements`` when a statement follows a top-level ``;``."""
    i, n, depth, end, first = 0, len(sql), 0, 0, ""
    semicolon = -1
    ok = True
    while i < n:
        c = sql[i]
        start = i
        if c.isspace():
            i += 1
            continue
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if sql.startswith("/*", i):
            i, closed = skip_block_comment(sql, i)
            if not closed:
                ok = False
                break
            continue
        if c == ";":
            if depth:
                ok = False
                break
            semicolon = i if semicolon < 0 else semicolon
            i += 1
            continue
        if semicolon >= 0:  # a token after a top-level semicolon: a second statement
            raise MultipleStatements()
        if c in "'\"":
            i = _skip_quoted(sql, i, c)
        elif c == "$" and (m := _DOLLAR.match(sql, i)):
            close = sql.find(m.group(0), m.end())
            i = -1 if close < 0 else close + len(m.group(0))
        elif _IDENT_START.match(c):
            i = _IDENT.match(sql, i + 1).end()  # type: ignore[union-attr]  # matches the empty string
            word = sql[start:i]
            if not first:
                first = word.lower()
            if word in ("e", "E") and i < n and sql[i] == "'":  # E'...': backslash escapes
                i = _skip_quoted(sql, i, "'", backslash=True)
        elif c == "(":
            depth += 1
            i += 1
        elif c == ")":
            depth -= 1
            i += 1
            if depth < 0:
                ok = False
                break
        else:  # digits, operators, punctuation
            i += 1
        if i < 0:  # an unterminated quote
            ok = False
            break
        if not first and c not in "(":
            first = first or "-"  # the statement starts with something other than a keyword
        end = i
    first = "" if first == "-" else first
    if not ok or depth or end == 0:
        return Statement(first, None)
    return Statement(first, sql[:end])


_TOP_LEVEL_ONLY = {
    "WITH clause containing a data-modifying statement must be at the top level": "a WITH clause that changes data (INSERT, UPDATE, DELETE) cannot execute in a read-only transaction",
    "SELECT ... INTO is not allowed here": "SELECT INTO makes a table, which cannot execute in a read-only transaction",
}


def top_level_only(message: str) -> ReadOnlyViolation | None:
    """The refusal to give for a statement the describe failed on only because it is a write that
    may stand only at the top level (the statement alone fails on the read-only transaction)."""
    for server, ours in _TOP_LEVEL_ONLY.items():
        if message.startswith(server):
            return ReadOnlyViolation(f"the database is read-only: {ours}")
    return None


def describe_sql(text: str) -> str:
    """The statement as a derived table with no row: names its columns and their types, and
    returns no row whatever ``text`` holds (``LIMIT 0`` applies to the whole query)."""
    return f"SELECT * FROM (\n{text}\n) AS toolgym_q0 LIMIT 0"


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    kind: str
    """``plain`` (as it is), ``size`` (a BYTEA shown by its size) or ``pair`` (value, stand-in)."""


class BoundedResult:
    """How to run a described statement so that each cell is bounded, and how to read its rows back."""

    def __init__(self, columns: Sequence[tuple[str, int]], *, cell_chars: int | None) -> None:
        self.cell_chars = cell_chars
        n = len(columns)
        if cell_chars is None:
            self.cell_bytes = max(1024, EXACT_RESULT_BYTES // max(1, n))
            self.budget = EXACT_RESULT_BYTES
        else:
            self.cell_bytes = 4 * (cell_chars + 1)
            self.budget = DISPLAY_RESULT_BYTES
        self.cut_chars = 2 * (cell_chars or 0) + 16
        """Characters of a value's text a display gets in place of a longer value (room for its
        white space to be collapsed)."""
        self.columns: list[_Column] = []
        self.exprs: list[str] = []
        for i, (name, oid) in enumerate(columns, start=1):
            ref = f"toolgym_q.c{i}"
            if oid in FIXED_SIZE_TYPES:
                self.columns.append(_Column(name, "plain"))
                self.exprs.append(ref)
                continue
            if oid == BYTEA and cell_chars is not None:
                self.columns.append(_Column(name, "size"))
                self.exprs.append(f"octet_length({ref})")
                continue
            size = f"octet_length({ref})" if oid == BYTEA else f"octet_length({ref}::text)"
            stand_in = size if cell_chars is None or oid == BYTEA else f"left({ref}::text, {self.cut_chars})"
            self.columns.append(_Column(name, "pair"))
            self.exprs.append(f"CASE WHEN {size} <= {self.cell_bytes} THEN {ref} END")
            self.exprs.append(f"CASE WHEN {size} > {self.cell_bytes} THEN {stand_in} END")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def sql(self, body: str) -> str:
        if not self.columns:
            return f"SELECT FROM (\n{body}\n) AS toolgym_q0"
        aliases = ", ".join(f"c{i}" for i in range(1, len(self.columns) + 1))
        return (
            f"SELECT {', '.join(self.exprs)} FROM (SELECT * FROM (\n{body}\n) AS toolgym_q0 OFFSET 0) "
            f"AS toolgym_q({aliases})"
        )

    def row(self, raw: Sequence[Any], number: int) -> tuple[Any, ...]:
        """One row as the statement alone would have given it (cut values as their stand-ins)."""
        out: list[Any] = []
        j = 0
        for column in self.columns:
            if column.kind == "plain":
                out.append(raw[j])
                j += 1
            elif column.kind == "size":
                out.append(None if raw[j] is None else ElidedBlob(int(raw[j])))
                j += 1
            else:
                value, stand_in = raw[j], raw[j + 1]
                j += 2
                if stand_in is None:
                    out.append(value)
                elif self.cell_chars is None:
                    raise SQLError(
                        f"a value in column {column.name!r} of row {number} is {int(stand_in)} bytes, more "
                        f"than the {self.cell_bytes} a value of this result may have; select part of it "
                        "(left(), substr()) or its length, or aggregate"
                    )
                else:
                    out.append(_cut(str(stand_in), self.cell_chars))
        return tuple(out)


def _cut(text: str, cell_chars: int) -> str:
    """A display's stand-in for a long value: its start, white space collapsed, and always read as cut."""
    shown = " ".join(text.split()) if "\n" in text or "\t" in text else text
    return shown if len(shown) > cell_chars else shown + "…"


EXPLAIN_SCRIPT = str(Path(__file__).with_name("pg_explain.py"))
EXPLAIN_MEMORY_BYTES = 1024 * 1024 * 1024
"""Address space of the process an EXPLAIN runs in (psycopg and libpq take about 50 MB of it)."""


async def explain_apart(
    dsn: str, sql: str, *, max_rows: int, timeout_s: float, cell_chars: int | None, connect_timeout_s: float
) -> QueryResult:
    """An EXPLAIN run by :mod:`.pg_explain` in a process of its own: its rows, cut there."""
    start = time.perf_counter()
    budget = EXACT_RESULT_BYTES if cell_chars is None else DISPLAY_RESULT_BYTES
    request = {
        "dsn": dsn,
        "sql": sql,
        "max_rows": max_rows,
        "timeout_s": timeout_s,
        "cell_chars": cell_chars,
        "max_bytes": budget,
        "memory_bytes": EXPLAIN_MEMORY_BYTES,
        "connect_timeout_s": connect_timeout_s,
    }
    result = await run_on_host(
        request,
        call_timeout_s=timeout_s + connect_timeout_s + 15.0,
        max_output=budget + 16384,
        script=EXPLAIN_SCRIPT,
        isolated=False,
    )
    stopped = f"the query ran past the {timeout_s:g}s time limit and was stopped"
    if result.timed_out:
        raise QueryTimeout(stopped)
    try:
        answer = json.loads(result.stdout) if result.exit_code == 0 and not result.truncated else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = result.stderr.strip()[-600:]
        raise SQLError(f"the EXPLAIN runner failed (exit {result.exit_code}): {tail or 'no error output'}")
    if not answer.get("ok"):
        kind, code, message = answer.get("kind"), answer.get("sqlstate") or "", str(answer.get("message"))
        if kind == "role":
            from .backends import UnsafeRoleError

            raise UnsafeRoleError(message)
        if code == "57014":
            raise QueryTimeout(f"{stopped}; simplify it or add a LIMIT")
        if code == "25006":
            raise ReadOnlyViolation(f"the database is read-only: {message}")
        if code == "42601" and "multiple commands" in message:
            raise MultipleStatements()
        if kind == "connect":
            raise SQLError(f"cannot connect to the PostgreSQL database: {message}")
        if "out of memory" in message:
            raise SQLError(
                f"the plan is too large to read ({message}); EXPLAIN a statement without such large constants"
            )
        raise SQLError(message)
    rows = []
    for row in answer["rows"]:
        rows.append(
            tuple(
                ElidedBlob(int(v["blob_size"]))
                if isinstance(v, dict) and "blob_size" in v and len(v) == 1
                else _cut(v, cell_chars)
                if isinstance(v, str) and cell_chars is not None and len(v) > 2 * cell_chars
                else v
                for v in row
            )
        )
    return QueryResult(list(answer["columns"]), rows, bool(answer["truncated"]), time.perf_counter() - start)


def raw_row(raw: Sequence[Any], cell_chars: int | None) -> tuple[Any, ...]:
    """A row of a statement that ran as it is (EXPLAIN, SHOW): for a display, each long value cut
    (a BLOB to its size), so that at most one whole row is ever held."""
    if cell_chars is None:
        return tuple(raw)
    out: list[Any] = []
    for value in raw:
        if isinstance(value, (list, dict, tuple)):  # a JSON plan: shown as its str() would be
            value = str(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            out.append(ElidedBlob(len(value)))
        elif isinstance(value, str) and len(value) > 2 * cell_chars + 16:
            out.append(_cut(value[: 2 * cell_chars + 16], cell_chars))
        else:
            out.append(value)
    return tuple(out)


def row_bytes(row: Sequence[Any]) -> int:
    """About how many bytes a row holds (its texts and byte strings; 16 for anything else)."""
    return sum(len(v) if isinstance(v, (str, bytes, bytearray)) else 16 for v in row)
