"""Parquet export and import of trajectories, one row per trajectory, written in row groups
while streaming (never the whole dataset in memory). The column layout is documented in
``docs/trajectory-format.md``; ``read_parquet`` restores the same ``Trajectory`` objects (logprobs are stored as float32).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from toolgym.core.trajectory import Trajectory

SEGMENT = pa.struct(
    [
        ("sequence", pa.int32()),
        ("role", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("text", pa.string()),
    ]
)
STEP = pa.struct(
    [
        ("index", pa.int32()),
        ("action", pa.string()),
        ("action_kind", pa.string()),
        ("observation", pa.string()),
        ("step_reward", pa.float64()),
        ("anchor", pa.string()),
        ("valid", pa.bool_()),
        ("error", pa.string()),
        ("tool_calls_json", pa.string()),
        ("llm_json", pa.string()),
        ("env_s", pa.float64()),
        ("info_json", pa.string()),
    ]
)
SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("group_id", pa.string()),
        ("parent_id", pa.string()),
        ("branch_point", pa.int64()),
        ("task", pa.string()),
        ("task_index", pa.int64()),
        ("sample_index", pa.int32()),
        ("seed", pa.int64()),
        ("env", pa.string()),
        ("model", pa.string()),
        ("reward", pa.float64()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("truncation_reason", pa.string()),
        ("status", pa.string()),
        ("status_reason", pa.string()),
        ("token_faithful", pa.bool_()),
        ("weight_version", pa.string()),
        ("created_at", pa.float64()),
        ("num_steps", pa.int32()),
        ("segments", pa.list_(SEGMENT)),
        ("steps", pa.list_(STEP)),
        ("prompt_json", pa.string()),
        ("messages_json", pa.string()),
        ("tools_json", pa.string()),
        ("sampling_json", pa.string()),
        ("timings_json", pa.string()),
        ("metadata_json", pa.string()),
        ("schema_version", pa.int32()),
    ]
)
_JSON_FIELDS = ("prompt", "messages", "tools", "sampling", "timings", "metadata")
_SCALARS = [
    f.name
    for f in SCHEMA
    if f.name not in {"segments", "steps", "num_steps"} and not f.name.endswith("_json")
]


def _row(t: Trajectory) -> dict[str, Any]:
    d = t.model_dump(mode="json")
    row = {k: d.get(k) for k in _SCALARS}
    row["num_steps"] = len(t.steps)
    row["segments"] = d["segments"]
    row["steps"] = [
        {
            **{
                k: s[k]
                for k in (
                    "index",
                    "action",
                    "action_kind",
                    "observation",
                    "step_reward",
                    "anchor",
                    "valid",
                    "error",
                    "env_s",
                )
            },
            "tool_calls_json": json.dumps(s["tool_calls"], ensure_ascii=False),
            "llm_json": json.dumps(s["llm"]) if s["llm"] is not None else None,
            "info_json": json.dumps(s["info"], ensure_ascii=False),
        }
        for s in d["steps"]
    ]
    for name in _JSON_FIELDS:
        row[f"{name}_json"] = json.dumps(d[name], ensure_ascii=False)
    return row


trajectory_row = _row
"""One trajectory as a dict of ``SCHEMA``'s columns (for writers of other Parquet layouts)."""


def write_parquet(
    trajectories: Iterable[Trajectory],
    path: str | Path,
    *,
    row_group_size: int = 512,
    compression: str = "zstd",
) -> int:
    """Stream trajectories into one Parquet file; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    batch: list[dict[str, Any]] = []
    with pq.ParquetWriter(str(path), SCHEMA, compression=compression) as writer:
        for t in trajectories:
            batch.append(_row(t))
            n += 1
            if len(batch) >= row_group_size:
                writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
                batch = []
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
    return n


def read_parquet(path: str | Path, *, batch_size: int = 256) -> Iterator[Trajectory]:
    """Stream ``Trajectory`` objects back from a file written by ``write_parquet``."""
    pf = pq.ParquetFile(str(path))
    for record_batch in pf.iter_batches(batch_size=batch_size):
        for row in record_batch.to_pylist():
            d: dict[str, Any] = {k: row[k] for k in _SCALARS}
            d["segments"] = row["segments"]
            d["steps"] = [
                {
                    **{
                        k: s[k]
                        for k in (
                            "index",
                            "action",
                            "action_kind",
                            "observation",
                            "step_reward",
                            "anchor",
                            "valid",
                            "error",
                            "env_s",
                        )
                    },
                    "tool_calls": json.loads(s["tool_calls_json"]),
                    "llm": json.loads(s["llm_json"]) if s["llm_json"] else None,
                    "info": json.loads(s["info_json"]),
                }
                for s in row["steps"]
            ]
            for name in _JSON_FIELDS:
                d[name] = json.loads(row[f"{name}_json"])
            for seg in d["segments"]:
                if seg["logprobs"] is not None:
                    seg["logprobs"] = [float(x) for x in seg["logprobs"]]
            yield Trajectory.model_validate(d)
