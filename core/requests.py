"""What to run: episode requests, their deterministic ids, and the seeds derived from them.

A request names one task instance and one sample of its group. Its ids and every seed drawn for
it are functions of the request alone, so a resumed run recognises what it already has and a
rerun samples the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


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
        return EpisodeRequest(self.env, self.task_index, sample_index, self.seed, self.group_id,
                              trajectory_id(self.group_id, sample_index))


def plan_episodes(env: str, *, num_tasks: int, group_size: int, seed: int = 0, first_task: int = 0) -> list[EpisodeRequest]:
    """Requests for ``num_tasks`` task instances × ``group_size`` samples; ids are deterministic so
    a resumed run recognises what it already has."""
    out = []
    for i in range(first_task, first_task + num_tasks):
        env_seed = seed + i
        group_id = f"{env}/{i}/{env_seed}"
        for k in range(group_size):
            out.append(EpisodeRequest(env, i, k, env_seed, group_id, trajectory_id(group_id, k)))
    return out


def trajectory_id(group_id: str, sample_index: int) -> str:
    """The id of sample ``sample_index`` of a group: stable across runs (resume relies on it)."""
    return hashlib.blake2b(f"{group_id}/{sample_index}".encode(), digest_size=8).hexdigest()


def sampling_seed(base: int, task_index: int, sample_index: int, turn: int) -> int:
    """The sampling seed of one turn of one sample (32 bits), from the run's base seed."""
    h = hashlib.blake2b(f"{base}/{task_index}/{sample_index}/{turn}".encode(), digest_size=4)
    return int.from_bytes(h.digest(), "little")
