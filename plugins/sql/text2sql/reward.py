"""Execution match: does the predicted query return the gold query's result?

Rows are compared as multisets (duplicates count, order ignored), or as sequences when the gold
query orders its result (a top-level ``ORDER BY``). Columns may come in another order than the
gold query's, as long as one permutation of them matches; column names never matter. Values
are normalised first: numbers compare by value across int / float / Decimal (to 10 significant
digits, so ``0.1 + 0.2`` equals ``0.3`` and PostgreSQL's NUMERIC equals SQLite's REAL), NULL
equals NULL, dates compare as ISO text, booleans as 0 / 1.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

Row = tuple[Any, ...]

_FENCED = re.compile(r"```(?:sql|SQL|postgresql|sqlite)?\s*\n?(.*?)```", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_STATEMENT = re.compile(r"^\s*(select|with|values)\b", re.IGNORECASE)


def normalize_value(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, Decimal)):
        number = float(value)
        if number != number:  # NaN equals NaN here
            return "NaN"
        rounded = float(f"{number:.10g}")
        return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def normalize_rows(rows: Sequence[Sequence[Any]]) -> list[Row]:
    return [tuple(normalize_value(v) for v in row) for row in rows]


def orders_result(sql: str) -> bool:
    """True when ``sql`` has an ``ORDER BY`` outside any parentheses, string or comment."""
    depth = 0
    plain: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = sql.find(ch, i + 1)
            while end != -1 and end + 1 < n and sql[end + 1] == ch:  # doubled quote inside
                end = sql.find(ch, end + 2)
            i = n if end == -1 else end + 1
            plain.append(" ")
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end == -1 else end
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end == -1 else end + 2
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        plain.append(ch if depth == 0 and ch not in "()" else " ")
        i += 1
    return re.search(r"\border\s+by\b", "".join(plain), re.IGNORECASE) is not None


def _rows_equal(pred: list[Row], gold: list[Row], ordered: bool) -> bool:
    return pred == gold if ordered else Counter(pred) == Counter(gold)


def results_match(
    pred_rows: Sequence[Sequence[Any]], gold_rows: Sequence[Sequence[Any]], *, ordered: bool
) -> bool:
    """True when the two results hold the same rows (see the module docstring)."""
    pred, gold = normalize_rows(pred_rows), normalize_rows(gold_rows)
    if len(pred) != len(gold):
        return False
    if not gold:
        return True
    width = len(gold[0])
    if any(len(r) != width for r in pred):
        return False
    if _rows_equal(pred, gold, ordered):
        return True
    if width > 8:  # permutations of wide results are too many to try
        return False

    # Try column permutations, pairing only columns that hold the same multiset of values.
    def column(rows: list[Row], j: int) -> Counter[Any]:
        return Counter(r[j] for r in rows)

    gold_cols = [column(gold, j) for j in range(width)]
    pred_cols = [column(pred, j) for j in range(width)]
    candidates = [[p for p in range(width) if pred_cols[p] == gold_cols[g]] for g in range(width)]

    def search(g: int, used: list[int]) -> bool:
        if g == width:
            permuted = [tuple(r[p] for p in used) for r in pred]
            return _rows_equal(permuted, gold, ordered)
        return any(search(g + 1, [*used, p]) for p in candidates[g] if p not in used)

    return search(0, [])


def extract_sql(text: str) -> str | None:
    """The final SQL of an answer: the last fenced code block, else the last ``<answer>`` tag, else the
    whole text when it is a statement. None when there is none."""
    for pattern in (_FENCED, _ANSWER):
        found = [f.strip() for f in pattern.findall(text) if f.strip()]
        if found:
            return found[-1].rstrip(";").strip()
    stripped = text.strip()
    return stripped.rstrip(";").strip() if _STATEMENT.match(stripped) else None
