"""One read-only SQLite statement, run the same way on the host and inside the ``sql`` sandbox.

Stdlib only, with no toolgym import: the host backend imports this module, and the sandboxed
backend copies this very file into the sandbox and runs it as ``python3 -I -S FILE`` with one JSON
request on stdin and one JSON answer on stdout. Both paths therefore refuse, time out and fail
in the same words and return the same values.

The statement runs in a transaction that is always rolled back, on a connection opened through a
``file:…?mode=ro`` URI with ``PRAGMA query_only``, no ATTACH (limit 0) and an authorizer that
lets only reads through (SELECT, WITH, EXPLAIN, read-only PRAGMAs) and refuses ``fts3_tokenizer``
(it returns a memory address). A progress handler aborts it
past its deadline, so a timed-out query stops using the CPU too. At most ``max_rows + 1`` rows are
fetched (the extra one only tells that there were more).

Wire format (script mode)::

    request  {"op": "query", "db": PATH, "sql": TEXT, "max_rows": N, "timeout_s": S,
              "cell_chars": N | null, "max_bytes": N, "uri": URI?, "memory_bytes": N?}
             {"op": "tables", "db": PATH, "timeout_s": S, "max_bytes": N}
    answer   {"ok": true, "columns": [...], "rows": [[...], ...], "truncated": BOOL, "db_s": S}
             {"ok": true, "tables": [[NAME, KIND, TABLE_INFO_ROWS, FOREIGN_KEY_ROWS], ...], "db_s": S}
             {"ok": false, "kind": "readonly" | "timeout" | "error" | "too_large" | "memory", "message": TEXT}

``PATH`` is relative to the working directory and free of ``?``, ``#`` and ``%`` (it goes into a
``file:`` URI as it is); ``uri``, when given, is the whole ``file:…?mode=ro`` URI instead (the host
path, whose files may have any name). ``memory_bytes``: the process first limits its own address
space to that (``RLIMIT_AS``), and a statement that needs more is answered ``memory``: this is how
the host path keeps a query's memory out of the host process. Rows are converted one at
a time as they are fetched, so a BLOB shown by its size is never held longer than its row, and
rows only shown (``cell_chars`` set) stop at ``max_bytes`` as they stop at ``max_rows``
(``truncated``); exact rows past it are the ``too_large`` error.

Values travel exactly: NULL, integers, text, and reals (JSON numbers written with ``repr``, so
they read back bit for bit; infinities as ``Infinity``). A BLOB is ``{"blob": BASE64}``. With
``cell_chars`` set (results only shown to a model), a text longer than that once its whitespace
is collapsed comes back collapsed and cut to ``cell_chars + 1`` characters, and a BLOB as
``{"blob_size": N}``: the renderer shows either exactly as it shows the whole value. An answer
longer than ``max_bytes`` is replaced by a ``too_large`` error, so the sandbox's output cap never
cuts a JSON document in half.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

_READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "collation_list",
        "function_list",
        "database_list",
    }
)
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
_REFUSED_FUNCTIONS = frozenset({"fts3_tokenizer"})
"""Functions no query may call: ``fts3_tokenizer('simple')`` returns a memory address of the process
running SQLite (an address leak; Python before 3.12 cannot turn it off with ``sqlite3_db_config``)."""
_ACTIONS = (
    "CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER CREATE_TEMP_VIEW "
    "CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX DROP_TEMP_TABLE DROP_TEMP_TRIGGER "
    "DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA READ SELECT TRANSACTION UPDATE ATTACH DETACH "
    "ALTER_TABLE REINDEX ANALYZE CREATE_VTABLE DROP_VTABLE FUNCTION SAVEPOINT RECURSIVE"
).split()
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{a}"): a.lower().replace("_", " ")
    for a in _ACTIONS
    if hasattr(sqlite3, f"SQLITE_{a}")
}
SCHEMA_ROWS = 100_000
"""Rows read from each schema statement (tables, columns, keys)."""


class Refused(Exception):
    """The statement was refused or failed. ``kind``: ``readonly``, ``timeout`` or ``error``;
    ``reusable``: whether the connection is still clean (rolled back) and may serve again."""

    def __init__(self, kind: str, message: str, *, reusable: bool) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.reusable = reusable


def timeout_message(timeout_s: float) -> str:
    return f"the query ran past the {timeout_s:g}s time limit and was stopped; simplify it or add a LIMIT"


def connect(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to the database file at ``path``."""
    from pathlib import Path  # here, not at the top: the sandbox runs the script without it

    return connect_uri(f"{Path(path).resolve().as_uri()}?mode=ro")


