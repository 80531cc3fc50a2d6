"""The JSONL store: crash-safe append, repair of a torn last line, resume without loss or duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.core.helpers import test_registry
from toolgym import EngineConfig, RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.trajectories import iter_trajectories, read_parquet, verify, write_parquet
from toolgym.trajectories.store import TrajectoryWriter, completed_ids, iter_raw

REPO = Path(__file__).resolve().parents[2]


async def _some_trajectories(chat: ChatFormat, n: int = 4) -> list:
    out: list = []
    engine = RolloutEngine(
        registry=test_registry(), policy=ScriptedPolicy(chat), config=EngineConfig(), on_trajectory=out.append
    )
    await engine.run(plan_episodes("counter", num_tasks=n // 2, group_size=2))
    return out


async def test_write_read_and_repair(tmp_path: Path, qwen_chat: ChatFormat) -> None:
    trajs = await _some_trajectories(qwen_chat)
    with TrajectoryWriter(tmp_path) as w:
        for t in trajs:
            w.write(t)
    path = tmp_path / "trajectories.jsonl"
    with path.open("ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"schema_version":1,"trajectory_id":"torn","gro')
    assert [t["trajectory_id"] for t in iter_raw(tmp_path)] == [t.trajectory_id for t in trajs]
    assert completed_ids(tmp_path) == {t.trajectory_id for t in trajs}
    w2 = TrajectoryWriter(tmp_path)
    assert w2.repaired_bytes > 0
    w2.write(trajs[0])  # a duplicate line is ignored when reading
    w2.close()
    back = list(iter_trajectories(tmp_path))
    assert [t.trajectory_id for t in back] == [t.trajectory_id for t in trajs]
    assert back[0] == trajs[0]
    assert verify(back).ok


async def test_parquet_round_trip(tmp_path: Path, qwen_chat: ChatFormat) -> None:
    trajs = await _some_trajectories(qwen_chat, 6)
    assert write_parquet(trajs, tmp_path / "d.parquet", row_group_size=2) == 6
    back = list(read_parquet(tmp_path / "d.parquet", batch_size=4))
    assert [t.model_dump() for t in back] == [t.model_dump() for t in trajs]


def _collect_cmd(out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "toolgym",
        "collect",
        "--env",
        "counter",
        "--model",
        "sim:0.03",
        "--backend-arg",
        "text=count[1]",
        "--env-arg",
        "target=1",
        "--episodes",
        "150",
        "--group-size",
        "2",
        "--concurrency",
        "4",
        "--out",
        str(out),
        "--no-progress",
        "--sandbox-backend",
        "none",
    ]


def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "TOOLGYM_PLUGINS": "tests.core.helpers:TestPlugin", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        _collect_cmd(out), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    data = out / "trajectories.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        if data.exists() and data.read_bytes().count(b"\n") >= 20:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = data.read_bytes().count(b"\n")
    assert 20 <= partial < 300, "the kill must land mid-run"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "running"  # it never got to say it finished

    done = subprocess.run(_collect_cmd(out), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"{300 - partial} trajectories written" in done.stderr.replace("\n", " ")
        or "trajectories written" in done.stderr
    )
    ids = [json.loads(line)["trajectory_id"] for line in data.read_text().splitlines()]
    assert len(ids) == 300 and len(set(ids)) == 300
    assert json.loads((out / "manifest.json").read_text())["state"] == "complete"
    rerun = subprocess.run(_collect_cmd(out), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert "0 trajectories written" in rerun.stderr and "300 already there" in rerun.stderr


def test_changed_settings_refuse_to_mix(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "TOOLGYM_PLUGINS": "tests.core.helpers:TestPlugin", "PYTHONPATH": str(REPO)}
    cmd = _collect_cmd(out)
    cmd[cmd.index("150")] = "3"
    assert subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=120).returncode == 0
    cmd[cmd.index("sim:0.03")] = "scripted"
    bad = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "holds a different run (differs in: model)" in bad.stderr
