"""``bench/tool_reply_memory.py --smoke``: every tool family measured on the local backend (and the
python tool in process), each hostile call within its bound, each beside its ordinary call, and the
latency the host SQLite path pays beside its baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.reply_memory import COUNTER_NOISE_BYTES

ROOT = Path(__file__).resolve().parents[1]


def test_tool_reply_memory_smoke(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "tool_reply_memory.py"), "--smoke", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ordinary call" in proc.stdout and "baseline, a connection of this process" in proc.stdout
    got = json.loads(out.read_text())
    rows = {(r["scenario"], r["backend"]): r for r in got["rows"]}
    assert set(rows) == {
        ("python-exception", "local"),
        ("python-exception", "memory"),
        ("python-stdout", "local"),
        ("python-stdout", "memory"),
        ("editor-view", "local"),
        ("sql-postgres", ""),
        ("sql-postgres-explain", ""),
        ("sql-sqlite-host", ""),
    }, proc.stdout
    for r in rows.values():
        # a growth below zero by more than the counters' noise would mean the measurement is broken
        assert -COUNTER_NOISE_BYTES <= r["hostile_bytes"] <= r["bound_bytes"], r
        assert r["ordinary_bytes"] <= r["bound_bytes"], r
    assert got["sqlite_process_ms"] > got["sqlite_inprocess_ms"] > 0
