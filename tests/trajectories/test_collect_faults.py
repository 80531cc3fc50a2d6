"""Model-server faults at 10 % (5xx, timeouts, resets, truncated and invalid JSON, a restart mid-run):
every episode ends ``ok`` or ``error`` with a reason, nothing is stored twice, and a resume with a
healthy server completes the dataset. The test prints the counts (``pytest -s``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.core.helpers import test_registry
from tests.trajectories.faulty_server import KINDS, FaultyServer
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.tokens.chat import ChatFormat
from toolgym.trajectories import iter_trajectories, verify

EPISODES = 150


def _opts(out: Path, url: str) -> CollectOptions:
    engine = EngineConfig(max_live_episodes=8, llm_timeout_s=0.5, retry_backoff_s=0.1, llm_retries=3)
    return CollectOptions(
        env="counter",
        out=out,
        model=url,
        backend="sglang",
        tokenizer="tiny",
        episodes=EPISODES,
        engine=engine,
        sandbox_backend="none",
        env_kwargs={"target": 1},
    )


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def test_model_server_faults_end_every_episode_with_a_reason(
    tmp_path: Path, qwen_chat: ChatFormat
) -> None:
    ids = qwen_chat.encode("count[1]") + sorted(qwen_chat.eos_token_ids)[:1]
    server = FaultyServer(ids, rate=0.1, seed=3, stall_s=1.5, restart_after=70, down_s=0.2)
    await server.start()
    out = tmp_path / "run"
    try:
        result = await collect(_opts(out, server.url), registry=test_registry())
    finally:
        await server.stop()
    stored, failed = _lines(out / "trajectories.jsonl"), _lines(out / "failures.jsonl")
    stored_ids, failed_ids = [t["trajectory_id"] for t in stored], [t["trajectory_id"] for t in failed]
    reasons: dict[str, int] = {}
    for t in failed:
        assert t["status"] == "error" and t["status_reason"], t["trajectory_id"]
        key = t["status_reason"].split(":")[0][:60]
        reasons[key] = reasons.get(key, 0) + 1
    print(f"\nfault injection: {server.summary()}")
    print(f"episodes: {EPISODES} planned, {len(stored)} ok, {len(failed)} error; error reasons: {reasons}")
    assert result.stopped is None
    assert all(server.injected[k] > 0 for k in KINDS) and server.restarts == 1, server.summary()
    assert len(stored_ids) == len(set(stored_ids)) and len(failed_ids) == len(set(failed_ids))
    assert not set(stored_ids) & set(failed_ids)
    assert len(stored) + len(failed) == EPISODES == result.written + result.failed
    assert all(t["status"] == "ok" for t in stored)
    assert verify(iter_trajectories(out)).ok  # retried calls leave no trace in the token record

    healthy = FaultyServer(ids, rate=0.0)
    healthy.port = server.port
    await healthy.start()
    try:
        again = await collect(_opts(out, healthy.url), registry=test_registry())
    finally:
        await healthy.stop()
    final = [t["trajectory_id"] for t in _lines(out / "trajectories.jsonl")]
    print(
        f"resume with a healthy server: {again.written} written, {again.skipped} already there, {again.failed} failed"
    )
    assert again.failed == 0 and again.written == len(failed)
    assert len(final) == EPISODES == len(set(final))
