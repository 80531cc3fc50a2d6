"""How much memory one hostile tool call makes the host process hold.

Each scenario runs in a fresh Python (``python -m tests.reply_memory SCENARIO ...``), so that no
earlier test's freed memory hides the growth: it sets the tool up, makes one ordinary call to warm
every path, then measures one more ordinary call (the baseline) and one hostile call. A call's
growth is its peak resident set minus the resident set before it: the peak is reset just before
the call (``/proc/self/clear_refs`` ``5``, Linux 4.0+) and read after it (``VmHWM``). Sandboxes,
SQLite runners and database servers are other processes: only what this process holds counts.

The attack tests (``tests/sandboxes/test_reply_memory.py``, ``tests/plugins/sql/test_sql_reply_memory.py``,
``tests/plugins/swe/test_swe_editor_memory.py``) and ``bench/tool_reply_memory.py`` run these
scenarios. Each bound is stated here with its reasons; none imports the code it checks, so that
an attack test fails on an assertion, not an import, where the code has no cap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024

SLACK_BYTES = 16 * MiB
"""What one call may add besides its reply: asyncio's and JSON's transient objects, a thread's
first stack pages, allocator arenas. The ordinary call beside it grows the process by under
1 MiB here (bench/tool_reply_memory.py prints it), so 16 MiB is headroom, not a hiding place:
every hostile call measured before the caps grew it by 200 MiB or more."""

PYTHON_MAX_OUTPUT = 256 * 1024
"""The ``python`` sandbox profile's ``max_output_bytes`` (the default profile): each of stdout,
stderr, value, error and traceback is cut to this at its source."""
PYTHON_REPLY_BYTES = 5 * 6 * (PYTHON_MAX_OUTPUT + 1024) + 4096
"""Largest reply of one Python cell on the agent channel: five text fields of at most
``max_output`` characters (plus a one-line marker), 6 bytes a character at worst once JSON
escapes a control character (``\\u0000``), and the envelope."""
EDITOR_READ_BYTES = 1 * MiB
"""Most bytes of a file the editor's ``view`` reads whole; a larger file is viewed from a bounded
excerpt read in the sandbox."""
EDITOR_REPLY_BYTES = 4 * EDITOR_READ_BYTES // 3 + 4096
"""That read on the channel (base64) and its envelope."""
SQL_DISPLAY_BYTES = 1 * MiB
"""Most bytes of rows a display query (what ``sql_query`` shows) brings to the host."""

HOSTILE_MESSAGE_CHARS = 100_000_000
"""The hostile payloads' size: 100 MB of text."""


def bound(reply_bytes: int, *, own_bytes: int = 0) -> int:
    """The growth one call may cause: twice its largest reply (the bytes read and the objects
    decoded from them live together for a moment), the slack, and ``own_bytes`` that the call's
    own code holds in this process by construction (in-process cells only)."""
    return 2 * reply_bytes + SLACK_BYTES + own_bytes


@dataclass
class Measurement:
    scenario: str
    backend: str
    ordinary_bytes: int
    """Growth of the ordinary (small) call: the baseline of the same run."""
    hostile_bytes: int
    """Growth of the hostile call."""
    bound_bytes: int
    observation: str
    """What the model reads of the hostile call (its first and last 1000 characters when longer)."""
    observation_chars: int
    notes: list[str]
    """The observation's lines that say what was cut (``omitted``, ``truncated``, ``cut at``)."""
    error: bool
    seconds: float

    @property
    def within(self) -> bool:
        return self.hostile_bytes <= self.bound_bytes


# -- the scenarios (run in the child) ---------------------------------------------------------------

Call = Callable[[], Awaitable[Any]]


class Scenario:
    """Set up, an ordinary call, a hostile call, tear down; ``bound_bytes`` after ``setup``."""

    bound_bytes = 0

    async def setup(self) -> None: ...

    async def ordinary(self) -> Any: ...

    async def hostile(self) -> Any: ...

    async def teardown(self) -> None: ...


def _backend(name: str) -> Any:
    if name == "memory":
        from toolgym.sandboxes.memory import MemoryBackend

        return MemoryBackend()
    if name == "docker":
        from toolgym.sandboxes.docker.backend import DockerBackend

        return DockerBackend(max_idle=1)
    from toolgym.sandboxes.local.backend import LocalBackend

    return LocalBackend(max_idle=1)


