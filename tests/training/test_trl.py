"""TRL's ``GRPOTrainer`` trains on a toolgym environment through :class:`toolgym.training.trl.ToolgymRollout`:
two GRPO steps on the CPU, from the demo's warm start, on keychain."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.required import need_module

need_module("trl")

import torch

from toolgym.core.errors import ConfigError
from toolgym.core.rollout.config import EngineConfig
from toolgym.training.trl import ToolgymRollout

KEYCHAIN = {"min_hops": 1, "max_hops": 3}
ENGINE = EngineConfig(max_turns=5, max_tokens_per_turn=32, max_tokens_per_trajectory=640)


def grpo_trainer(model_dir: Path, rollout: ToolgymRollout, out: Path, *, steps: int) -> Any:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_steps=steps,
        per_device_train_batch_size=16,
        num_generations=4,  # 4 tasks x 4 samples per step
        learning_rate=1e-3,
        gradient_checkpointing=False,
        lr_scheduler_type="constant",
        loss_type="grpo",
        beta=0.0,
        temperature=0.5,
        seed=0,
        dataloader_num_workers=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "rollout_func is experimental"
        return GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            args=args,
            train_dataset=rollout.dataset(num_tasks=64, seed=10_000),
            rollout_func=rollout,
            reward_funcs=rollout.reward,
        )


def test_two_trl_grpo_steps_train_on_keychain_with_toolgyms_reward(tmp_path: Path) -> None:
    from toolgym.training.runner import demo_warm_start

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    played: list[Any] = []
    rollout = ToolgymRollout(
        "keychain", env_kwargs=KEYCHAIN, engine=ENGINE, sandbox_backend="none", on_trajectory=played.append
    )
    trainer = grpo_trainer(demo_warm_start(), rollout, tmp_path, steps=2)
    before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    try:
        trainer.train()
    finally:
        rollout.close()

    rounds = [
        [t.reward for t in played[:16]],
        [t.reward for t in played[16:]],
    ]  # a round ends before the next starts
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "no weight changed in two GRPO steps"
    # every episode was toolgym's: keychain's tool ran in it and its reward is what TRL logged
    assert len(played) == 32 and all(t.env == "keychain" and t.status.value == "ok" for t in played)
    assert any(call.name == "get" for t in played for s in t.steps for call in s.tool_calls)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    for record, rewards in zip(logged, rounds, strict=True):
        assert record["reward"] == pytest.approx(sum(rewards) / len(rewards))
        assert record["rewards/toolgym_reward/mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert 0 < sum(map(sum, rounds)) < 32, "every reward equal: nothing to learn from"


def test_rows_are_the_trajectories_tokens_with_their_loss_mask() -> None:
    """Token faithfulness: prompt + completion is the recorded sequence, env_mask its loss mask."""
    from toolgym.core.trajectory import Segment, Status, Trajectory

    traj = Trajectory(
        trajectory_id="t",
        group_id="g",
        task="keychain-0",
        env="keychain",
        segments=[
            Segment(role="prompt", token_ids=[5, 6, 7], loss_mask=[0, 0, 0]),
            Segment(role="assistant", token_ids=[8, 9], loss_mask=[1, 1], logprobs=[-0.5, -0.25]),
            Segment(role="tool", token_ids=[10, 11], loss_mask=[0, 0]),
            Segment(role="assistant", token_ids=[12], loss_mask=[1], logprobs=[-1.0]),
        ],
        reward=1.0,
        status=Status.OK,
        terminated=True,
    )
    cut = traj.model_copy(update={"terminated": False, "truncated": True, "reward": 0.0})
    failed = traj.model_copy(update={"status": Status.ERROR, "segments": traj.segments[:1]})
    rollout = ToolgymRollout("keychain", sandbox_backend="none")
    out = rollout._outputs([traj, cut, failed], 2)
    assert out["prompt_ids"] == [[5, 6, 7]] * 3
    # the environment ended the first: its turn is closed with EOS (masked); a limit cut the second
    assert out["completion_ids"] == [[8, 9, 10, 11, 12, 2], [8, 9, 10, 11, 12], [2]]
    assert out["env_mask"] == [[1, 1, 0, 0, 1, 0], [1, 1, 0, 0, 1], [0]]
    assert out["logprobs"] == [[-0.5, -0.25, 0.0, 0.0, -1.0, 0.0], [-0.5, -0.25, 0.0, 0.0, -1.0], [0.0]]
    assert out["toolgym_reward"] == [1.0, 0.0, None]
    assert rollout.reward([], [], toolgym_reward=out["toolgym_reward"]) == [1.0, 0.0, None]


def test_a_row_that_names_no_task_is_refused() -> None:
    rollout = ToolgymRollout("keychain", sandbox_backend="none")
    trainer = SimpleNamespace(
        state=SimpleNamespace(global_step=0), model=None, accelerator=SimpleNamespace(process_index=0)
    )
    with pytest.raises(ConfigError, match="names no toolgym task"):
        rollout._requests(["What is 2 + 2?"], trainer)  # type: ignore[arg-type]
    rows = rollout.dataset(num_tasks=2, seed=5)["prompt"]
    requests = rollout._requests([rows[0], rows[0], rows[1]], trainer)  # type: ignore[arg-type]
    assert [(r.task_index, r.sample_index, r.seed) for r in requests] == [(0, 0, 5), (0, 1, 5), (1, 0, 6)]
    assert requests[0].group_id == requests[1].group_id != requests[2].group_id


def test_the_docs_trl_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TRL example of docs/other-trainers.md runs as written."""
    import contextlib
    import io
    import re

    docs = Path(__file__).resolve().parents[2] / "docs"
    pattern = r"<!-- example: trl -->\n```python\n(.*?)```"
    found = [
        m.group(1) for m in [re.search(pattern, (docs / "other-trainers.md").read_text(), re.DOTALL)] if m
    ]
    assert found, "no TRL example in docs/other-trainers.md"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # the example's output_dir
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        exec(compile(found[0], "docs/other-trainers.md", "exec"), {"__name__": "doc_example"})
    assert out.getvalue().rstrip().splitlines()[-1] == "keychain 16", out.getvalue()[-2000:]
