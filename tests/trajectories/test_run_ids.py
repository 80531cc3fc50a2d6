"""Trajectory ids are unique per run: two collections of the same environment and tasks
with different models (or settings) get different ids and group ids, so pooling their datasets
keeps every row; the same run again gets the same ids, so a resumed collection finds what it wrote;
a dataset written before run keys keeps its ids on resume; readers say when an id repeats with
different content instead of dropping it silently."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.trajectories.helpers import dataset_registry
from toolgym.collect.plan import fingerprint
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.errors import ConfigError
from toolgym.core.rollout.config import EngineConfig, SamplingConfig
from toolgym.core.rollout.requests import plan_episodes
from toolgym.trajectories.store import ReadReport, completed_ids, iter_raw, read_manifest, write_manifest


def _opts(out: Path, model: str, **kw: object) -> CollectOptions:
    return CollectOptions(
        env="counter",
        out=out,
        model=model,
        episodes=3,
        group_size=2,
        sandbox_backend="none",
        env_kwargs={"target": 2},
        **kw,
    )  # type: ignore[arg-type]


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_two_models_pooled_into_one_store_keep_all_rows(tmp_path: Path) -> None:
    reg = dataset_registry()
    await collect(_opts(tmp_path / "scripted", "scripted"), registry=reg)
    await collect(_opts(tmp_path / "sim", "sim:0"), registry=reg)
    a, b = _rows(tmp_path / "scripted" / "trajectories.jsonl"), _rows(tmp_path / "sim" / "trajectories.jsonl")
    assert len(a) == len(b) == 6
    assert not {r["trajectory_id"] for r in a} & {r["trajectory_id"] for r in b}
    assert not {r["group_id"] for r in a} & {r["group_id"] for r in b}, "two runs' groups must not merge"
    for rows in (a, b):  # a group is still one task instance × its samples, same environment seed
        groups: dict[object, set[tuple[object, object]]] = {}
        for r in rows:
            groups.setdefault(r["group_id"], set()).add((r["task_index"], r["seed"]))
        assert len(groups) == 3 and all(len(v) == 1 for v in groups.values())
    pooled = tmp_path / "pooled"
    pooled.mkdir()
    shutil.copy(tmp_path / "scripted" / "trajectories.jsonl", pooled / "trajectories-00000.jsonl")
    shutil.copy(tmp_path / "sim" / "trajectories.jsonl", pooled / "trajectories-00001.jsonl")
    report = ReadReport()
    assert len(list(iter_raw(pooled, report=report))) == 12 and report.duplicates == 0


async def test_settings_that_change_episodes_change_the_ids(tmp_path: Path) -> None:
    reg = dataset_registry()
    base = await _ids(tmp_path / "a", _opts(tmp_path / "a", "scripted"), reg)
    hot = await _ids(
        tmp_path / "b",
        _opts(tmp_path / "b", "scripted", engine=EngineConfig(sampling=SamplingConfig(temperature=0.5))),
        reg,
    )
    kwargs = await _ids(
        tmp_path / "c",
        CollectOptions(**{**_opts(tmp_path / "c", "scripted").__dict__, "env_kwargs": {"target": 3}}),
        reg,
    )
    turns = await _ids(
        tmp_path / "d", _opts(tmp_path / "d", "scripted", engine=EngineConfig(max_turns=5)), reg
    )
    assert len(base | hot | kwargs | turns) == 4 * 6


async def _ids(out: Path, opts: CollectOptions, reg: object) -> set[str]:
    await collect(opts, registry=reg)  # type: ignore[arg-type]
    return completed_ids(out)


async def test_the_same_run_again_gets_the_same_ids_and_resumes(tmp_path: Path) -> None:
    reg = dataset_registry()
    opts = _opts(tmp_path, "sim:0")
    first = await collect(opts, registry=reg)
    ids = completed_ids(tmp_path)
    assert first.written == 6 and len(ids) == 6
    assert read_manifest(tmp_path)["run_key"]  # type: ignore[index]
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))  # a crash after two episodes
    again = await collect(_opts(tmp_path, "sim:0"), registry=reg)
    assert (again.skipped, again.written) == (2, 4)
    assert completed_ids(tmp_path) == ids
    other = _opts(
        tmp_path, "sim:0", engine=EngineConfig(max_turns=5)
    )  # same fingerprint keys, other episodes
    with pytest.raises(ConfigError, match="different run"):
        await collect(other, registry=reg)


async def test_a_dataset_written_before_run_keys_resumes_with_its_own_ids(tmp_path: Path) -> None:
    reg = dataset_registry()
    opts = _opts(tmp_path, "scripted")
    await collect(opts, registry=reg)
    manifest = read_manifest(tmp_path)
    assert manifest is not None
    legacy = {r.trajectory_id: r.group_id for r in plan_episodes("counter", num_tasks=3, group_size=2)}
    rows = _rows(tmp_path / "trajectories.jsonl")
    legacy_ids = list(legacy)
    for r, tid in zip(rows, legacy_ids, strict=True):  # rewrite as the old code stored it
        r["trajectory_id"], r["group_id"] = tid, legacy[tid]
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    manifest.pop("run_key")
    manifest["fingerprint"] = fingerprint(opts)
    write_manifest(tmp_path, manifest)
    again = await collect(_opts(tmp_path, "scripted"), registry=reg)
    assert (again.skipped, again.written) == (4, 2)
    assert completed_ids(tmp_path) == set(legacy_ids)


def test_readers_warn_when_an_id_repeats_with_different_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    asyncio.run(collect(_opts(tmp_path, "scripted"), registry=dataset_registry()))
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    changed = [json.loads(line) for line in lines[:2]]
    for r in changed:
        r["reward"] = 0.25
    (tmp_path / "trajectories-00001.jsonl").write_text(
        lines[2] + "\n" + "".join(json.dumps(r) + "\n" for r in changed)
    )
    report = ReadReport()
    rows = list(iter_raw(tmp_path, report=report))
    assert len(rows) == 6 and report.duplicates == 3 and report.conflicts == 2  # one line is an exact copy
    assert (
        "2 trajectory ids" in report.summary() and "different content" in report.summary()
    )  # the CLI prints it
    with caplog.at_level(logging.WARNING, logger="toolgym"):
        assert len(list(iter_raw(tmp_path))) == 6  # without a report: a logged warning
    assert any(r.getMessage().startswith("2 trajectory ids appear again") for r in caplog.records)
