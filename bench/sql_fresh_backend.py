"""What a fresh PostgreSQL backend per SQL call costs, beside the pool it replaced,
measured in the same run.

``PostgresBackend.query("SELECT count(*) FROM t")`` wall time, p50 and p90 over ``--calls`` calls,
three ways, interleaved call by call so that all three see the same load:

| way          | what a call does                                                                      |
|--------------|---------------------------------------------------------------------------------------|
| ``reset``    | baseline, the former pool: reuse one connection, reset it as DISCARD ALL would |
| ``fresh``    | the shipped pool: a connection opened ahead in the background, closed after the call  |
| ``inline``   | the shipped pool when calls come faster than connections open: connect in the call    |

``--gap-ms`` is the pause between one way's calls (a model's turn; the spare connection opens in
it). Also printed: one connection's cost alone (connect, role check, close). Needs a server
(``$TOOLGYM_POSTGRES_DSN``, else ``scripts/ensure-postgres.sh`` is run).

    python bench/sql_fresh_backend.py [--calls 200] [--gap-ms 30] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from toolgym.plugins.sql import postgres
from toolgym.plugins.sql.postgres import PostgresBackend, create_database, drop_database

DISCARD_ALL = (
    "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD SEQUENCES; DISCARD TEMP"
)
"""The per-call reset of the former pool (one round trip)."""
QUERY = "SELECT count(*) FROM t"


class ResetPool(postgres._Pool):
    """The former pool: a used connection is reset and serves again."""

    async def _retire(self, conn: Any) -> None:
        try:
            await conn.execute(DISCARD_ALL)
        except Exception:
            await conn.close()
            return
        self.idle.append(conn)

    def _replenish(self) -> None:
        pass


class InlinePool(postgres._Pool):
    """The shipped pool with no spare ready: every call opens its own connection."""

    def _replenish(self) -> None:
        pass


def admin_dsn() -> str:
    dsn = os.environ.get("TOOLGYM_POSTGRES_DSN")
    if dsn:
        return dsn
    script = Path(__file__).resolve().parents[1] / "scripts" / "ensure-postgres.sh"
    return (
        subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()[-1]
    )


def backend_with(pool_class: type[postgres._Pool], dsn: str) -> PostgresBackend:
    backend = PostgresBackend(dsn, max_connections=1)
    backend._pool = functools.cache(lambda: pool_class(dsn, 1, backend.connect_timeout_s))  # type: ignore[method-assign]
    return backend


async def connect_once(dsn: str) -> float:
    pool = postgres._Pool(dsn, 1, 5.0)
    start = time.perf_counter()
    conn = await pool._connect(postgres._psycopg())
    await conn.close()
    return time.perf_counter() - start


async def run(calls: int, gap_s: float) -> dict[str, Any]:
    admin = admin_dsn()
    dbname = "toolgym_bench_fresh_backend"
    reader = await create_database(
        admin, dbname, "CREATE TABLE t (v INTEGER); INSERT INTO t SELECT generate_series(1, 100);"
    )
    ways = {
        "reset": backend_with(ResetPool, reader),
        "fresh": backend_with(postgres._Pool, reader),
        "inline": backend_with(InlinePool, reader),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    connects: list[float] = []
    try:
        for backend in ways.values():  # warm-up: the first connection of each
            await backend.query(QUERY)
        await asyncio.sleep(gap_s)
        for _ in range(calls):
            for name, backend in ways.items():
                start = time.perf_counter()
                await backend.query(QUERY)
                times[name].append(time.perf_counter() - start)
            await asyncio.sleep(gap_s)  # every way waited at least gap_s since its own last call
        for _ in range(min(calls, 50)):
            connects.append(await connect_once(reader))
    finally:
        for backend in ways.values():
            await backend.aclose()
        await drop_database(admin, dbname)

    def summary(xs: list[float]) -> dict[str, float]:
        q = statistics.quantiles(xs, n=10)
        return {"p50_ms": round(statistics.median(xs) * 1e3, 2), "p90_ms": round(q[8] * 1e3, 2)}

    return {
        "calls": calls,
        "gap_ms": gap_s * 1e3,
        **{name: summary(xs) for name, xs in times.items()},
        "connect_check_close": summary(connects),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.calls, args.gap_ms / 1e3))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['calls']} calls of {QUERY!r} per way, {result['gap_ms']:g} ms between a way's calls")
    print(f"{'way':30s} {'p50 ms':>8s} {'p90 ms':>8s}")
    for name, label in (
        ("reset", "reset (baseline, before #42)"),
        ("fresh", "fresh backend, opened ahead"),
        ("inline", "fresh backend, opened in call"),
        ("connect_check_close", "a connection alone"),
    ):
        print(f"{label:30s} {result[name]['p50_ms']:8.2f} {result[name]['p90_ms']:8.2f}")


if __name__ == "__main__":
    main()
