"""Deduplication of trajectory datasets.

Two kinds of duplicates:

- **by id**: the same ``trajectory_id`` stored twice (two runs written into one directory, a shard
  re-run under another shard count). Readers already skip them (``iter_raw`` keeps the first);
  ``dedup`` writes a directory without them.
- **by prompt**: different task instances whose initial prompt is the same (a generator that
  repeats itself, a task list shorter than the seeds asked for). The key is
  :func:`prompt_key`, a digest of the initial messages and tool schemas; the first *group*
  (task instance) to show a prompt is kept with all its samples, later groups are dropped.

``toolgym collect --dedup prompt`` applies the prompt rule before running anything (it resets
every planned task instance once to see its prompt); ``toolgym dedup DIR --out NEW`` applies
either rule to stored data, streaming, holding only one digest per group.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory

from .store import TrajectoryWriter, data_files, iter_raw, read_manifest, write_manifest

DedupBy = Literal["id", "prompt"]


def prompt_key(prompt: Iterable[dict[str, Any]], tools: Iterable[dict[str, Any]] = ()) -> str:
    """A digest of the initial messages (role and content) and the tool schemas shown: equal for
    task instances a model would see identically."""
    canon = {
        "messages": [{"role": m.get("role"), "content": m.get("content")} for m in prompt],
        "tools": list(tools),
    }
    text = json.dumps(canon, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass
class DedupResult:
    kept: int = 0
    dropped: int = 0
    """Trajectories dropped because an earlier group had the same prompt."""
    dropped_ids: int = 0
    """Lines dropped because their trajectory id was already stored."""
    dropped_groups: int = 0
    """Groups dropped because an earlier group had the same prompt (``by="prompt"``)."""
    examples: list[dict[str, str]] = field(default_factory=list)
    """Up to 20 dropped ids with the id or group they duplicate."""


def dedup_dataset(
    root: str | Path, out: str | Path, *, by: DedupBy = "prompt", include_failures: bool = False
) -> DedupResult:
    """Write ``root``'s trajectories to the new directory ``out`` without duplicates (streaming).

    The manifest is copied with a ``dedup`` entry recording the rule and counts.
    """
    root, out = Path(root), Path(out)
    if by not in ("id", "prompt"):
        raise ConfigError(f"--by must be 'id' or 'prompt', got {by!r}")
    if out.resolve() == root.resolve():
        raise ConfigError("dedup writes a new directory: give an --out other than the dataset itself")
    if out.exists() and any(data_files(out)):
        raise ConfigError(f"{out} already holds trajectories; give an empty or new --out")
    result = DedupResult()
    first_group: dict[str, str] = {}  # prompt key → the group that owns it
    dropped_groups: set[str] = set()
    with TrajectoryWriter(out) as writer:
        for raw in iter_raw(root, include_failures=include_failures):  # skips repeated ids
            if by == "prompt":
                group = str(raw.get("group_id"))
                key = prompt_key(raw.get("prompt") or [], raw.get("tools") or [])
                owner = first_group.setdefault(key, group)
                if owner != group:
                    result.dropped += 1
                    if group not in dropped_groups:
                        dropped_groups.add(group)
                        if len(result.examples) < 20:
                            result.examples.append({"group_id": group, "duplicate_of": owner})
                    continue
            writer.write(Trajectory.model_validate(raw))
            result.kept += 1
    result.dropped_groups = len(dropped_groups)
    files = data_files(root) + (sorted(root.glob("failures*.jsonl")) if include_failures else [])
    result.dropped_ids = max(0, sum(_count_lines(p) for p in files) - result.kept - result.dropped)
    manifest = read_manifest(root) or {}
    manifest["dedup"] = {
        "by": by,
        "source": str(root),
        "kept": result.kept,
        "dropped": result.dropped,
        "dropped_ids": result.dropped_ids,
        "dropped_groups": result.dropped_groups,
        "examples": result.examples,
    }
    write_manifest(out, manifest)
    artifacts = root / "artifacts"
    if artifacts.is_dir() and not (out / "artifacts").exists():
        shutil.copytree(artifacts, out / "artifacts")
    return result


def _count_lines(path: Path) -> int:
    """Complete lines of a file (a torn last line is not counted), read in blocks."""
    n = 0
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
    return n
