"""One ``sql_query`` call cannot make the host process hold hundreds of MB.

The attacks (a fresh Python each, ``tests/reply_memory.py``), bound 2 x 1 MiB (a display's byte
budget) + 16 MiB of slack:

- PostgreSQL, ``SELECT repeat('x', 200000000) FROM generate_series(1, 6)``: rows were kept whole up
  to ``max_rows + 1`` (1.5 GiB here). Now the server cuts each cell (``pg_bound``: the statement
  as a derived table, each column wrapped), so no row larger than the cut ever leaves it.
- PostgreSQL, ``EXPLAIN VERBOSE SELECT repeat('x', 100000000)``: the plan names the 100 MB constant
  the planner folded, in one line (286 MiB here). An EXPLAIN cannot be a derived table; it now runs
  in a process of its own, limited to 1 GiB, which sends back only the cut rows (``pg_explain``).
- SQLite from the host, ``SELECT zeroblob(400000000)`` four times: 1.9 GiB. Now the statement runs
  in a process of its own limited to 512 MiB, and answers with an error saying so.

``test_sql_bounded_results.py`` checks that the bounded results read as the statements alone.
"""

from __future__ import annotations

from tests.reply_memory import explain, measure
from toolgym.plugins.sql.render import CELL_CHARS


def test_a_hostile_postgres_query_holds_little_on_the_host(postgres_db: tuple[str, str, str]) -> None:
    m = measure("sql-postgres", dsn=postgres_db[1])
    assert m.hostile_bytes <= m.bound_bytes, explain(m)
    lines = m.observation.splitlines()
    assert not m.error and lines[0] == "repeat" and lines[-1] == "(6 rows)", explain(m)
    assert all(len(row) == CELL_CHARS and row.endswith("…") for row in lines[1:-1]), explain(m)


def test_a_hostile_explain_holds_little_on_the_host(postgres_db: tuple[str, str, str]) -> None:
    m = measure("sql-postgres-explain", dsn=postgres_db[1])
    assert m.hostile_bytes <= m.bound_bytes, explain(m)
    lines = m.observation.splitlines()
    assert not m.error and lines[0] == "QUERY PLAN" and lines[2].startswith("  Output: 'xxx"), explain(m)
    assert len(lines[2]) == CELL_CHARS and lines[2].endswith("…"), explain(m)


def test_a_hostile_sqlite_query_holds_little_on_the_host() -> None:
    m = measure("sql-sqlite-host")
    assert m.hostile_bytes <= m.bound_bytes, explain(m)
    assert m.error and "needed more than the 512 MiB of memory a query may use" in m.observation, explain(m)
