"""Collections on a local Ray cluster: complete, spread over worker processes, bounded in flight,
resumable, and whole after workers are killed mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.conftest import ROOT
from tests.distributed.envs import LOOKUP_CALL, PYTHON_CALL, registry
from toolgym import hookimpl
from toolgym.collect.plan import collection_run_key
from toolgym.collect.ray import RayOptions, collect_ray
from toolgym.collect.ray.driver import worker_name
from toolgym.collect.run import CollectOptions
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import plan_episodes
from toolgym.trajectories.store import read_manifest

pytestmark = pytest.mark.slow
FACTORY = "tests.distributed.envs:registry"


def options(
    out: Path,
    *,
    episodes: int,
    env: str = "relay",
    latency: float = 0.05,
    live: int = 4,
    turns: int = 3,
    group: int = 2,
    sandbox: str = "none",
    text: str = LOOKUP_CALL,
) -> CollectOptions:
    engine = EngineConfig(max_live_episodes=live, max_turns=turns + 2, max_tokens_per_turn=64)
    return CollectOptions(
        env=env,
        out=out,
        model=f"sim:{latency}",
        episodes=episodes,
        group_size=group,
        engine=engine,
        sandbox_backend=sandbox,
        env_kwargs={"turns": turns},
        backend_options={"text": text},
    )


def on_ray(workers: int, **kw: Any) -> RayOptions:
    return RayOptions(
        address="local", num_workers=workers, registry=FACTORY, env_vars={"PYTHONPATH": str(ROOT)}, **kw
    )


def stored(out: Path, name: str = "trajectories.jsonl") -> list[dict[str, Any]]:
    path = out / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def planned_ids(opts: CollectOptions) -> list[str]:
    plan = plan_episodes(
        opts.env,
        num_tasks=opts.episodes,
        group_size=opts.group_size,
        seed=opts.engine.seed,
        run=collection_run_key(opts),
    )
    return [r.trajectory_id for r in plan]


def test_spread_over_workers_bounded_and_resumable(ray_cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    opts = options(out, episodes=12, live=2)
    first = asyncio.run(collect_ray(opts, on_ray(2, in_flight_per_worker=3)))
    rows = stored(out)
    ids = [r["trajectory_id"] for r in rows]
    assert (first.written, first.failed) == (24, 0)
    assert len(ids) == len(set(ids)) == 24 and set(ids) == set(planned_ids(opts))
    assert all(r["status"] == "ok" and len(r["steps"]) == 3 and r["reward"] == 1.0 for r in rows)
    assert len({r["metadata"]["worker"]["pid"] for r in rows}) == 2, "both worker processes ran episodes"
    assert os.getpid() not in {r["metadata"]["worker"]["pid"] for r in rows}
    # back-pressure: never more than workers × in_flight_per_worker outstanding, max_live running per worker
    assert first.dispatch.max_in_flight == 2 * 3
    assert all(w["peak_live"] == 2 for w in first.workers)
    manifest = read_manifest(out)
    assert manifest is not None and manifest["state"] == "complete" and manifest["ray"]["workers"] == 2

    # the same run with more task instances, on another number of workers, runs only the new ones
    more = options(out, episodes=18, live=2)
    second = asyncio.run(collect_ray(more, on_ray(1)))
    assert (second.skipped, second.written) == (24, 12)
    ids = [r["trajectory_id"] for r in stored(out)]
    assert len(ids) == len(set(ids)) == 36 and set(ids) == set(planned_ids(more))


class Killer:
    """An observer on the driver that kills workers mid-run: SIGKILL of one worker's process at the
    ``first``-th result, ``ray.kill`` of another actor at the ``second``-th."""

    def __init__(self, first: int, second: int) -> None:
        self.first, self.second = first, second
        self.seen: list[dict[str, Any]] = []
        self.killed: list[int] = []

    @hookimpl
    def toolgym_trajectory_done(self, trajectory: Any) -> None:
        import ray

        self.seen.append(trajectory.metadata["worker"])
        alive = [w for w in self.seen if w["index"] not in self.killed]
        if len(self.seen) == self.first:
            victim = alive[-1]
            os.kill(victim["pid"], signal.SIGKILL)
            self.killed.append(victim["index"])
        elif len(self.seen) == self.second:
            victim = next(w for w in reversed(alive) if w["index"] not in self.killed)
            ray.kill(
                ray.get_actor(worker_name(trajectory.metadata["run_id"], victim["index"])), no_restart=True
            )
            self.killed.append(victim["index"])


def test_killed_workers_lose_and_duplicate_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    opts = options(out, episodes=24, latency=0.25, live=4)
    driver_registry = registry()
    killer = Killer(first=6, second=20)
    driver_registry.pm.register(killer, name="killer")
    result = asyncio.run(collect_ray(opts, on_ray(3), registry=driver_registry))
    assert len(killer.killed) == 2
    ids = [r["trajectory_id"] for r in stored(out)]
    assert (result.written, result.failed) == (48, 0) and stored(out, "failures.jsonl") == []
    assert len(ids) == len(set(ids)) == 48 and set(ids) == set(planned_ids(opts)), (
        "nothing lost, nothing twice"
    )
    d = result.dispatch
    assert d.worker_deaths == 2
    assert d.retried >= 2, "the killed workers had episodes in flight, which ran again elsewhere"
    assert d.completed == 48 and d.submitted == 48 + d.retried
    manifest = read_manifest(out)
    assert manifest is not None and manifest["state"] == "complete" and manifest["ray"]["worker_deaths"] == 2


@pytest.mark.docker
def test_each_worker_runs_its_own_sandbox_pool(ray_cluster: Any, tmp_path: Path) -> None:
    from tests.sandboxes.helpers import ensure_images, require
    from toolgym.sandboxes.docker import engine

    require("docker")
    ensure_images("python")
    out = tmp_path / "ds"
    opts = options(
        out, env="pyrelay", episodes=4, group=1, turns=2, sandbox="docker", text=PYTHON_CALL, live=2
    )
    result = asyncio.run(collect_ray(opts, on_ray(2)))
    rows = stored(out)
    assert (result.written, result.failed) == (4, 0), stored(out, "failures.jsonl")
    outputs = [c["output"].strip() for r in rows for s in r["steps"] for c in s["tool_calls"]]
    assert outputs == ["42 1000"] * 8, (
        "each of the 2 turns of the 4 episodes ran its code in a sandbox, as uid 1000"
    )
    pids = {r["metadata"]["worker"]["pid"] for r in rows}
    assert len(pids) == 2
    owners = [
        c["Labels"].get("toolgym.owner", "")
        for c in engine.api().containers(all=True, filters={"label": engine.LABEL})
    ]
    assert not [o for o in owners if any(f":{pid}:" in o for pid in pids)], (
        "the workers' sandboxes were destroyed"
    )


def test_cli_collect_with_ray(ray_cluster: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolgym.cli import app

    out = tmp_path / "cli"
    args = [
        "collect",
        "--env",
        "math-python",
        "--model",
        "sim:0.01",
        "-n",
        "6",
        "--out",
        str(out),
        "--ray",
        "auto",
        "--ray-workers",
        "1",
        "--sandbox-backend",
        "none",
        "--max-turns",
        "2",
        "--no-progress",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "ray: 1 workers" in result.output and len(stored(out)) == 6
    bad = CliRunner().invoke(app, [*args[:-1], "--shard", "0/2"])
    assert bad.exit_code != 0 and "--shard and --ray" in (bad.output + str(bad.exception))


def test_arpo_groups_branch_on_one_worker_and_resume(ray_cluster: Any, tmp_path: Path) -> None:
    from toolgym.core.rollout.arpo import ArpoConfig

    out = tmp_path / "ds"
    opts = options(out, episodes=4, group=2, turns=3, live=4)
    # the simulated model's entropy never changes: tau = 1 branches at every tool result, up to M = 4
    opts.engine.arpo = ArpoConfig(enabled=True, budget=4, initial=2, tau=1.0, beta=0.0)
    result = asyncio.run(collect_ray(opts, on_ray(2)))
    rows = stored(out)
    ids = [r["trajectory_id"] for r in rows]
    assert (result.written, result.failed) == (16, 0) and len(ids) == len(set(ids)) == 16
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_group.setdefault(r["group_id"], []).append(r)
    assert len(by_group) == 4
    for group in by_group.values():
        assert sorted(r["sample_index"] for r in group) == [0, 1, 2, 3]
        assert sum(r["parent_id"] is not None for r in group) == 2  # forks of this group's own episodes
        assert len({r["metadata"]["worker"]["pid"] for r in group}) == 1, "a group runs on one worker"
    assert len({r["metadata"]["worker"]["pid"] for r in rows}) == 2
    assert result.stats.done == result.stats.total == 16
    assert (
        result.stats.group_size_summary() == "group size mean 4.00 (min 4, max 4, 4 groups)"
    )  # collect's ARPO line
    # resume after losing an initial episode and a fork of one group: only that group runs again,
    # within its budget, and no id is written twice
    gid = rows[0]["group_id"]
    lost = {
        next(r["trajectory_id"] for r in by_group[gid] if r["sample_index"] == 0),
        next(r["trajectory_id"] for r in by_group[gid] if r["parent_id"] is not None),
    }
    path = out / "trajectories.jsonl"
    path.write_text(
        "".join(
            line
            for line in path.read_text().splitlines(keepends=True)
            if not any(i in line[:400] for i in lost)
        )
    )
    again = asyncio.run(collect_ray(opts, on_ray(1)))
    ids = [r["trajectory_id"] for r in stored(out)]
    assert len(ids) == len(set(ids)) and again.written >= 1
    mine = [r for r in stored(out) if r["group_id"] == gid]
    assert 0 in {r["sample_index"] for r in mine} and len(mine) <= 4
