"""The weight versions (``min_global_steps`` / ``max_global_steps``) the agent loop's rows carry,
pushed through verl's own code that consumes them after a step: the TransferQueue worker's put
(which copies them into the row tags) and the trainer's metric step (which reads the tags as
``np.array(..., dtype=int)``). A row without its versions, or with a non-integer one, fails there."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

from test_verl_agent_loop import _rollout, client_tokenizer
from verl.trainer.ppo.utils import create_rl_dataset
from verl_helpers import MemoryTransferQueue, TestPlugin, write_config

from toolgym.training.verl import compose
from toolgym.training.verl.backend import LocalLLMServerClient

SERVER_VERSION = 7
"""The weight version the stand-in rollout server reports (verl's ``global_steps``)."""


def _metrics_after_step(
    cfg: Any, settings: Any, queue: MemoryTransferQueue, keys: list[str], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """verl's advantage step, then verl's ``_compute_metrics`` on the stored rows (as after a step)."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base

    from toolgym.training.verl import trainer as toolgym_trainer

    for key in keys:  # the trainer's old-log-prob step runs before the advantage step
        queue.rows[key]["old_log_probs"] = queue.rows[key]["rollout_log_probs"].clone()
    monkeypatch.setattr(toolgym_trainer, "tq", queue)
    monkeypatch.setattr(trainer_base, "tq", queue)
    trainer = toolgym_trainer.ToolgymPPOTrainer.__new__(toolgym_trainer.ToolgymPPOTrainer)
    trainer.config, trainer.toolgym = cfg, settings
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = None
    trainer._get_n_gpus_for_throughput = lambda: 1  # verl asks its Ray resource pool, absent here
    batch = KVBatchMeta(keys=keys, tags=[queue.tags[k] for k in keys], partition_id="train")
    metrics: dict[str, Any] = {}
    trainer._compute_advantage(batch, metrics)
    timing = {"step": 1.0, "gen": 0.5, "adv": 0.1}
    trainer._compute_metrics(batch, metrics, timing, global_steps=SERVER_VERSION + 1, epoch=0)
    return metrics


@pytest.mark.parametrize(
    ("env", "layout", "arpo"),
    [
        ("walk", "trajectory", None),
        ("walk-window", "step", None),
        ("probe-walk", "trajectory", {"global_rollouts": 2, "initial_rollouts": 1, "tau": 1.0, "beta": 0.0}),
    ],
)
def test_rows_carry_the_weight_version_verl_reads_after_a_step(
    env: str,
    layout: str,
    arpo: dict[str, Any] | None,
    tmp_path: Path,
    tiny_model: Path,
    tiny_backend: Any,
    plugin: TestPlugin,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estimator, group = ("arpo", 2) if arpo else ("gigpo", 4)
    path = write_config(
        tmp_path,
        tiny_model,
        env=env,
        layout=layout,
        estimator=estimator,
        group_size=group,
        arpo=arpo,
        options={"mode": "hard"} if arpo else None,
    )
    cfg, settings = compose.compose_config(path, data_dir=tmp_path)
    queue = MemoryTransferQueue()
    client = LocalLLMServerClient(cfg, tiny_backend, global_steps=SERVER_VERSION)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, client_tokenizer(tiny_model), None)
    uids = asyncio.run(_rollout(cfg, client, queue, dataset, monkeypatch))
    keys = sorted(k for k in queue.rows if k.rsplit("_", 2)[0] in uids)
    assert keys

    metrics = _metrics_after_step(cfg, settings, queue, keys, monkeypatch)  # verl raises TypeError on None
    for key in keys:
        tag = queue.tags[key]
        assert (tag["min_global_steps"], tag["max_global_steps"]) == (SERVER_VERSION, SERVER_VERSION), key
        assert type(tag["min_global_steps"]) is int and type(tag["max_global_steps"]) is int
    assert metrics["training/off_policy/trajectory_spans/max"] == 1
    assert metrics["training/off_policy/trajectory_staleness/max"] == 0
