"""Hugging Face ``datasets`` export: a directory that ``datasets.load_dataset(DIR)`` reads.

Layout (the Hub's own convention, so the directory can also be pushed as a dataset repository)::

    README.md                        dataset card: YAML header (configs, splits, tags) + summary
    toolgym_manifest.json            the source dataset's manifest (what produced it)
    data/train-00000-of-00002.parquet
    data/train-00001-of-00002.parquet
    data/test-00000-of-00001.parquet  only with ``test_fraction > 0``

Rows use the Parquet schema of ``docs/trajectory-format.md`` (one row per trajectory: token ids,
loss masks, logprobs, steps, and JSON strings for the free-form fields), then ``images`` (datasets
with screenshots) and ``messages``: the stored conversation in TRL's conversational format, a list
of ``{"role", "content", "name", "tool_call_id", "tool_calls"}`` (the last three null where the
stored message lacks them; tool call arguments as JSON strings). Assistant ``content`` is the text
the model produced, as stored (a token-level model's ``<tool_call>`` markup included), so the
model's own chat template renders the episode as it was sampled. With screenshots every
``content`` is a list of parts (``type``, ``text``, ``image``), the ``images`` column holding the
image parts' pictures in order, as TRL's vision-language datasets pair them. Splits are assigned per
*task instance* (by a hash of ``env/task_index/seed``, the group id without its run key), so samples
of one task instance never straddle train and test, not even when datasets of several runs are
pooled. Written streaming: one row group at a time, a new file every ``rows_per_file`` rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import has_images
from toolgym.core.trajectory import Trajectory

from .export_sft import arrow_messages, message_type
from .images import IMAGES, has_image_store, image_items, with_image_features
from .parquet import SCHEMA, trajectory_row

SPLITS = ("train", "test")


def messages_field(*, parts: bool) -> pa.Field:
    """The ``messages`` column (see the module docstring); ``parts``: the dataset has images."""
    return pa.field("messages", pa.list_(message_type(parts=parts)))


def split_of(group_id: str, test_fraction: float) -> str:
    """``test`` for a stable ``test_fraction`` of groups (``group_id``: a task instance's key),
    ``train`` for the rest."""
    if test_fraction <= 0:
        return "train"
    h = int.from_bytes(hashlib.blake2b(group_id.encode(), digest_size=8).digest(), "big")
    return "test" if h / 2**64 < test_fraction else "train"


class _SplitWriter:
    """Parquet files of one split, rotated every ``rows_per_file`` rows, written in row groups."""

    def __init__(
        self, data_dir: Path, split: str, rows_per_file: int, row_group_size: int, schema: pa.Schema = SCHEMA
    ) -> None:
        self.data_dir, self.split, self.schema = data_dir, split, schema
        self.rows_per_file, self.row_group_size = rows_per_file, row_group_size
        self.files: list[Path] = []
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._in_file = 0
        self._batch: list[dict[str, Any]] = []

    def add(self, row: dict[str, Any]) -> None:
        self._batch.append(row)
        self.rows += 1
        if len(self._batch) >= self.row_group_size or self._in_file + len(self._batch) >= self.rows_per_file:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        if self._writer is None:
            path = self.data_dir / f".{self.split}-{len(self.files):05d}.parquet.tmp"
            self.files.append(path)
            self._writer = pq.ParquetWriter(str(path), self.schema, compression="zstd")
            self._in_file = 0
        self._writer.write_table(pa.Table.from_pylist(self._batch, schema=self.schema))
        self._in_file += len(self._batch)
        self._batch = []
        if self._in_file >= self.rows_per_file:
            self._writer.close()
            self._writer = None

    def close(self) -> list[Path]:
        """Finish and rename the files to ``<split>-<i>-of-<n>.parquet``; returns the final paths."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        final = []
        for i, tmp in enumerate(self.files):
            path = self.data_dir / f"{self.split}-{i:05d}-of-{len(self.files):05d}.parquet"
            os.replace(tmp, path)
            final.append(path)
        return final


@dataclass
class HFExport:
    """What ``write_hf_dataset`` wrote."""

    out: Path
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, list[str]] = field(default_factory=dict)
    reward_sum: float = 0.0
    successes: int = 0


