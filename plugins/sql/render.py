"""How query results and schemas read to a model, within output caps (characters).

A result is a ``|``-separated table: a header line, one line per row, then a line with the row
count. Each cell is cut to ``cell_chars``; the whole text to ``max_chars`` (rows that do not fit are
dropped and the last line says so). NULL reads ``NULL``; bytes read ``<N bytes>``.
A schema reads as compact ``CREATE TABLE`` statements, which models know best.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from .backends import ElidedBlob, QueryResult, Table

MAX_CHARS = 6000
CELL_CHARS = 200


def cell(value: Any, limit: int = CELL_CHARS) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, (bytes, bytearray, memoryview)):
        text = f"<{len(bytes(value))} bytes>"
    elif isinstance(value, ElidedBlob):
        text = f"<{value.size} bytes>"
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, Decimal):
        text = format(value, "f")
    elif isinstance(value, (dt.date, dt.datetime, dt.time)):
        text = value.isoformat()
    else:
        text = str(value)
    text = " ".join(text.split()) if "\n" in text or "\t" in text else text
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def render_result(result: QueryResult, *, max_chars: int = MAX_CHARS, cell_chars: int = CELL_CHARS) -> str:
    """The model-facing text of a query result."""
    if not result.columns:
        return "The statement ran and returned no result set."
    lines = [" | ".join(cell(c, cell_chars) for c in result.columns)]
    used = len(lines[0]) + 1
    shown = 0
    footer_room = 90
    for row in result.rows:
        line = " | ".join(cell(v, cell_chars) for v in row)
        if used + len(line) + 1 + footer_room > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    n = len(result.rows)
    if shown < n:
        lines.append(
            f"({shown} of {n}{'+' if result.truncated else ''} rows shown: output limit; "
            "select fewer columns or add a LIMIT)"
        )
    elif result.truncated:
        lines.append(f"(first {n} rows shown; the query returned more: aggregate or add a LIMIT)")
    else:
        lines.append(f"({n} row{'s' if n != 1 else ''})")
    return "\n".join(lines)


def render_table(table: Table) -> str:
    parts = []
    pk = [c.name for c in table.columns if c.primary_key]
    for c in table.columns:
        flags = []
        if c.primary_key and len(pk) == 1:
            flags.append("PRIMARY KEY")
        elif not c.nullable:
            flags.append("NOT NULL")
        parts.append(" ".join([c.name, c.type or "ANY", *flags]))
    if len(pk) > 1:
        parts.append(f"PRIMARY KEY ({', '.join(pk)})")
    for fk in table.foreign_keys:
        parts.append(
            f"FOREIGN KEY ({', '.join(fk.columns)}) REFERENCES {fk.ref_table}({', '.join(fk.ref_columns)})"
        )
    keyword = "CREATE VIEW" if table.kind == "view" else "CREATE TABLE"
    return f"{keyword} {table.name} (\n  " + ",\n  ".join(parts) + "\n);"


def render_schema(tables: list[Table], *, dialect: str, max_chars: int = MAX_CHARS) -> str:
    """All tables as DDL, or, past ``max_chars``, their names with a hint to ask for one table."""
    if not tables:
        return f"The {dialect} database has no tables this role can read."
    head = f"{dialect} database, {len(tables)} table(s): {', '.join(t.name for t in tables)}"
    text = head + "\n\n" + "\n\n".join(render_table(t) for t in tables)
    if len(text) <= max_chars:
        return text
    note = "\n(too many tables to show their columns at once: call again with one table name)"
    return head[: max_chars - len(note)] + note
