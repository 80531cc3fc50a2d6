"""Seconds per RL step of verl's own trainer (on the CPU) against the local trainer, on ALFWorld's
results setting: the same environment, episode limits, estimator, group size and model, a few
steps each, run one after the other in one invocation; where verl's step goes (its ``timing_s/*``).

    .venv/bin/python bench/verl_step_time.py                       # 4 tasks x 8 samples, 3 steps each
    .venv/bin/python bench/verl_step_time.py --tasks 16 --steps 2  # the results rows' batch

The local side is ``training/local/configs/alfworld_gigpo.yaml`` (the config of the ALFWorld rows on
docs/results/results.md) with the model, batch and step count overridden; the verl side is
``training/verl/configs/alfworld_gigpo.yaml`` on the CPU with the local config's episode limits, group,
estimator options and PPO settings as overrides (verl has no ``episode-mean-token-mean``: it gets
``seq-mean-token-mean``; the compute per row is the same). The model is the tiny one, untrained unless
``--model`` names another (``warmstart:alfworld`` after ``toolgym warmstart --env alfworld``): an
untrained model plays every episode to the step limit, the slowest case for both trainers alike; both
charge an invalid action 0.1 (the verl example's penalty), so that its groups still have advantages
and both trainers run their whole update.
The first step of each run warms caches and is left out of the median when there are more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCAL_CONFIG = ROOT / "training" / "local" / "configs" / "alfworld_gigpo.yaml"
VERL_CONFIG = ROOT / "training" / "verl" / "configs" / "alfworld_gigpo.yaml"
sys.path.insert(0, str(ROOT))

from bench._common import run_toolgym  # noqa: E402


def common(args: argparse.Namespace, out: Path) -> list[str]:
    return [
        f"verl.actor_rollout_ref.model.path={args.model}",
        f"verl.data.train_batch_size={args.tasks}",
        f"verl.trainer.total_training_steps={args.steps}",
        f"verl.trainer.default_local_dir={out}",
        f"toolgym.group_size={args.group}",
    ]


def verl_overrides(args: argparse.Namespace, out: Path) -> list[str]:
    """The verl example made into the local ALFWorld row's setting."""
    return [
        *common(args, out),
        "verl.trainer.device=cpu",
        "toolgym.env_kwargs={history_length: 2, max_steps: 30}",
        "toolgym.engine={max_turns: 30, max_tokens_per_turn: 32, max_tokens_per_trajectory: 1024}",
        "toolgym.advantage={estimator: gigpo, options: {gamma: 0.95, omega: 1.0, mode: mean_norm, invalid_penalty: 0.1}}",
        "verl.data.max_prompt_length=1024",
        "verl.data.max_response_length=32",
        "verl.actor_rollout_ref.actor.optim.lr=3.0e-4",
        "verl.actor_rollout_ref.actor.optim.weight_decay=0.0",
        f"verl.actor_rollout_ref.actor.ppo_mini_batch_size={args.tasks}",
        "verl.actor_rollout_ref.actor.use_dynamic_bsz=true",
        "verl.actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384",
        "verl.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "verl.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=16384",
        "verl.actor_rollout_ref.actor.clip_ratio_low=0.2",
        "verl.actor_rollout_ref.actor.clip_ratio_high=0.28",
        "verl.actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "verl.actor_rollout_ref.actor.use_kl_loss=false",
        "verl.actor_rollout_ref.actor.entropy_coeff=0.0",
        "verl.actor_rollout_ref.rollout.temperature=1.0",
        "verl.actor_rollout_ref.model.use_remove_padding=false",
        "verl.actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "verl.trainer.total_epochs=1",
        "verl.trainer.val_before_train=false",
        "verl.trainer.test_freq=-1",
        "verl.trainer.save_freq=-1",
        "verl.trainer.logger=[console,file]",
        "verl.trainer.project_name=verl_step_time",
        "verl.trainer.experiment_name=alfworld",
    ]


def local_overrides(args: argparse.Namespace, out: Path) -> list[str]:
    return [
        *common(args, out),
        f"verl.actor_rollout_ref.actor.ppo_mini_batch_size={args.tasks}",
        "verl.trainer.test_freq=0",  # no held-out evaluation, before training or after
        "verl.trainer.val_before_train=false",
        "verl.trainer.save_freq=0",
        # an invalid action costs 0.1 (verl's example's value): an untrained model, which never succeeds,
        # still gets step advantages, so both trainers run their whole update
        "toolgym.advantage.options.invalid_penalty=0.1",
    ]


def steady(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4, help="tasks per RL step")
    parser.add_argument("--group", type=int, default=8, help="samples per task")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--out", type=Path, default=Path("runs/verl_step_time"))
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"ALFWorld (alfworld-verl, at most 30 steps of 32 tokens), {args.tasks} tasks x {args.group} samples, "
        f"model {args.model}, {args.steps} RL steps per trainer",
        flush=True,
    )

    print("local trainer ...", flush=True)
    local_dir = out / "local"
    local_dir.mkdir(exist_ok=True)
    local_wall = run_toolgym(
        ["train", "--trainer", "local", "--config", str(LOCAL_CONFIG), *local_overrides(args, local_dir)],
        local_dir / "log.txt",
    )
    records = [json.loads(x) for x in (local_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    records = [r for r in records if "wall_s" in r]
    local = {
        "step": steady([r["wall_s"] for r in records]),
        "rollout": steady([r["sample_s"] for r in records]),
        "update": steady([r["update_s"] for r in records]),
    }

    print("verl's trainer ...", flush=True)
    verl_dir = out / "verl"
    verl_dir.mkdir(exist_ok=True)
    env = {**os.environ, "VERL_FILE_LOGGER_ROOT": str(verl_dir / "logs")}
    verl_wall = run_toolgym(
        ["train", "--config", str(VERL_CONFIG), *verl_overrides(args, verl_dir)], verl_dir / "log.txt", env
    )
    rows = [
        json.loads(x)["data"]
        for x in (verl_dir / "logs" / "verl_step_time" / "alfworld.jsonl").read_text().splitlines()
        if x.strip()
    ]
    rows = [r for r in rows if "timing_s/step" in r]
    phases: dict[str, Any] = {
        k.removeprefix("timing_s/"): steady([float(r[k]) for r in rows if k in r])
        for k in sorted({k for r in rows for k in r if k.startswith("timing_s/")})
    }

    print(f"\nseconds per RL step (median of steps 2..{args.steps}):")
    print(
        f"  local trainer: {local['step']:.2f} s (rollout {local['rollout']:.2f}, update {local['update']:.2f})"
    )
    print(
        f"  verl's trainer: {phases['step']:.2f} s = {phases['step'] / local['step']:.1f}x the local trainer's"
    )
    for name, value in phases.items():
        if name != "step":
            print(f"    {name}: {value:.2f} s")
    print(f"wall per run: local {local_wall:.0f} s, verl {verl_wall:.0f} s (Ray and its workers included)")
    (out / "result.json").write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "local": local, "verl": phases}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    main()