PYTHON_HOSTILE = {
    "exception": f"raise ValueError('x' * {HOSTILE_MESSAGE_CHARS})",
    "stdout": "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(100):\n    sys.stdout.write(chunk)",
    "value": f"'x' * {HOSTILE_MESSAGE_CHARS}",
    # the cell writes its own reply frame on the interpreter's control socket, past the interpreter's caps
    "forged": (
        "import json, socket, struct, sys\n"
        "s = socket.socket(fileno=int(sys.argv[1]))\n"
        f"body = json.dumps({{'value': None, 'error': 'x' * {HOSTILE_MESSAGE_CHARS}, 'traceback': None}}).encode()\n"
        "s.sendall(struct.pack('>I', len(body)) + body)\n"
        "del body\n"
        "import time; time.sleep(1)"
    ),
}


class PythonTool(Scenario):
    """The ``python`` tool on a sandbox backend (``docker``, ``local``) or the in-process one (``memory``)."""

    def __init__(self, backend: str, attack: str) -> None:
        self.backend_name, self.attack = backend, attack
        if backend == "memory":
            # the cell runs in this process: what it builds is held here by construction (the 100 MB
            # message; a value and the repr a REPL must make of it, twice that)
            own = {"stdout": 0, "exception": HOSTILE_MESSAGE_CHARS, "value": 2 * HOSTILE_MESSAGE_CHARS}[
                attack
            ]
            self.bound_bytes = bound(PYTHON_REPLY_BYTES, own_bytes=own)
        else:
            self.bound_bytes = bound(PYTHON_REPLY_BYTES)

    async def setup(self) -> None:
        from toolgym.plugins.code.tools import python

        self.tool = python
        self.backend = _backend(self.backend_name)
        self.sandbox = await self.backend.acquire("python", episode_id="reply-memory")

    async def _run(self, code: str) -> Any:
        return await self.tool.call({"code": code}, sandbox=self.sandbox)

    async def ordinary(self) -> Any:
        return await self._run("print(6 * 7)")

    async def hostile(self) -> Any:
        return await self._run(PYTHON_HOSTILE[self.attack])

    async def teardown(self) -> None:
        await self.backend.release(self.sandbox)
        await self.backend.aclose()


class EditorView(Scenario):
    """``str_replace_editor view`` of a 60 MB file in the sandbox."""

    FILE = "/workspace/big.txt"

    def __init__(self, backend: str) -> None:
        self.backend_name = backend
        self.bound_bytes = bound(EDITOR_REPLY_BYTES)

    async def setup(self) -> None:
        from toolgym.plugins.swe.tools import str_replace_editor

        self.tool = str_replace_editor
        self.backend = _backend(self.backend_name)
        self.sandbox = await self.backend.acquire("shell", episode_id="reply-memory")
        made = await self.sandbox.run(
            f"python3 -c \"open('{self.FILE}', 'w').write(('x' * 99 + chr(10)) * 600_000)\" && "
            "printf 'def f(x):\\n    return x\\n' > /workspace/small.py",
            timeout=60,
        )
        assert made.exit_code == 0, made

    async def ordinary(self) -> Any:
        return await self.tool.call({"command": "view", "path": "/workspace/small.py"}, sandbox=self.sandbox)

    async def hostile(self) -> Any:
        return await self.tool.call({"command": "view", "path": self.FILE}, sandbox=self.sandbox)

    async def teardown(self) -> None:
        await self.backend.release(self.sandbox)
        await self.backend.aclose()


class PostgresQuery(Scenario):
    """``sql_query`` on PostgreSQL: six rows of a 200 MB text each, or (``explain``) a plan line
    naming a 100 MB constant the planner folded."""

    HOSTILE = "SELECT repeat('x', 200000000) FROM generate_series(1, 6)"
    EXPLAIN = "EXPLAIN VERBOSE SELECT repeat('x', 100000000)"

    def __init__(self, dsn: str, *, explain: bool = False) -> None:
        self.dsn = dsn
        self.bound_bytes = bound(SQL_DISPLAY_BYTES)
        self.query = self.EXPLAIN if explain else self.HOSTILE

    async def setup(self) -> None:
        from toolgym.plugins.sql.postgres import PostgresBackend
        from toolgym.plugins.sql.tools import make_sql_tools

        self.db = PostgresBackend(self.dsn)
        self.tool, _ = make_sql_tools(self.db, sandbox=False, timeout_s=20.0)

    async def ordinary(self) -> Any:
        return await self.tool.call({"query": "SELECT 1 AS one, 'a' AS letter"})

    async def hostile(self) -> Any:
        return await self.tool.call({"query": self.query})

    async def teardown(self) -> None:
        await self.db.aclose()


