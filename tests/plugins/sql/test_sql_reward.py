"""Execution match: multisets, ordering, NULLs, numbers across types, column order; SQL extraction."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from toolgym.plugins.sql.text2sql.reward import extract_sql, normalize_value, orders_result, results_match


def test_multiset_comparison() -> None:
    gold = [("a", 1), ("b", 2), ("a", 1)]
    assert results_match([("b", 2), ("a", 1), ("a", 1)], gold, ordered=False)
    assert not results_match([("b", 2), ("a", 1)], gold, ordered=False)  # a duplicate is missing
    assert not results_match([("b", 2), ("b", 2), ("a", 1)], gold, ordered=False)  # same set, other multiset
    assert not results_match([("a", 1), ("b", 2), ("a", 1), ("c", 3)], gold, ordered=False)
    assert results_match([], [], ordered=True) and not results_match([(1,)], [], ordered=False)


def test_ordering_counts_only_when_the_gold_orders() -> None:
    gold = [("x", 3), ("y", 2), ("z", 1)]
    assert results_match(list(reversed(gold)), gold, ordered=False)
    assert not results_match(list(reversed(gold)), gold, ordered=True)
    assert results_match(gold, gold, ordered=True)


def test_nulls_and_numbers() -> None:
    assert results_match([(None, 1)], [(None, 1)], ordered=False)
    assert not results_match([(None,)], [(0,)], ordered=False) and not results_match(
        [("",)], [(None,)], ordered=False
    )
    assert results_match([(Decimal("12.50"),)], [(12.5,)], ordered=False)
    assert results_match([(0.1 + 0.2,)], [(0.3,)], ordered=False)
    assert results_match([(10,)], [(10.0,)], ordered=False) and results_match(
        [(True,)], [(1,)], ordered=False
    )
    assert results_match([(Decimal("412.3333333333333333"),)], [(412.3333333333333,)], ordered=False)
    assert not results_match([(0.3001,)], [(0.3,)], ordered=False)
    assert not results_match([("10",)], [(10,)], ordered=False)  # text is not a number
    assert normalize_value(dt.date(2023, 5, 1)) == "2023-05-01" and normalize_value(float("nan")) == "NaN"


def test_column_order_does_not_matter() -> None:
    gold = [("ann", 3, "red"), ("bob", 5, "blue")]
    assert results_match([(3, "red", "ann"), (5, "blue", "bob")], gold, ordered=False)
    assert results_match([("red", "ann", 3), ("blue", "bob", 5)], gold, ordered=True)
    # columns with equal values must still pair rows the same way
    assert not results_match([(1, 2), (2, 1)], [(1, 1), (2, 2)], ordered=False)
    assert results_match([(2, 1), (1, 2)], [(1, 2), (2, 1)], ordered=False)
    assert not results_match([("ann", 3)], gold[:1], ordered=False)  # a missing column


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t\norder\n  by a desc limit 3", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3) AS s", False),
        ("SELECT 'ORDER BY' AS label FROM t", False),
        ("SELECT a FROM t -- ORDER BY a\n", False),
        ("SELECT a FROM t /* order by a */", False),
        ('SELECT "order by" FROM t', False),
        ("SELECT 'it''s' FROM t ORDER BY 1", True),
        ("WITH x AS (SELECT a FROM t ORDER BY a) SELECT a FROM x", False),
        ("SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b) ORDER BY a", True),
        ("SELECT border, byline FROM t", False),
    ],
)
def test_orders_result(sql: str, ordered: bool) -> None:
    assert orders_result(sql) is ordered


def test_extract_sql() -> None:
    assert extract_sql("Here:\n```sql\nSELECT 1;\n```\nand better\n```sql\nSELECT 2\n```") == "SELECT 2"
    assert extract_sql("```\nselect name from t\n```") == "select name from t"
    assert extract_sql("<answer>SELECT 3;</answer>") == "SELECT 3"
    assert extract_sql("  WITH x AS (SELECT 1) SELECT * FROM x; ") == "WITH x AS (SELECT 1) SELECT * FROM x"
    assert extract_sql("The answer is 42.") is None