def connect_uri(uri: str) -> sqlite3.Connection:
    """A read-only connection through a ``file:`` URI (which must say ``mode=ro``)."""
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA query_only = ON")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


def execute(
    conn: sqlite3.Connection,
    sql: str,
    max_rows: int,
    timeout_s: float,
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...] | None] | None = None,
) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """(columns, at most ``max_rows`` rows, whether there were more) of one read-only statement;
    raises ``Refused``. ``convert``, when given, is applied to each row as it is fetched (one row
    at a time), so that what it drops (a BLOB's bytes) is never held for more than one row; when
    it returns None the rows so far are all that is kept, as if ``max_rows`` had been reached."""
    refused: list[str] = []

    def authorize(
        action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None
    ) -> int:
        if action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() not in _REFUSED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            refused.append(f"the function {(arg2 or '').lower()}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        what = _ACTION_NAMES.get(action, f"action {action}")
        refused.append(f"{what} {arg1}" if arg1 and action == sqlite3.SQLITE_PRAGMA else what)
        return sqlite3.SQLITE_DENY

    deadline = time.monotonic() + timeout_s
    reusable = False
    try:
        conn.execute("BEGIN")
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        conn.set_authorizer(authorize)
        try:
            cur = conn.execute(sql)
            columns = [d[0] for d in cur.description] if cur.description else []
            rows: list[tuple[Any, ...]] = []
            stopped = False
            if cur.description and convert is None:
                rows = cur.fetchmany(max_rows + 1)
            elif cur.description and convert is not None:
                while len(rows) <= max_rows and (row := cur.fetchone()) is not None:
                    converted = convert(row)
                    del row
                    if converted is None:
                        stopped = True
                        break
                    rows.append(converted)
            cur.close()
        finally:
            conn.set_authorizer(None)
            conn.set_progress_handler(None, 0)
            conn.execute("ROLLBACK")
            reusable = True  # rolled back: clean, whatever the statement did
    except sqlite3.Error as exc:
        message = str(exc)
        if refused and refused[0].startswith("the function "):
            raise Refused(
                "readonly",
                f"{refused[0].removeprefix('the function ')} is not allowed: it reveals memory "
                "addresses of the process running SQLite",
                reusable=reusable,
            ) from None
        if refused:
            raise Refused(
                "readonly",
                f"the database is read-only: {refused[0]} is not allowed "
                "(only SELECT, WITH … SELECT, EXPLAIN and read-only PRAGMAs run)",
                reusable=reusable,
            ) from None
        if "interrupted" in message:
            raise Refused("timeout", timeout_message(timeout_s), reusable=reusable) from None
        if "one statement at a time" in message:
            message = "send one SQL statement per call"
        raise Refused("error", message, reusable=reusable) from None
    except sqlite3.Warning as exc:  # e.g. several statements in one string
        text = "send one SQL statement per call" if "one statement" in str(exc) else str(exc)
        raise Refused("error", text, reusable=reusable) from None
    return columns, [tuple(r) for r in rows[:max_rows]], stopped or len(rows) > max_rows


def describe(
    conn: sqlite3.Connection, timeout_s: float
) -> list[tuple[str, str, list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """(name, kind, ``PRAGMA table_info`` rows, ``PRAGMA foreign_key_list`` rows) of every table and
    view, by name; each statement under ``timeout_s``."""
    _, listing, _ = execute(
        conn,
        "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name",
        SCHEMA_ROWS,
        timeout_s,
    )
    out = []
    for name, kind in listing:
        quoted = '"' + str(name).replace('"', '""') + '"'
        info = execute(conn, f"PRAGMA table_info({quoted})", SCHEMA_ROWS, timeout_s)[1]
        fks = execute(conn, f"PRAGMA foreign_key_list({quoted})", SCHEMA_ROWS, timeout_s)[1]
        out.append((str(name), str(kind), info, fks))
    return out


# -- values on the wire ----------------------------------------------------------------------------


def encode_value(value: Any, cell_chars: int | None = None) -> Any:
    """A JSON-ready form of one SQLite value (see the module docstring)."""
    if isinstance(value, bytes):
        if cell_chars is not None:
            return {"blob_size": len(value)}
        return {"blob": base64.b64encode(value).decode("ascii")}
    if cell_chars is not None and isinstance(value, str) and len(value) > cell_chars:
        shown = " ".join(value.split()) if "\n" in value or "\t" in value else value
        if len(shown) > cell_chars:
            return shown[: cell_chars + 1]
    return value


def memory_message(limit: int) -> str:
    return (
        f"the query needed more than the {limit // (1024 * 1024)} MiB of memory a query may use and was stopped; "
        "select fewer or smaller values (length(x) instead of x), or aggregate"
    )


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request (see the module docstring)."""
    start = time.perf_counter()
    timeout_s = float(request["timeout_s"])
    try:
        conn = connect_uri(request.get("uri") or f"file:{request['db']}?mode=ro")
    except sqlite3.Error as exc:
        return {
            "ok": False,
            "kind": "error",
            "message": f"cannot open the database copy in the sandbox: {exc}",
        }
    try:
        if request["op"] == "tables":
            tables = [
                [n, k, [list(r) for r in info], [list(r) for r in fks]]
                for n, k, info, fks in describe(conn, timeout_s)
            ]
            return {"ok": True, "tables": tables, "db_s": time.perf_counter() - start}
        cell_chars = request.get("cell_chars")
        budget = int(request.get("max_bytes") or 0) - 8192 if cell_chars is not None else 0
        used = 0

        def convert(row: tuple[Any, ...]) -> tuple[Any, ...] | None:
            nonlocal used
            out = tuple(encode_value(v, cell_chars) for v in row)
            if budget > 0:  # rows only shown: stop at the byte budget, as a row limit stops (not an error)
                used += len(json.dumps(out, ensure_ascii=True)) + 2  # and its ", " in the list
                if used > budget:
                    return None
            return out

        columns, rows, truncated = execute(
            conn, request["sql"], int(request["max_rows"]), timeout_s, convert=convert
        )
        return {
            "ok": True,
            "columns": columns,
            "rows": [list(r) for r in rows],
            "truncated": truncated,
            "db_s": time.perf_counter() - start,
        }
    except Refused as exc:
        return {"ok": False, "kind": exc.kind, "message": exc.message}
    except MemoryError:  # SQLite's own allocations fail as MemoryError too (SQLITE_NOMEM)
        return {
            "ok": False,
            "kind": "memory",
            "message": memory_message(int(request.get("memory_bytes") or 0)),
        }
    finally:
        conn.close()


def main() -> None:
    request = json.loads(sys.stdin.read())
    if request.get("memory_bytes"):  # the host path: the statement cannot grow this process past it
        import resource

        limit = int(request["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    text = json.dumps(answer(request), ensure_ascii=True)
    limit = int(request.get("max_bytes") or 0)
    if limit and len(text) > limit:
        cap = "a result may have" if request.get("uri") else "the sandbox returns"  # "uri": the host path
        text = json.dumps(
            {
                "ok": False,
                "kind": "too_large",
                "message": (
                    f"the result is {len(text)} bytes, more than the {limit} bytes {cap}; "
                    "select fewer rows or columns, or aggregate"
                ),
            }
        )
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
