"""What the Ray driver decides before (or instead of) touching a cluster: option errors, an
unreachable head, and a dataset that is already complete (collected without Ray)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.distributed.envs import LOOKUP_CALL, registry
from toolgym.collect.ray import RayOptions, collect_ray
from toolgym.collect.ray.driver import check_head
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.errors import ConfigError
from toolgym.core.rollout.config import EngineConfig


def options(out: Path, **engine: object) -> CollectOptions:
    return CollectOptions(
        env="relay",
        out=out,
        model="sim:0",
        episodes=3,
        sandbox_backend="none",
        group_size=2,
        engine=EngineConfig(max_turns=4, **engine),  # type: ignore[arg-type]
        env_kwargs={"turns": 2},
        backend_options={"text": LOOKUP_CALL},
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_workers": 0}, "--ray-workers must be at least 1"),
        ({"shard": (0, 2)}, "--shard and --ray do not combine"),
    ],
)
def test_option_errors_say_what_to_do(tmp_path: Path, change: dict[str, object], message: str) -> None:
    opts = options(tmp_path / "ds")
    if "shard" in change:
        opts.shard = change["shard"]  # type: ignore[assignment]
    ray_opts = RayOptions(address="local", num_workers=int(change.get("num_workers", 2)))  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match=message):
        asyncio.run(collect_ray(opts, ray_opts, registry=registry()))


def test_an_unreachable_head_fails_at_once() -> None:
    with pytest.raises(ConfigError, match=re.escape("no Ray cluster answers at 127.0.0.1:1")):
        check_head("127.0.0.1:1", timeout_s=2)
    check_head("auto")  # names, not addresses: left to Ray
    check_head("ray://head:10001")


def test_a_complete_dataset_needs_no_cluster(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    first = asyncio.run(collect(options(out), registry=registry()))
    assert first.written == 6
    again = asyncio.run(collect_ray(options(out), RayOptions(address="127.0.0.1:1"), registry=registry()))
    assert (again.skipped, again.written) == (6, 0), "resumed without starting (or reaching) Ray"


def test_arpo_work_goes_out_by_group_with_what_is_stored() -> None:
    from toolgym.collect.ray.dispatch import GroupRequest
    from toolgym.collect.ray.driver import group_units
    from toolgym.core.rollout.engine import plan_episodes

    plan = plan_episodes("relay", num_tasks=3, group_size=2)
    units = group_units(plan[1:], {plan[0].group_id: [0, 2]})
    assert [len(u.requests) for u in units] == [1, 2, 2] and all(isinstance(u, GroupRequest) for u in units)
    assert units[0].stored == (0, 2) and units[1].stored == ()
    assert {r.group_id for u in units for r in u.requests} == {r.group_id for r in plan}
    assert units[0].trajectory_id != units[1].trajectory_id