def write_hf_dataset(
    trajectories: Iterable[Trajectory],
    out: str | Path,
    *,
    manifest: dict[str, Any] | None = None,
    test_fraction: float = 0.0,
    rows_per_file: int = 10_000,
    row_group_size: int = 256,
    success_threshold: float = 1.0,
    name: str | None = None,
    images_root: str | Path | None = None,
) -> HFExport:
    """Write the dataset directory (see the module docstring); streams ``trajectories``.
    ``images_root``: the source dataset directory, when its trajectories have screenshots."""
    out = Path(out)
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"--test-fraction must be in [0, 1), got {test_fraction:g}")
    if (out / "data").exists() and any((out / "data").glob("*.parquet")):
        raise ConfigError(f"{out} already holds a dataset; give a new --out or remove it")
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    with_images = images_root is not None and has_image_store(images_root)
    schema = (
        with_image_features(SCHEMA.append(IMAGES).append(messages_field(parts=True)))
        if with_images
        else SCHEMA.append(messages_field(parts=False))
    )
    writers = {s: _SplitWriter(data, s, rows_per_file, row_group_size, schema) for s in SPLITS}
    result = HFExport(out)
    for traj in trajectories:
        row = trajectory_row(traj)
        conversation = traj.messages or traj.prompt
        if with_images:
            row["images"] = image_items(conversation, images_root)
        elif has_images(conversation):
            raise ConfigError(
                f"trajectory {traj.trajectory_id} has screenshots but no images/ folder was given; "
                "export from the dataset directory that holds them"
            )
        row["messages"] = arrow_messages(conversation, parts=with_images)
        writers[split_of(f"{traj.env or traj.task}/{traj.task_index}/{traj.seed}", test_fraction)].add(row)
        result.reward_sum += traj.reward
        result.successes += traj.reward >= success_threshold
    for split, writer in writers.items():
        paths = writer.close()
        if paths:
            result.rows[split] = writer.rows
            result.files[split] = [str(p.relative_to(out)) for p in paths]
    if not result.rows:  # an empty train split keeps the directory loadable
        pq.write_table(schema.empty_table(), data / "train-00000-of-00001.parquet")
        result.rows["train"], result.files["train"] = 0, ["data/train-00000-of-00001.parquet"]
    if manifest:
        (out / "toolgym_manifest.json").write_text(
            json.dumps(manifest, indent=2, sort_keys=True, default=str)
        )
    (out / "README.md").write_text(
        dataset_card(result, manifest or {}, success_threshold=success_threshold, name=name or out.name)
    )
    return result


def _size_category(n: int) -> str:
    for limit, label in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
    ):
        if n < limit:
            return label
    return "1M<n<10M"


def dataset_card(result: HFExport, manifest: dict[str, Any], *, success_threshold: float, name: str) -> str:
    """The README.md: YAML metadata the ``datasets`` loader and the Hub read, then a summary."""
    total = sum(result.rows.values())
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split in result.rows:
        lines += [f"  - split: {split}", f"    path: data/{split}-*.parquet"]
    lines += [
        "tags:",
        "- toolgym",
        "- agent-trajectories",
        "- tool-use",
        "- reinforcement-learning",
        "task_categories:",
        "- text-generation",
        "size_categories:",
        f"- {_size_category(total)}",
        f"pretty_name: {json.dumps(name)}",
        "---",
        "",
        f"# {name}",
        "",
        "Agent trajectories collected with toolgym and exported by `toolgym export hf`.",
        "",
    ]
    env = (manifest.get("environment") or {}).get("name") or (manifest.get("fingerprint") or {}).get(
        "env", "?"
    )
    model = manifest.get("model_name") or (manifest.get("fingerprint") or {}).get("model", "?")
    mean = result.reward_sum / total if total else 0.0
    rows = [
        ("environment", env),
        ("model", model),
        ("policy", manifest.get("policy", "?")),
        ("token-faithful", manifest.get("token_faithful", "?")),
        ("sampling", json.dumps(manifest.get("sampling", {}))),
        ("toolgym", manifest.get("toolgym_version", "?")),
        ("trajectories", ", ".join(f"{s}: {n}" for s, n in result.rows.items())),
        ("mean reward", f"{mean:.4f}"),
        (f"success (reward ≥ {success_threshold:g})", f"{result.successes / total:.1%}" if total else "-"),
    ]
    lines += ["| | |", "|---|---|", *(f"| {k} | {str(v).replace('|', '/')} |" for k, v in rows), ""]
    lines += [
        "## Load",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'ds = load_dataset("{name}")  # or the path of this directory',
        'row = ds["train"][0]',
        'ids, mask = row["segments"][0]["token_ids"], row["segments"][0]["loss_mask"]',
        "```",
        "",
        "## Columns",
        "",
        "One row per trajectory. `segments` hold the token ids the model saw and sampled, in order, with",
        "`loss_mask` 1 exactly on sampled ids and their `logprobs`; `steps` hold each turn's action,",
        "observation, reward and tool calls; `*_json` columns are JSON strings (prompt, messages, tools,",
        "sampling, timings, metadata); `messages` holds the same conversation in TRL's conversational",
        "format (`role`, `content`, and `name`, `tool_call_id`, `tool_calls` where a message has them),",
        "assistant text as the model sampled it. The full schema is toolgym's `docs/trajectory-format.md`;",
        "`toolgym_manifest.json` records the model, sampling, environment, tool and code versions.",
        "",
    ]
    return "\n".join(lines)
