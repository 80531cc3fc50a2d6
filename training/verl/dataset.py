"""The dataset verl iterates over: one Parquet row per task instance, read by ``RLHFDataset``.

verl's trainer draws prompt rows from Parquet files and runs ``rollout.n`` agent loops per row.
For toolgym a row only names the task instance: the environment builds the real prompt when the
episode starts. Each row has the columns ``RLHFDataset`` and the V1 trainer read:

- ``prompt``: a one-message placeholder naming the task (verl's dataset requires a prompt);
- ``agent_name``: ``toolgym_agent``;
- ``data_source``: ``toolgym/<env>`` (validation metrics are grouped by it);
- ``reward_model``: ``{"style": "env", "ground_truth": ""}`` (the environment scores episodes);
- ``extra_info``: ``index``, ``toolgym_env``, ``task_index``, ``seed`` and ``env_kwargs_json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from toolgym.training.tasks import TaskRange

from .agent_loop import AGENT_NAME
from .settings import ToolgymSettings


def task_rows(env: str, split: TaskRange) -> list[dict[str, Any]]:
    """One row per task instance of ``split``; task ``i`` uses environment seed ``split.seed + i``."""
    kwargs_json = json.dumps(split.env_kwargs, sort_keys=True)
    rows = []
    for i in split.indices():
        seed = split.seed + i
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"toolgym task: env={env} task={i} seed={seed}"}],
                "agent_name": AGENT_NAME,
                "data_source": f"toolgym/{env}",
                "reward_model": {"style": "env", "ground_truth": ""},
                "extra_info": {
                    "index": i,
                    "toolgym_env": env,
                    "task_index": i,
                    "seed": seed,
                    "env_kwargs_json": kwargs_json,
                },
            }
        )
    return rows


def write_task_files(settings: ToolgymSettings, directory: str | Path) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``val.parquet`` for ``settings`` into ``directory``; return both paths.

    Split-level ``env_kwargs`` go into each row, so the loop builds each split's environment with
    its own options. The global ``toolgym.env_kwargs`` are applied by the loop itself.
    """
    out = Path(directory).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, split in (("train", settings.train), ("val", settings.val)):
        path = out / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(task_rows(settings.env, split)), path)
        paths.append(path)
    return paths[0], paths[1]
