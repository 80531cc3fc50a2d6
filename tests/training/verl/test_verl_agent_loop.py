"""The toolgym agent loop driven by verl's own agent-loop workers, generating with the tiny model
through an in-process ``LLMServerClient``; then verl's V1 advantage step (through the toolgym
trainer) on what the loop produced, compared with toolgym's estimators on the same trajectories."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.trainer.ppo.utils import create_rl_dataset
from verl.utils.dataset.rl_dataset import collate_fn
from verl_helpers import MemoryTransferQueue, TestPlugin, tq_worker_class, write_config

from toolgym.training.advantages import compute_token_advantages
from toolgym.training.verl import compose
from toolgym.training.verl.backend import LocalLLMServerClient
from toolgym.training.verl.rows import META_KEY

GIGPO = {"gamma": 0.95, "omega": 1.0, "mode": "mean_std_norm", "invalid_penalty": 0.1}


def sampling(cfg: Any) -> dict[str, Any]:
    """The sampling dict verl's workers hand every agent loop (training, not validation)."""
    r = cfg.actor_rollout_ref.rollout
    return {
        "temperature": r.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "repetition_penalty": 1.0,
        "logprobs": r.calculate_log_probs,
    }


def test_trajectory_rows_through_verls_agent_loop_worker(
    tmp_path: Path, tiny_model: Path, tiny_backend: Any, plugin: TestPlugin
) -> None:
    """verl's ``AgentLoopWorker.generate_sequences`` on rows of verl's ``RLHFDataset``: one padded
    row per trajectory whose tokens, masks, logprobs and reward are the trajectory's own."""
    cfg, _ = compose.compose_config(write_config(tmp_path, tiny_model), data_dir=tmp_path)
    client = LocalLLMServerClient(cfg, tiny_backend)
    worker = AgentLoopWorker(cfg, client)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, worker.tokenizer, None)
    batch = DataProto.from_single_dict(collate_fn([dataset[0], dataset[1]]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    batch = batch.repeat(2, interleave=True)

    out = asyncio.run(worker.generate_sequences(batch))

    assert len(out) == 4 and len(plugin.trajectories) == 4
    by_id = {t.trajectory_id: t for t in plugin.trajectories}
    prompt_width = out.batch["prompts"].shape[1]
    for i in range(len(out)):
        meta = out.non_tensor_batch[META_KEY][i]
        traj = by_id[meta["trajectory_id"]]
        assert traj.trainable and len(traj.steps) == 3
        ids, mask = traj.sequence_ids(0), traj.sequence_mask(0)
        n_prompt, n_resp = meta["offset"], int(out.batch["attention_mask"][i, prompt_width:].sum())
        assert out.batch["prompts"][i, prompt_width - n_prompt :].tolist() == ids[:n_prompt]
        assert out.batch["responses"][i, :n_resp].tolist() == ids[n_prompt : n_prompt + n_resp]
        assert out.batch["response_mask"][i, :n_resp].tolist() == mask[n_prompt : n_prompt + n_resp]
        assert mask[n_prompt + n_resp :] == [0] * (
            len(mask) - n_prompt - n_resp
        )  # only trailing env tokens dropped
        logprobs = [lp for s in traj.segments for lp in (s.logprobs or [0.0] * len(s.token_ids))][
            n_prompt : n_prompt + n_resp
        ]
        np.testing.assert_allclose(out.batch["rollout_log_probs"][i, :n_resp].numpy(), logprobs, atol=1e-6)
        assert float(out.batch["rm_scores"][i].sum()) == pytest.approx(traj.reward)
        assert [s["anchor"] for s in meta["steps"]] == [s.anchor for s in traj.steps]
    # every model call was conditioned on a prefix of its trajectory, one sticky request id per episode
    per_episode: dict[str, list[list[int]]] = {}
    for request_id, prompt_ids, params in client.requests:
        per_episode.setdefault(request_id, []).append(prompt_ids)
        assert params["max_new_tokens"] == 8 and params["logprobs"] is True
    assert len(per_episode) == 4 and all(len(calls) == 3 for calls in per_episode.values())


async def _rollout(
    cfg: Any,
    client: LocalLLMServerClient,
    queue: MemoryTransferQueue,
    dataset: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> list[str]:
    """Run every dataset row through verl's TransferQueue worker (``rollout.n`` sessions each)."""
    from verl.trainer.ppo.v1 import agent_loop_tq

    monkeypatch.setattr(agent_loop_tq, "tq", queue)
    cls = tq_worker_class()
    worker = cls.__new__(cls)
    AgentLoopWorker.__init__(worker, cfg, client)
    uids = []
    for i in range(len(dataset)):
        prompt = dict(dataset[i])
        prompt.pop("dummy_tensor", None)
        prompt.update(uid=uuid.uuid4().hex, global_steps=1)
        uids.append(prompt["uid"])
        info = {"step": 1, "sample_index": i, "rollout_n": 0, "validate": False}
        await worker._run_prompt(prompt, sampling(cfg), trajectory=info, trace=False)
    return uids


# one conversation → one row; history window → one row per step, in either layout (the synthetic
# tests in test_verl_advantage.py cover a one-conversation trajectory in the step layout)
@pytest.mark.parametrize(
    ("env", "layout"), [("walk-window", "step"), ("walk", "trajectory"), ("walk-window", "trajectory")]
)
def test_verl_v1_advantage_step_equals_toolgym_gigpo(
    env: str,
    layout: str,
    tmp_path: Path,
    tiny_model: Path,
    tiny_backend: Any,
    plugin: TestPlugin,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows from verl's TQ worker, advantages from the toolgym trainer's V1 advantage step (verl's
    ``_compute_advantage`` → registered ``toolgym_gigpo``): equal to ``compute_token_advantages``."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base

    from toolgym.training.verl import trainer as toolgym_trainer

    cfg, settings = compose.compose_config(
        write_config(tmp_path, tiny_model, env=env, layout=layout, options=GIGPO), data_dir=tmp_path
    )
    queue = MemoryTransferQueue()
    client = LocalLLMServerClient(cfg, tiny_backend)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, client_tokenizer(tiny_model), None)
    uids = asyncio.run(_rollout(cfg, client, queue, dataset, monkeypatch))

    assert [queue.tags[u]["status"] for u in uids] == ["finished", "finished"]
    keys = sorted(k for k in queue.rows if k.rsplit("_", 2)[0] in uids)
    trajs = plugin.trajectories
    assert len(trajs) == 8
    rows_per_traj = 3 if (layout == "step" or env == "walk-window") else 1
    assert len(keys) == 8 * rows_per_traj

    for key in keys:  # the trainer's old-log-prob step runs before the advantage step
        queue.rows[key]["old_log_probs"] = queue.rows[key]["rollout_log_probs"].clone()
    monkeypatch.setattr(toolgym_trainer, "tq", queue)
    monkeypatch.setattr(trainer_base, "tq", queue)
    trainer = toolgym_trainer.ToolgymPPOTrainer.__new__(toolgym_trainer.ToolgymPPOTrainer)
    trainer.config, trainer.toolgym = cfg, settings
    metrics: dict[str, float] = {}
    trainer._compute_advantage(
        KVBatchMeta(keys=keys, tags=[queue.tags[k] for k in keys], partition_id="train"), metrics
    )

    expected = dict(
        zip([t.trajectory_id for t in trajs], compute_token_advantages(trajs, "gigpo", **GIGPO), strict=True)
    )
    nonzero = 0
    for key in keys:
        meta = queue.rows[key]["extra_fields"][META_KEY]
        got = queue.rows[key]["advantages"].numpy()
        want = expected[meta["trajectory_id"]][meta["sequence"]][meta["offset"] : meta["offset"] + got.size]
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=key)
        assert torch.equal(queue.rows[key]["returns"], queue.rows[key]["advantages"])
        nonzero += int(np.count_nonzero(got))
    assert nonzero > 0, "the walk produced no advantage signal at all; the comparison would be vacuous"
    assert metrics["toolgym/trajectories"] == 8 and metrics["toolgym/rows"] == len(keys)


def client_tokenizer(model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model))


def test_failed_episode_fails_its_group(
    tmp_path: Path, tiny_model: Path, tiny_backend: Any, plugin: TestPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An episode that errors is not trained on: its prompt group is marked failed in the queue."""
    from verl_helpers import WalkEnv

    async def explode(self: Any, action: Any) -> Any:
        raise RuntimeError("environment exploded")

    monkeypatch.setattr(WalkEnv, "step", explode)
    cfg, _ = compose.compose_config(write_config(tmp_path, tiny_model), data_dir=tmp_path)
    queue = MemoryTransferQueue()
    client = LocalLLMServerClient(cfg, tiny_backend)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, client_tokenizer(tiny_model), None)
    uids = asyncio.run(_rollout(cfg, client, queue, dataset, monkeypatch))
    assert [queue.tags[u]["status"] for u in uids] == ["failure", "failure"]
    assert not any(k.rsplit("_", 2)[0] in uids for k in queue.rows)
    assert all(t.status_reason and "exploded" in t.status_reason for t in plugin.trajectories)


def test_arpo_group_branches_inside_one_call_and_matches_toolgym_attribution(
    tmp_path: Path, tiny_model: Path, tiny_backend: Any, plugin: TestPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ARPO through verl: one agent-loop call per prompt runs N initial rollouts and the engine's
    forks (tau = 1: always fork after a tool result, up to M), returns all their rows, and verl's
    advantage step gives toolgym's ARPO attribution on them."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base

    from toolgym.training.verl import trainer as toolgym_trainer

    arpo = {"global_rollouts": 4, "initial_rollouts": 2, "tau": 1.0, "beta": 0.0}
    path = write_config(
        tmp_path,
        tiny_model,
        env="probe-walk",
        estimator="arpo",
        options={"mode": "hard"},
        group_size=4,
        arpo=arpo,
    )
    cfg, settings = compose.compose_config(path, data_dir=tmp_path)
    assert cfg.actor_rollout_ref.rollout.n == 1
    queue = MemoryTransferQueue()
    client = LocalLLMServerClient(cfg, tiny_backend)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, client_tokenizer(tiny_model), None)
    uids = asyncio.run(_rollout(cfg, client, queue, dataset, monkeypatch))

    assert [queue.tags[u]["status"] for u in uids] == ["finished", "finished"]
    trajs = plugin.trajectories
    groups: dict[str, list[Any]] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    assert len(groups) == 2 and all(len(g) == 4 for g in groups.values())
    for group in groups.values():
        by_id = {t.trajectory_id: t for t in group}
        forks = [t for t in group if t.parent_id is not None]
        assert len(forks) == 2
        for f in forks:
            assert f.sequence_ids(0)[: f.branch_point] == by_id[f.parent_id].sequence_ids(0)[: f.branch_point]
    keys = sorted(k for k in queue.rows if k.rsplit("_", 2)[0] in uids)
    assert len(keys) == 8
    for key in keys:
        queue.rows[key]["old_log_probs"] = queue.rows[key]["rollout_log_probs"].clone()
    monkeypatch.setattr(toolgym_trainer, "tq", queue)
    monkeypatch.setattr(trainer_base, "tq", queue)
    trainer = toolgym_trainer.ToolgymPPOTrainer.__new__(toolgym_trainer.ToolgymPPOTrainer)
    trainer.config, trainer.toolgym = cfg, settings
    trainer._compute_advantage(
        KVBatchMeta(keys=keys, tags=[queue.tags[k] for k in keys], partition_id="train"), {}
    )
    expected = dict(
        zip(
            [t.trajectory_id for t in trajs],
            compute_token_advantages(trajs, "arpo", mode="hard"),
            strict=True,
        )
    )
    for key in keys:
        meta = queue.rows[key]["extra_fields"][META_KEY]
        got = queue.rows[key]["advantages"].numpy()
        want = expected[meta["trajectory_id"]][meta["sequence"]][meta["offset"] : meta["offset"] + got.size]
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=key)
