"""Collection at scale: shards from several processes into one directory, per-shard resume,
merged manifests, the writer lock, prompt deduplication and what the manifest records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trajectories.helpers import PLUGINS, REPO, dataset_registry
from toolgym.collect.run import CollectOptions, collect, parse_shard
from toolgym.core.errors import ConfigError
from toolgym.core.rollout.config import EngineConfig
from toolgym.trajectories.dedup import dedup_dataset
from toolgym.trajectories.store import TrajectoryWriter, completed_ids, dataset_manifest, iter_raw


def _cmd(out: Path, shard: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "toolgym",
        "collect",
        "--env",
        "counter",
        "--model",
        "scripted",
        "--env-arg",
        "target=2",
        "--episodes",
        "40",
        "--group-size",
        "2",
        "--concurrency",
        "4",
        "--out",
        str(out),
        "--no-progress",
        "--sandbox-backend",
        "none",
        "--shard",
        shard,
    ]


def test_two_processes_collect_shards_into_one_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "TOOLGYM_PLUGINS": PLUGINS, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            _cmd(out, f"{k}/2"),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in (0, 1)
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sorted(p.name for p in out.glob("trajectories*.jsonl")) == [
        "trajectories-00000.jsonl",
        "trajectories-00001.jsonl",
    ]
    ids = [
        json.loads(line)["trajectory_id"]
        for f in sorted(out.glob("trajectories-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert len(ids) == 80 and len(set(ids)) == 80  # the union is complete and duplicate-free
    for k in (0, 1):  # each shard holds exactly its task instances
        tasks = {
            json.loads(line)["task_index"] % 2
            for line in (out / f"trajectories-{k:05d}.jsonl").read_text().splitlines()
        }
        assert tasks == {k}
    merged = dataset_manifest(out)
    assert merged["state"] == "complete" and merged["written"] == 80 and merged["num_shards"] == 2
    assert sorted(merged["shards"]) == ["0", "1"] and merged["shards"]["1"]["planned_trajectories"] == 40
    assert all("40 trajectories written" in o.replace("\n", " ") for o in outputs)


async def test_shard_resume_in_process_and_guards(tmp_path: Path) -> None:
    reg = dataset_registry()
    opts = CollectOptions(
        env="counter",
        out=tmp_path,
        model="scripted",
        episodes=10,
        group_size=1,
        sandbox_backend="none",
        env_kwargs={"target": 1},
        shard=(1, 3),
    )
    first = await collect(opts, registry=reg)
    assert first.written == 3 and first.planned == 3  # tasks 1, 4, 7
    with TrajectoryWriter(tmp_path, shard=1):  # a live writer of shard 1 ...
        with pytest.raises(ConfigError, match="another process is writing shard 1"):
            await collect(opts, registry=reg)  # ... refuses a second one
    opts.shard = (0, 3)
    await collect(opts, registry=reg)
    merged = dataset_manifest(tmp_path)
    assert merged["state"] == "incomplete" and sorted(merged["shards"]) == [
        "0",
        "1",
    ]  # shard 2 of 3 has not run
    opts.shard = None  # an unsharded run finishes the rest and skips what the shards stored
    rest = await collect(opts, registry=reg)
    assert rest.skipped == 7 and rest.written == 3 and len(completed_ids(tmp_path)) == 10
    merged = dataset_manifest(tmp_path)
    assert merged["state"] == "complete" and merged["written"] == 10
    opts.shard, opts.overwrite = (0, 3), True
    with pytest.raises(ConfigError, match="--overwrite cannot be combined with --shard"):
        await collect(opts, registry=reg)
    for bad in ("3/3", "1", "a/b", "-1/2"):
        with pytest.raises(ConfigError, match="K/N"):
            parse_shard(bad)


async def test_dedup_prompt_at_collection_and_after(tmp_path: Path) -> None:
    reg = dataset_registry()
    plain = CollectOptions(
        env="echo-dup",
        out=tmp_path / "plain",
        model="scripted",
        episodes=7,
        group_size=2,
        sandbox_backend="none",
    )
    await collect(plain, registry=reg)
    assert len(list(iter_raw(tmp_path / "plain"))) == 14
    deduped = CollectOptions(**{**plain.__dict__, "out": tmp_path / "dedup", "dedup": "prompt"})
    result = await collect(deduped, registry=reg)
    assert result.written == 6 and result.duplicates == 8  # 3 distinct prompts × 2 samples
    kept = {r["task_index"] for r in iter_raw(tmp_path / "dedup")}
    assert kept == {0, 1, 2}  # the first instance of each prompt wins
    assert dataset_manifest(tmp_path / "dedup")["dedup"]["dropped_groups"] == 4
    again = await collect(deduped, registry=reg)  # resume: nothing new, nothing doubled
    assert again.written == 0 and again.skipped == 6
    # post-hoc: the same rule on the plain dataset, and id dedup of a directory with a repeated line
    lines = (tmp_path / "plain" / "trajectories.jsonl").read_text().splitlines()
    (tmp_path / "plain" / "trajectories-00009.jsonl").write_text(lines[0] + "\n")  # the same id stored twice
    by_id = dedup_dataset(tmp_path / "plain", tmp_path / "by_id", by="id")
    assert (by_id.kept, by_id.dropped_ids) == (14, 1)
    by_prompt = dedup_dataset(tmp_path / "plain", tmp_path / "by_prompt", by="prompt")
    assert (by_prompt.kept, by_prompt.dropped, by_prompt.dropped_groups) == (6, 8, 4)
    assert {r["task_index"] for r in iter_raw(tmp_path / "by_prompt")} == {0, 1, 2}
    with pytest.raises(ConfigError, match="already holds trajectories"):
        dedup_dataset(tmp_path / "plain", tmp_path / "by_prompt")


async def test_manifest_records_model_sampling_versions(tmp_path: Path) -> None:
    reg = dataset_registry()
    opts = CollectOptions(
        env="adder",
        out=tmp_path,
        model="scripted",
        episodes=2,
        sandbox_backend="none",
        backend_options={"api_key": "sk-secret"},
        engine=EngineConfig(max_tokens_per_turn=77),
    )
    await collect(opts, registry=reg)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["state"] == "complete" and m["written"] == 2 and m["policy"] == "scripted"
    assert m["model"]["arg"] == "scripted" and m["model"]["backend_options"] == {"api_key": "<redacted>"}
    assert m["sampling"]["temperature"] == 1.0 and m["sampling"]["max_tokens_per_turn"] == 77
    envd = m["environment"]
    assert envd["name"] == "adder" and envd["parser"] == "hermes" and envd["entry"].endswith(":AdderEnv")
    assert [t["name"] for t in envd["tools"]] == ["add"] and envd["tools"][0][
        "module"
    ] == "tests.trajectories.helpers"
    assert (
        m["plugin_packages"]["parsers"]["package"]["name"] == "toolgym"
    )  # the installed distribution and its version
    assert (
        m["plugin_packages"]["dataset"]["package"] is None
    )  # a checkout-only module belongs to no distribution
    assert m["toolgym_version"].startswith("0.") and m["runtime"]["libraries"]["pyarrow"]
    assert m["fingerprint"]["dedup"] == "none" and m["num_shards"] == 1


async def test_the_policy_is_made_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Model clients probe their server with blocking requests when they are made; made on the loop,
    a server answering on that same loop sat out every probe's 10 s timeout."""
    import threading

    import toolgym.collect.run as collect_module

    made_on: list[threading.Thread] = []
    real = collect_module.make_policy

    def recording(*args: object, **kwargs: object) -> object:
        made_on.append(threading.current_thread())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(collect_module, "make_policy", recording)
    loop_thread = threading.current_thread()
    opts = CollectOptions(
        env="counter",
        out=tmp_path,
        model="scripted",
        episodes=2,
        group_size=1,
        sandbox_backend="none",
        env_kwargs={"target": 1},
    )
    result = await collect(opts, registry=dataset_registry())
    assert result.written == 2
    assert made_on and made_on[0] is not loop_thread
