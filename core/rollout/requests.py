"""What to run: episode requests, their deterministic ids, and the seeds derived from them.

A request names one task instance and one sample of its group. Its ids and every seed drawn for
it are functions of the request alone, so a resumed run recognises what it already has and a
rerun samples the same way.

Ids are unique per run, not only per task: ``plan_episodes(run=...)`` takes a run key
(:func:`run_key`, a digest of what defines the run: model, weights, sampling, environment options,
the engine settings that change episodes) into the group id, and the trajectory id hashes the group
id. Two runs over the same tasks (a scripted one and a model's) then never share an id or a group,
so their datasets pool without losing rows; the same run planned again gets the same ids.
``run=""`` (the default) gives the ids of datasets written before run keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EpisodeRequest:
    """One episode to run: which task instance, which sample of its group."""

    env: str
    task_index: int
    sample_index: int
    seed: int
    group_id: str
    trajectory_id: str

    def sibling(self, sample_index: int) -> EpisodeRequest:
        """Sample ``sample_index`` of the same group (an ARPO fork or a refill)."""
        return EpisodeRequest(
            self.env,
            self.task_index,
            sample_index,
            self.seed,
            self.group_id,
            trajectory_id(self.group_id, sample_index),
        )


def plan_episodes(
    env: str, *, num_tasks: int, group_size: int, seed: int = 0, first_task: int = 0, run: str = ""
) -> list[EpisodeRequest]:
    """Requests for ``num_tasks`` task instances × ``group_size`` samples; ids are deterministic so
    a resumed run recognises what it already has. ``run``: the run's key (:func:`run_key`), part of
    every group id (``env/task/seed/run``) and so of every trajectory id; "" leaves it out."""
    out = []
    for i in range(first_task, first_task + num_tasks):
        env_seed = seed + i
        group_id = f"{env}/{i}/{env_seed}/{run}" if run else f"{env}/{i}/{env_seed}"
        for k in range(group_size):
            out.append(EpisodeRequest(env, i, k, env_seed, group_id, trajectory_id(group_id, k)))
    return out


def run_key(settings: Mapping[str, Any]) -> str:
    """A 12-hex-digit digest of the settings that define a run (JSON-able; key order does not
    matter): equal settings, equal key, so planning the same run again gives the same ids."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(blob.encode(), digest_size=6).hexdigest()


def trajectory_id(group_id: str, sample_index: int) -> str:
    """The id of sample ``sample_index`` of a group: stable across runs (resume relies on it)."""
    return hashlib.blake2b(f"{group_id}/{sample_index}".encode(), digest_size=8).hexdigest()


def sampling_seed(base: int, task_index: int, sample_index: int, turn: int) -> int:
    """The sampling seed of one turn of one sample (32 bits), from the run's base seed."""
    h = hashlib.blake2b(f"{base}/{task_index}/{sample_index}/{turn}".encode(), digest_size=4)
    return int.from_bytes(h.digest(), "little")
