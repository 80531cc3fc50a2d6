"""Host memory per hostile tool call, beside an ordinary call and the bound.

For each tool family, one fresh Python (``tests/reply_memory.py``) sets the tool up, makes an
ordinary small call to warm it, then measures the peak resident growth of this host process
during one more ordinary call (the baseline, same run) and during one hostile call:

- python tool, exception: ``raise ValueError('x' * 100_000_000)``
- python tool, stdout: 100 MB printed
- editor view: ``str_replace_editor view`` of a 60 MB file
- sql postgres: ``SELECT repeat('x', 200000000) FROM generate_series(1, 6)``
- sql postgres EXPLAIN: ``EXPLAIN VERBOSE SELECT repeat('x', 100000000)`` (a folded 100 MB constant)
- sql sqlite host path: ``SELECT zeroblob(400000000)`` four times, no sandbox

The python tool and the editor run on the ``docker`` and ``local`` backends (and the python tool
on the in-process ``memory`` test double, where the cell's own 100 MB counts by construction).
The bound is the attack tests' (twice the largest reply the call may bring, plus 16 MiB).
Before the caps (same machine): exception 573 MiB (docker and local), 381 MiB (memory); stdout
1 MiB (docker, local), 97 MiB (memory); editor view 424 MiB; postgres 1527 MiB, its EXPLAIN 286 MiB;
sqlite 1907 MiB.
Also printed: the latency a host SQLite query pays for its own process, beside a query on a
connection of this process (what the host path did before).

    .venv/bin/python bench/tool_reply_memory.py [--smoke] [--backends docker,local,memory] [--dsn DSN] [--json OUT]

``--smoke``: the local backend only (and the memory one for the python tool), a few latency samples.
PostgreSQL: ``--dsn`` (a read-only role's), else a throw-away database on the server
``scripts/ensure-postgres.sh`` runs (skipped, with a line saying so, when none answers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reply_memory import Measurement, measure, mib  # noqa: E402

FAMILIES = [
    ("python-exception", "python tool: exception", ("docker", "local", "memory")),
    ("python-stdout", "python tool: stdout", ("docker", "local", "memory")),
    ("editor-view", "editor view", ("docker", "local")),
    ("sql-postgres", "sql: postgres", ("",)),
    ("sql-postgres-explain", "sql: postgres EXPLAIN", ("",)),
    ("sql-sqlite-host", "sql: sqlite host path", ("",)),
]


def postgres_dsn(given: str) -> tuple[str, str, str]:
    """(reader DSN, admin DSN, database to drop) of a throw-away database, or ``given`` as it is."""
    if given:
        return given, "", ""
    admin = os.environ.get("TOOLGYM_TEST_POSTGRES_DSN") or os.environ.get("TOOLGYM_POSTGRES_DSN") or ""
    if not admin:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "ensure-postgres.sh")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        admin = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else ""
    if not admin:
        return "", "", ""
    from toolgym.plugins.sql.postgres import create_database

    name = f"toolgym_bench_{uuid.uuid4().hex[:8]}"
    return asyncio.run(create_database(admin, name, "CREATE TABLE t (a INTEGER);")), admin, name


def drop(admin: str, name: str) -> None:
    if admin and name:
        from toolgym.plugins.sql.postgres import drop_database

        asyncio.run(drop_database(admin, name))


def backend_problem(name: str) -> str | None:
    if name in ("", "memory"):
        return None
    from tests.sandboxes.helpers import backend_problem as problem

    found = problem(name)
    if found is None and name == "docker":
        from tests.sandboxes.helpers import ensure_images

        ensure_images("python", "shell")
    return found


def sqlite_latency(samples: int) -> tuple[list[float], list[float]]:
    """Seconds per small query: the host path (a process of its own) and a connection of this process."""
    from toolgym.plugins.sql import readonly_sqlite
    from toolgym.plugins.sql.backends import SQLiteBackend

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db.sqlite"
        conn = sqlite3.connect(path)
        conn.executescript("CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'one'), (2, 'two');")
        conn.commit()
        conn.close()
        db = SQLiteBackend(path)
        sql = "SELECT a, b FROM t ORDER BY a"

        async def host_path() -> list[float]:
            out = []
            for _ in range(samples):
                start = time.perf_counter()
                await db.query(sql, cell_chars=200)
                out.append(time.perf_counter() - start)
            return out

        process = asyncio.run(host_path())
        inproc = []
        same = readonly_sqlite.connect(path)
        for _ in range(samples):
            start = time.perf_counter()
            readonly_sqlite.execute(same, sql, 50, 5.0)
            inproc.append(time.perf_counter() - start)
        same.close()
    return process, inproc


def summary(m: Measurement) -> str:
    """What the model read, in one short line: the line saying what was cut, else the first row and the last line."""
    if m.notes:
        return m.notes[0][:100]
    lines = m.observation.splitlines() or [""]
    if len(lines) < 3:
        return lines[0][:100]
    return f"{lines[1][:12]}...{lines[1][-12:]} ({len(lines[1])} characters a row) ... {lines[-1]}"[:100]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="local backend only, a few latency samples")
    parser.add_argument("--backends", default="docker,local,memory")
    parser.add_argument(
        "--dsn", default="", help="a PostgreSQL DSN of a read-only role (default: a throw-away database)"
    )
    parser.add_argument("--json", default="", help="write the rows here")
    args = parser.parse_args()
    wanted = {"local", "memory"} if args.smoke else set(args.backends.split(","))
    print(
        f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; growth = peak resident set of the "
        "host process during one call, above its resident set before it",
        flush=True,
    )
    dsn, admin, dbname = postgres_dsn(args.dsn)
    rows: list[Measurement] = []
    header = f"{'tool family':<24} {'backend':<8} {'ordinary call':>14} {'hostile call':>13} {'bound':>10}  what the model read"
    print(header)
    print("-" * len(header))
    try:
        for scenario, label, backends in FAMILIES:
            for backend in backends:
                if backend and backend not in wanted:
                    continue
                problem = backend_problem(backend)
                if scenario.startswith("sql-postgres") and not dsn:
                    problem = "no PostgreSQL server answers (--dsn, or scripts/ensure-postgres.sh)"
                if problem:
                    print(f"{label:<24} {backend or 'host':<8} skipped: {problem}", flush=True)
                    continue
                m = measure(scenario, backend=backend, dsn=dsn)
                rows.append(m)
                note = summary(m)
                flag = "" if m.within else "  OVER THE BOUND"
                print(
                    f"{label:<24} {backend or 'host':<8} {mib(m.ordinary_bytes):>14} {mib(m.hostile_bytes):>13} "
                    f"{mib(m.bound_bytes):>10}  {note}{flag}",
                    flush=True,
                )
    finally:
        drop(admin, dbname)
    process, inproc = sqlite_latency(5 if args.smoke else 50)
    p_ms, i_ms = statistics.median(process) * 1e3, statistics.median(inproc) * 1e3
    print(
        f"\nsqlite host query latency p50: {p_ms:.1f} ms in a process of its own (now) | baseline, a connection of "
        f"this process (before): {i_ms:.2f} ms (n={len(process)})"
    )
    if args.json:
        out: dict[str, Any] = {
            "rows": [asdict(r) for r in rows],
            "sqlite_process_ms": p_ms,
            "sqlite_inprocess_ms": i_ms,
        }
        Path(args.json).write_text(json.dumps(out, indent=1))
    if any(not r.within for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