class SQLiteHostQuery(Scenario):
    """``sql_query`` on SQLite from the host (no sandbox): four 400 MB BLOBs."""

    HOSTILE = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 4) "
        "SELECT zeroblob(400000000) FROM c"
    )

    def __init__(self) -> None:
        self.bound_bytes = bound(SQL_DISPLAY_BYTES)

    async def setup(self) -> None:
        import sqlite3

        from toolgym.plugins.sql.backends import SQLiteBackend
        from toolgym.plugins.sql.tools import make_sql_tools

        self.tmp = tempfile.TemporaryDirectory()
        path = Path(self.tmp.name) / "db.sqlite"
        conn = sqlite3.connect(path)
        conn.executescript("CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'one'), (2, 'two');")
        conn.commit()
        conn.close()
        self.db = SQLiteBackend(path)
        self.tool, _ = make_sql_tools(self.db, sandbox=False, timeout_s=20.0)

    async def ordinary(self) -> Any:
        return await self.tool.call({"query": "SELECT a, b FROM t ORDER BY a"})

    async def hostile(self) -> Any:
        return await self.tool.call({"query": self.HOSTILE})

    async def teardown(self) -> None:
        await self.db.aclose()
        self.tmp.cleanup()


SCENARIOS = (
    "python-exception",
    "python-stdout",
    "python-value",
    "python-forged",
    "editor-view",
    "sql-postgres",
    "sql-postgres-explain",
    "sql-sqlite-host",
)


def make_scenario(name: str, backend: str, dsn: str) -> Scenario:
    if name.startswith("python-"):
        return PythonTool(backend, name.removeprefix("python-"))
    if name == "editor-view":
        return EditorView(backend)
    if name in ("sql-postgres", "sql-postgres-explain"):
        return PostgresQuery(dsn, explain=name.endswith("explain"))
    if name == "sql-sqlite-host":
        return SQLiteHostQuery()
    raise SystemExit(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


COUNTER_NOISE_BYTES = 1 * MiB
"""How far a growth read here can fall below zero. Since Linux 6.2 the resident-set counters are
per-CPU counters that ``/proc`` reads without folding in each CPU's pending pages (up to a batch of
pages per CPU), so two readings around a call that allocates nothing can differ by a few pages
either way; -4 KiB has been seen. Tests accept a growth down to minus this, no lower."""


def _reset_peak() -> int:
    """Start the peak (``VmHWM``) again from the current resident set; that resident set, read as the
    new peak (a resident set read before the reset can be a page above it: another thread freed one
    in between)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_bytes("VmHWM")


async def _growth(call: Call) -> tuple[int, Any]:
    """(peak resident bytes above the resident set before the call, what the call returned)."""
    before = _reset_peak()
    out = await call()
    return _status_bytes("VmHWM") - before, out


async def run_child(name: str, backend: str, dsn: str) -> Measurement:
    scenario = make_scenario(name, backend, dsn)
    await scenario.setup()
    try:
        await scenario.ordinary()  # warms every path (imports, connections, the interpreter)
        ordinary, _ = await _growth(scenario.ordinary)
        start = time.perf_counter()
        hostile, out = await _growth(scenario.hostile)
        seconds = time.perf_counter() - start
    finally:
        await scenario.teardown()
    text = str(getattr(out, "text", out))
    shown = text if len(text) <= 2000 else f"{text[:1000]}\n<<...>>\n{text[-1000:]}"
    notes = [
        line[:500] for line in text.splitlines() if any(w in line for w in ("omitted", "truncated", "cut at"))
    ]
    return Measurement(
        name,
        backend,
        ordinary,
        hostile,
        scenario.bound_bytes,
        shown,
        len(text),
        notes[:10],
        bool(getattr(out, "error", False)),
        seconds,
    )


# -- the parent side --------------------------------------------------------------------------------


def measure(name: str, *, backend: str = "", dsn: str = "", timeout_s: float = 240.0) -> Measurement:
    """Run scenario ``name`` in a fresh Python and return what it measured."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reply_memory", name, "--backend", backend, "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"scenario {name} ({backend or 'host'}) failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return Measurement(**json.loads(lines[-1]))


def mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


def explain(m: Measurement) -> str:
    """One measurement, for an assertion message."""
    return (
        f"{m.scenario} ({m.backend or 'host'}): the hostile call grew the host process by {mib(m.hostile_bytes)} "
        f"(bound {mib(m.bound_bytes)}; an ordinary call {mib(m.ordinary_bytes)}); the model read "
        f"{m.observation_chars} characters: {m.notes or m.observation[:300]!r}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--backend", default="")
    parser.add_argument("--dsn", default="")
    args = parser.parse_args()
    result = asyncio.run(run_child(args.scenario, args.backend, args.dsn))
    print(json.dumps(asdict(result)), flush=True)


if __name__ == "__main__":
    main()
