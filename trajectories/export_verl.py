"""verl export: the task instances of a dataset as verl's prompt Parquet, for RL with ``toolgym train``.

verl's ``RLHFDataset`` reads one row per prompt and its agent loop runs ``rollout.n`` episodes per
row. toolgym's agent loop (``toolgym_agent``, :mod:`toolgym.training.verl.agent_loop`) rebuilds the
episode from the row's ``extra_info`` (environment, task index, seed, environment options), so a
row here is one *task instance* (group) of the collected dataset, with the columns that loop and
verl's dataset read (the same as :func:`toolgym.training.verl.dataset.task_rows` writes):

- ``data_source``: ``toolgym/<env>`` (verl groups validation metrics by it);
- ``prompt``: the instance's initial messages as collected (``role``/``content``), which verl's
  dataset uses to filter over-long prompts; the environment renders the real prompt itself;
- ``ability``: ``agent``;
- ``reward_model``: ``{"style": "env", "ground_truth": ""}`` (the environment scores episodes);
- ``agent_name``: ``toolgym_agent``;
- ``extra_info``: ``index``, ``toolgym_env``, ``task_index``, ``seed``, ``env_kwargs_json``, and
  what the collection saw of the instance: ``group_id``, ``collected_samples``,
  ``collected_mean_reward``, ``collected_success_rate``.

A dataset with screenshots (an ``images/`` folder) gets one more column, ``images``: the prompt's
images (``{"bytes", "path"}``, which ``RLHFDataset`` turns into ``multi_modal_data["image"]``),
and each image part of the prompt becomes ``<image>`` in its text, where verl's dataset splits the
content back into image and text parts.

``min_success_rate`` / ``max_success_rate`` select instances by the collected success rate: for
example ``max_success_rate=0.99`` drops instances the collecting model always solved, a common
way to keep RL on tasks that still teach something. Two streaming passes over the data; memory
holds a few numbers per group.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import GENERIC_PLACEHOLDER, content_text, has_images

from .images import IMAGES, has_image_store, image_items

AGENT_NAME = "toolgym_agent"
"""The verl agent loop toolgym registers (``toolgym.training.verl.agent_loop.AGENT_NAME``)."""

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
EXTRA_INFO = pa.struct(
    [
        ("index", pa.int64()),
        ("toolgym_env", pa.string()),
        ("task_index", pa.int64()),
        ("seed", pa.int64()),
        ("env_kwargs_json", pa.string()),
        ("group_id", pa.string()),
        ("collected_samples", pa.int64()),
        ("collected_mean_reward", pa.float64()),
        ("collected_success_rate", pa.float64()),
    ]
)
SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(MESSAGE)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("agent_name", pa.string()),
        ("extra_info", EXTRA_INFO),
    ]
)
IMAGE_SCHEMA = SCHEMA.append(IMAGES)
"""``SCHEMA`` plus the prompt's images, for datasets with screenshots."""


@dataclass
class _Group:
    env: str
    task_index: int
    seed: int
    samples: int = 0
    reward_sum: float = 0.0
    successes: int = 0


@dataclass
class VerlExport:
    rows: int
    groups: int
    """Task instances in the dataset."""
    filtered: int
    """Instances left out by the success-rate bounds."""


def _content(value: Any) -> str:
    if isinstance(value, list):  # text and image parts: verl's dataset splits on the placeholder
        return content_text(value, GENERIC_PLACEHOLDER)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def write_verl_prompts(
    source: Callable[[], Iterator[dict[str, Any]]] | Callable[[], Iterable[dict[str, Any]]],
    out: str | Path,
    *,
    env_kwargs: dict[str, Any] | None = None,
    success_threshold: float = 1.0,
    min_success_rate: float = 0.0,
    max_success_rate: float = 1.0,
    batch_size: int = 1024,
    images_root: str | Path | None = None,
) -> VerlExport:
    """Write verl's prompt Parquet. ``source()`` streams stored trajectories as dicts and is
    called twice (statistics, then rows); ``env_kwargs`` are the collection's environment
    options (``manifest.json``'s ``fingerprint.env_kwargs``); ``images_root`` the dataset
    directory, when its prompts have screenshots."""
    if not 0.0 <= min_success_rate <= max_success_rate <= 1.0:
        raise ConfigError(
            f"need 0 ≤ --min-success-rate ≤ --max-success-rate ≤ 1, got {min_success_rate:g} and {max_success_rate:g}"
        )
    groups: dict[str, _Group] = {}
    for raw in source():
        g = groups.get(raw["group_id"])
        if g is None:
            g = groups[raw["group_id"]] = _Group(
                str(raw.get("env") or raw.get("task")), int(raw.get("task_index", 0)), int(raw.get("seed", 0))
            )
        g.samples += 1
        reward = float(raw.get("reward", 0.0))
        g.reward_sum += reward
        g.successes += reward >= success_threshold
    keep = {
        gid for gid, g in groups.items() if min_success_rate <= g.successes / g.samples <= max_success_rate
    }
    kwargs_json = json.dumps(env_kwargs or {}, sort_keys=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    batch: list[dict[str, Any]] = []
    with_images = images_root is not None and has_image_store(images_root)
    schema = IMAGE_SCHEMA if with_images else SCHEMA
    with pq.ParquetWriter(str(out), schema) as writer:
        for raw in source():
            gid = raw["group_id"]
            if gid not in keep or gid in written:
                continue
            written.add(gid)
            g = groups[gid]
            prompt = raw.get("prompt") or []
            if not with_images and has_images(prompt):
                raise ConfigError(
                    f"the prompt of {gid} has screenshots but no images/ folder was given; "
                    "export from the dataset directory that holds them"
                )
            row: dict[str, Any] = {
                "data_source": f"toolgym/{g.env}",
                "prompt": [
                    {"role": str(m.get("role", "user")), "content": _content(m.get("content", ""))}
                    for m in prompt
                ]
                or [
                    {
                        "role": "user",
                        "content": f"toolgym task: env={g.env} task={g.task_index} seed={g.seed}",
                    }
                ],
                "ability": "agent",
                "reward_model": {"style": "env", "ground_truth": ""},
                "agent_name": AGENT_NAME,
                "extra_info": {
                    "index": g.task_index,
                    "toolgym_env": g.env,
                    "task_index": g.task_index,
                    "seed": g.seed,
                    "env_kwargs_json": kwargs_json,
                    "group_id": gid,
                    "collected_samples": g.samples,
                    "collected_mean_reward": g.reward_sum / g.samples,
                    "collected_success_rate": g.successes / g.samples,
                },
            }
            if with_images:
                row["images"] = image_items(prompt, images_root)
            batch.append(row)
            if len(batch) >= batch_size:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return VerlExport(rows=len(written), groups=len(groups), filtered=len(groups) - len(keep))
