"""One EXPLAIN on PostgreSQL, run as a process of its own with a memory limit.

An EXPLAIN cannot be a derived table, so the server cannot cut its rows as :mod:`.pg_bound` has it
cut a query's; and a plan line may name a constant the planner folded
(``EXPLAIN SELECT * FROM t WHERE a = repeat('x', 100000000)`` held 286 MiB of the host in one
line). libpq receives that line whole, so it is received here, in a process whose address space
is limited to ``memory_bytes``, and only the cut rows come back: each cell to ``2 x cell_chars + 16``
characters for a display, all rows within ``max_bytes``.

Started as ``python pg_explain.py`` (the host's interpreter, with its site-packages for psycopg;
``pg_guard`` is this file's sibling) with one JSON request on stdin::

    {"dsn": DSN, "sql": TEXT, "max_rows": N, "timeout_s": S, "cell_chars": N | null, "max_bytes": N,
     "memory_bytes": N, "connect_timeout_s": S}

and one JSON answer on stdout: ``{"ok": true, "columns": [...], "rows": [[...], ...], "truncated":
BOOL}`` or ``{"ok": false, "kind": "connect" | "role" | "memory" | "too_large" | "error", "sqlstate":
CODE, "message": TEXT}``. The connection is new, checked as every pooled one is (``pg_guard``), and
closed after the one statement, which runs alone (extended protocol) in a read-only transaction
under the statement timeout.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any


def _cell(value: Any, cell_chars: int | None) -> Any:
    """A JSON-ready value: for a display a long text cut (a JSON plan as its ``str``), bytes as a size."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"blob_size": len(value)}
    if cell_chars is not None and isinstance(value, (list, dict, tuple)):
        value = str(value)
    if isinstance(value, str) and cell_chars is not None and len(value) > 2 * cell_chars + 16:
        return value[: 2 * cell_chars + 16]
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    return str(value)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    # this file's sibling (the script's directory is on sys.path): no toolgym import in this process
    from pg_guard import REFUSED_MEMBERSHIPS, ROLE_CHECK_SQL, unsafe_role_reason  # type: ignore[import-not-found]

    cell_chars = request.get("cell_chars")
    budget = int(request["max_bytes"]) - 8192
    max_rows = int(request["max_rows"])
    try:
        conn = psycopg.connect(
            request["dsn"],
            autocommit=True,
            prepare_threshold=None,
            connect_timeout=max(1, round(float(request["connect_timeout_s"]))),
        )
    except psycopg.Error as exc:
        return {"ok": False, "kind": "connect", "message": str(exc).strip()}
    try:
        row = conn.execute(ROLE_CHECK_SQL, (list(REFUSED_MEMBERSHIPS),)).fetchone()
        reason = unsafe_role_reason(tuple(row or ()))
        if reason:
            return {"ok": False, "kind": "role", "message": reason}
        conn.execute(
            f"BEGIN READ ONLY; SET LOCAL statement_timeout = {max(1, int(float(request['timeout_s']) * 1000))}"
        )
        cur = conn.cursor()
        rows: list[list[Any]] = []
        used, more = 0, False
        stream = cur.stream(request["sql"])
        try:
            for raw in stream:
                out = [_cell(v, cell_chars) for v in raw]
                del raw
                used += len(json.dumps(out)) + 2
                if used > budget:
                    if cell_chars is None:
                        return {
                            "ok": False,
                            "kind": "too_large",
                            "message": (
                                f"the result is larger than the {request['max_bytes']} bytes a result of exact values "
                                "may have; select fewer rows or columns, or aggregate"
                            ),
                        }
                    more = True
                    break
                rows.append(out)
                if len(rows) > max_rows:
                    break
        finally:
            getattr(stream, "close", lambda: None)()  # a closed stream: psycopg cancels the rest
        columns = [c.name for c in cur.description] if cur.description else []
    except psycopg.Error as exc:
        diag = getattr(exc, "diag", None)
        message = (getattr(diag, "message_primary", None) or str(exc)).strip()
        return {"ok": False, "kind": "error", "sqlstate": getattr(exc, "sqlstate", None), "message": message}
    finally:
        conn.close()  # the statement's transaction and session end with it
    return {
        "ok": True,
        "columns": columns,
        "rows": rows[:max_rows],
        "truncated": more or len(rows) > max_rows,
    }


def main() -> None:
    request = json.loads(sys.stdin.read())
    limit = int(request["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        reply = answer(request)
    except MemoryError:
        reply = {
            "ok": False,
            "kind": "memory",
            "message": (
                f"the plan needed more than the {limit // (1024 * 1024)} MiB of memory a statement may use on the way "
                "here; EXPLAIN a statement without such large constants"
            ),
        }
    sys.stdout.write(json.dumps(reply))


if __name__ == "__main__":
    main()
