"""TRL's ``GRPOTrainer`` on a toolgym environment, beside toolgym's local trainer: the demo's keychain task
from the demo's warm start, held-out success before and after RL with toolgym's own evaluator.

    .venv/bin/python bench/trl_keychain.py                       # 3 seeds x 40 steps x 16 tasks x 8 samples
    .venv/bin/python bench/trl_keychain.py --smoke               # every part at toy sizes (CI)
    .venv/bin/python bench/trl_keychain.py --docs docs/results/trl_keychain.md   # the project's page

TRL trains through :class:`toolgym.training.trl.ToolgymRollout` (its ``rollout_func``: toolgym's engine
plays the episodes from TRL's model, toolgym's environment gives the reward); TRL computes GRPO's
group advantages and takes the clipped update. The baseline, measured in the same run, is the local
trainer (``toolgym train --trainer local --config keychain_gigpo``) with the same estimator, GRPO, and
with its config's own, GiGPO (the figure of ``docs/results/verl_vs_local.md``). All get the same warm
start, training tasks (seeds 10000 × (seed + 1) + i, in order), budget, PPO settings and held-out tasks
(128 of the test split, seed 7000000, greedy), evaluated by the local trainer's evaluator
(``toolgym.training.local.loop.evaluate``). A run whose ``result.json`` exists is not run again, so an
interrupted bench resumes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEYCHAIN = {"min_hops": 1, "max_hops": 3}
ENGINE = {"max_turns": 5, "max_tokens_per_turn": 32, "max_tokens_per_trajectory": 640}
HELDOUT_SEED = 7_000_000
TEMPERATURE = 0.5
LR = 1e-3


def train_seed(seed: int) -> int:
    return 10_000 * (seed + 1)


def updates_per_step(tasks: int) -> int:
    """Optimiser steps per RL step: mini-batches of 8 tasks, as the local config's ``ppo_mini_batch_size``."""
    return tasks // min(8, tasks)


# -- held-out success, with the local trainer's evaluator ----------------------------------------------


def heldout_success(model: Any, tokenizer: Any, eval_tasks: int) -> float:
    """Greedy success on the held-out keychain tasks, by ``toolgym.training.local.loop.evaluate``."""
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.registry import get_registry
    from toolgym.core.rollout.policy import ModelPolicy
    from toolgym.training.local.config import EvalConfig, PPOConfig, RLConfig
    from toolgym.training.local.loop import eval_engine, evaluate

    rl = RLConfig(
        env="keychain",
        env_kwargs=KEYCHAIN,
        engine=ENGINE,
        ppo=PPOConfig(temperature=TEMPERATURE),
        eval=EvalConfig(num_tasks=eval_tasks, first_task=0, seed=HELDOUT_SEED, env_kwargs={"split": "test"}),
    )

    async def run() -> float:
        backend = TransformersBackend(model, tokenizer=tokenizer, max_batch_size=rl.max_batch_size)
        try:
            engine = eval_engine(rl, ModelPolicy(backend, rl.engine_config()), get_registry(), rl.eval)
            return (await evaluate(engine, rl.env, rl.eval)).success
        finally:
            await backend.aclose()

    training = model.training
    try:
        return asyncio.run(run())
    finally:
        model.train(training)


# -- TRL -------------------------------------------------------------------------------------------------


def run_trl(args: argparse.Namespace, seed: int, model_dir: Path) -> dict[str, Any]:
    """One TRL GRPO run; its held-out curve, seconds per RL step and where they go."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.core.rollout.config import EngineConfig
    from toolgym.training.trl import ToolgymRollout

    out = args.out / f"trl-seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rollout = ToolgymRollout(
        "keychain", env_kwargs=KEYCHAIN, engine=EngineConfig(**ENGINE), sandbox_backend="none"
    )
    per_step = updates_per_step(args.tasks)
    rollout_s: list[float] = []
    train: list[float] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        t0 = time.perf_counter()
        out = rollout(prompts, trainer)
        rollout_s.append(time.perf_counter() - t0)
        rewards = [t.reward if t.status.value == "ok" else 0.0 for t in rollout.last_trajectories]
        train.append(sum(r >= 1.0 - 1e-9 for r in rewards) / len(rewards))
        return out

    curve = [(0, heldout_success(model, tokenizer, args.eval_tasks))]
    print(f"  trl seed {seed}: held-out before RL {100 * curve[0][1]:.1f} %", flush=True)
    step_s: list[float] = []
    steps, test_freq, eval_tasks = args.steps, args.test_freq, args.eval_tasks

    class Progress(TrainerCallback):
        """Times each RL step (``per_step`` optimiser steps) and evaluates every ``test_freq`` of them."""

        began = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % per_step == 0:
                self.began = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % per_step:
                return
            step_s.append(time.perf_counter() - self.began)
            k = state.global_step // per_step
            line = f"  trl seed {seed}: RL step {k}/{steps}, train success {100 * train[-1]:.1f} %, {step_s[-1]:.1f} s"
            if k == steps or (test_freq and k % test_freq == 0):
                curve.append((k, heldout_success(kwargs["model"], tokenizer, eval_tasks)))
                line += f", held-out {100 * curve[-1][1]:.1f} %"
            print(line, flush=True)

    config = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        log_level="warning",
        max_steps=args.steps * per_step,
        per_device_train_batch_size=args.tasks * args.group // per_step,
        steps_per_generation=per_step,
        num_generations=args.group,
        shuffle_dataset=False,  # tasks in order, as the local trainer takes them
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        gradient_checkpointing=False,  # TRL's default; a tiny model has no activations worth recomputing
        epsilon=0.2,
        loss_type="grpo",  # per-sequence token mean, then the batch mean: the local config's seq-mean-token-mean
        beta=0.0,
        temperature=TEMPERATURE,
        seed=seed,
        dataloader_num_workers=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "rollout_func is experimental"
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            args=config,
            train_dataset=rollout.dataset(num_tasks=args.steps * args.tasks, seed=train_seed(seed)),
            rollout_func=rollout_func,
            reward_funcs=rollout.reward,
            callbacks=[Progress()],
        )
        try:
            trainer.train()
        finally:
            rollout.close()
    return {
        "trainer": "trl",
        "estimator": "grpo",
        "seed": seed,
        "curve": curve,
        "train": train,
        "step_s": step_s,
        "wall_s": time.monotonic() - started,
        "phases": {
            "rollout": statistics.median(rollout_s),  # one generation round per RL step
            "update": statistics.median(s - r for s, r in zip(step_s, rollout_s, strict=False)),
        },
    }


# -- the local trainer -------------------------------------------------------------------------------


def local_config(args: argparse.Namespace, estimator: str) -> Path:
    """``keychain_gigpo`` with its estimator swapped (GRPO takes none of GiGPO's options)."""
    from omegaconf import OmegaConf

    config = OmegaConf.load(ROOT / "training" / "local" / "configs" / "keychain_gigpo.yaml")
    if estimator != "gigpo":
        config.toolgym.advantage = {"estimator": estimator}
    path = args.out / f"keychain_{estimator}.yaml"
    OmegaConf.save(config, path)
    return path


def run_local(args: argparse.Namespace, seed: int, estimator: str) -> dict[str, Any]:
    out = args.out / f"local-{estimator}-seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    per_step = updates_per_step(args.tasks)
    argv = [
        "train",
        "--trainer",
        "local",
        "--config",
        str(local_config(args, estimator)),
        f"verl.trainer.total_training_steps={args.steps}",
        f"verl.data.train_batch_size={args.tasks}",
        f"verl.actor_rollout_ref.actor.ppo_mini_batch_size={args.tasks // per_step}",
        f"toolgym.group_size={args.group}",
        f"toolgym.train={{num_tasks: {args.steps * args.tasks}, first_task: 0, seed: {train_seed(seed)}}}",
        f"toolgym.val.num_tasks={args.eval_tasks}",
        f"verl.trainer.test_freq={args.test_freq}",
        f"verl.trainer.save_freq={args.steps}",
        f"verl.trainer.default_local_dir={out}",
    ]
    started = time.monotonic()
    log = out / "log.txt"
    with log.open("w") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "toolgym", *argv], stdout=fh, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        raise SystemExit(
            f"the local trainer exited {done.returncode}; its log is {log}:\n{log.read_text()[-3000:]}"
        )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "trainer": "local",
        "estimator": estimator,
        "seed": seed,
        "curve": [(r["step"], r["heldout"]["success"]) for r in records if "heldout" in r],
        "train": [r["train_success"] for r in records if "train_success" in r],
        "step_s": [r["wall_s"] for r in records if "wall_s" in r],
        "wall_s": time.monotonic() - started,
        "phases": {
            name: statistics.median(r[key] for r in records if key in r)
            for name, key in (("rollout", "sample_s"), ("update", "update_s"))
            if any(key in r for r in records)
        },
    }


# -- the page ----------------------------------------------------------------------------------------


def label(result: dict[str, Any]) -> str:
    return f"{'TRL' if result['trainer'] == 'trl' else 'local'} {result['estimator'].upper().replace('GIGPO', 'GiGPO')}"


def mean_std(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * spread:.1f}"


def summary(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(label(r) for r in results):
        runs = [r for r in results if label(r) == name]
        before = [r["curve"][0][1] for r in runs]
        after = [r["curve"][-1][1] for r in runs]
        out[name] = {
            "before": before,
            "after": after,
            "gain": [a - b for a, b in zip(after, before, strict=True)],
            "step_s": statistics.median(s for r in runs for s in r["step_s"]),
            "wall_s": statistics.mean(r["wall_s"] for r in runs),
            "phases": {
                k: statistics.median(r["phases"][k] for r in runs if k in r["phases"])
                for k in ("rollout", "update")
                if any(k in r["phases"] for r in runs)
            },
        }
    return out


def plot(results: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"TRL GRPO": "tab:red", "local GRPO": "tab:blue", "local GiGPO": "tab:green"}
    fig, ax = plt.subplots(figsize=(6, 3.6))
    shown: set[str] = set()
    for r in results:
        name = label(r)
        steps, values = zip(*r["curve"], strict=True)
        ax.plot(
            steps,
            [100 * v for v in values],
            color=colors.get(name),
            alpha=0.7,
            label=None if name in shown else name,
        )
        shown.add(name)
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out success (%)")
    ax.set_title("keychain from the demo's warm start: TRL and the local trainer")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def page(args: argparse.Namespace, results: list[dict[str, Any]], png: Path, command: str) -> str:
    rows = summary(results)
    seeds = sorted({r["seed"] for r in results})
    per_step = updates_per_step(args.tasks)
    import trl

    lines = [
        "# TRL's GRPOTrainer on toolgym's keychain, beside the local trainer",
        "",
        "Written by `bench/trl_keychain.py`; do not edit by hand.",
        "",
        "## Protocol",
        "",
        "- **Task**: keychain (the demo's task), 1-3 hops, at most 5 turns of 32 tokens; held-out: "
        f"{args.eval_tasks} tasks of the test split (seed {HELDOUT_SEED}), greedy, the same tasks for every run, "
        "scored by the local trainer's evaluator (`toolgym.training.local.loop.evaluate`).",
        "- **Model**: the demo's warm start (`warmstart:keychain`: the tiny model after its SFT on scripted "
        "episodes), the same weights for every run.",
        f"- **Budget**: {args.steps} RL steps × {args.tasks} tasks × {args.group} samples (training tasks in order, "
        f"seeds 10000 × (seed + 1) + i), {per_step} optimiser step(s) per RL step (mini-batches of "
        f"{args.tasks // per_step} tasks), PPO-clip 0.2, lr {LR:g} constant, no KL, grad-norm clip 1.0, sampling at "
        f"T = {TEMPERATURE}; seeds {', '.join(map(str, seeds))}.",
        f'- **TRL**: trl {trl.__version__}\'s `GRPOTrainer` with `rollout_func=ToolgymRollout("keychain")` and '
        "`reward_funcs=rollout.reward` (`toolgym.training.trl`): toolgym's engine plays the episodes from TRL's "
        "model, the environment's reward is the reward; TRL's GRPO advantages (group mean and std), "
        "`loss_type=grpo` (the local config's seq-mean-token-mean), `steps_per_generation` = optimiser steps per RL step.",
        "- **Baseline, same run**: the local trainer, `toolgym train --trainer local --config keychain_gigpo`, with "
        + " and ".join(
            "GRPO (the estimator TRL uses)"
            if e == "grpo"
            else "its config's own GiGPO (γ 0.95, ω 1.0)"
            if e == "gigpo"
            else e.upper()
            for e in dict.fromkeys(r["estimator"] for r in results if r["trainer"] == "local")
        )
        + ".",
        f"- **Hardware**: {os.cpu_count()} CPU cores shared with other jobs, no GPU"
        + (f" ({args.hardware_note})." if args.hardware_note else "."),
        f"- **Reproduce**: `{command}` (the page alone, from the records: add `--report-only`)",
        "",
        "## Held-out success (%) before and after RL",
        "",
        "| trainer | estimator | before | after | gain (points) | seconds per RL step (median) | rollout / update (s) | wall per run (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        gain = [100 * g for g in row["gain"]]
        spread = statistics.stdev(gain) if len(gain) > 1 else 0.0
        trainer, estimator = name.split(" ", 1)
        phases = row["phases"]
        split = f"{phases['rollout']:.2f} / {phases['update']:.2f}" if len(phases) == 2 else "–"
        lines.append(
            f"| {trainer} | {estimator} | {mean_std(row['before'])} | {mean_std(row['after'])} | "
            f"{statistics.mean(gain):+.1f} ± {spread:.1f} | {row['step_s']:.2f} | {split} | {row['wall_s']:.0f} |"
        )
    lines += [
        "",
        "Cells: mean ± std over seeds. The local trainer's longer run (40 steps, GiGPO, mini-batches of 8 tasks) is "
        "on [verl_vs_local.md](verl_vs_local.md), with the same warm start, tasks and evaluator.",
        "",
        "Per seed (held-out success at each evaluation):",
        "",
    ]
    for r in sorted(results, key=lambda r: (label(r), r["seed"])):
        curve = ", ".join(f"step {s}: {100 * v:.1f}" for s, v in r["curve"])
        lines.append(f"- {label(r)}, seed {r['seed']}: {curve}")
    lines += ["", f"![learning curves]({png.name})", "", "## What came out", ""]
    for name, row in rows.items():
        gain = [100 * g for g in row["gain"]]
        spread = statistics.stdev(gain) if len(gain) > 1 else 0.0
        clear = statistics.mean(gain) > spread
        lines.append(
            f"- {name}: held-out success rose in {sum(g > 0 for g in gain)} of {len(gain)} seeds; the mean gain "
            f"({statistics.mean(gain):+.1f} points) is {'above' if clear else 'within'} the spread over seeds "
            f"({spread:.1f}){'' if clear else ': at this budget the gain is not told apart from noise'}."
        )
    if "TRL GRPO" in rows and "local GRPO" in rows:
        t, lo = rows["TRL GRPO"], rows["local GRPO"]
        diff = statistics.mean(t["gain"]) - statistics.mean(lo["gain"])
        n1, n2 = len(t["gain"]), len(lo["gain"])
        se = (
            (statistics.variance(t["gain"]) / n1 + statistics.variance(lo["gain"]) / n2) ** 0.5
            if n1 > 1 and n2 > 1
            else 0.0
        )
        verdict = (
            "within two standard errors: not told apart from seed noise"
            if abs(diff) <= 2 * se
            else "beyond two standard errors"
        )
        lines.append(
            f"- Same estimator (GRPO), TRL − local: {100 * diff:+.1f} points of gain"
            + (f" (standard error {100 * se:.1f}: {verdict})." if se > 0 else ".")
        )
        lines.append(
            f"- One RL step took {t['step_s']:.2f} s through TRL against {lo['step_s']:.2f} s in the local trainer in "
            "these runs (see Hardware: the machine's load moves these figures): rollouts are toolgym's engine in both; "
            "the update is TRL's own (its old-logprob pass and forward/backward over left-padded rows)."
        )
    return "\n".join(lines) + "\n"


# -- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=16, help="tasks per RL step")
    parser.add_argument("--group", type=int, default=8, help="samples per task")
    parser.add_argument("--eval-tasks", type=int, default=128)
    parser.add_argument("--test-freq", type=int, default=10)
    parser.add_argument(
        "--baselines",
        default="grpo,gigpo",
        help="local trainer estimators run beside TRL (comma-separated; '' none)",
    )
    parser.add_argument(
        "--trainers",
        default="trl,local",
        help="which runs this process makes (two processes may share --out)",
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/trl_keychain"))
    parser.add_argument("--docs", type=Path, default=None, help="write the page (and its PNG) here")
    parser.add_argument("--hardware-note", default="")
    parser.add_argument(
        "--report-only", action="store_true", help="write the page from the runs' result.json"
    )
    parser.add_argument("--smoke", action="store_true", help="every part at toy sizes: 1 seed, 2 steps")
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.steps, args.tasks, args.group, args.eval_tasks, args.test_freq = [0], 2, 2, 4, 8, 0
        args.baselines = "grpo"
    if args.tasks % min(8, args.tasks):
        raise SystemExit(f"--tasks must be a multiple of 8 (or below 8), got {args.tasks}")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    from toolgym.training.runner import demo_warm_start

    runs = [("trl", "grpo")] if "trl" in args.trainers.split(",") else []
    if "local" in args.trainers.split(","):
        runs += [("local", e) for e in args.baselines.split(",") if e]
    model_dir = None if args.report_only else demo_warm_start()
    results = []
    for trainer, estimator in runs:  # every seed of TRL first: the runs a cut-short bench must have
        for seed in args.seeds:
            name = f"trl-seed{seed}" if trainer == "trl" else f"local-{estimator}-seed{seed}"
            saved = args.out / name / "result.json"
            if saved.exists():
                print(f"{name}: kept from {saved}")
                results.append(json.loads(saved.read_text()))
                continue
            if args.report_only:
                continue
            print(f"{name}: running", flush=True)
            assert model_dir is not None
            result = run_trl(args, seed, model_dir) if trainer == "trl" else run_local(args, seed, estimator)
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(result))
            results.append(result)
            curve = ", ".join(f"{s}: {100 * v:.1f}" for s, v in result["curve"])
            print(
                f"{name}: held-out {curve}; {statistics.median(result['step_s']):.2f} s per RL step",
                flush=True,
            )
    if not results:
        raise SystemExit(f"no results under {args.out}")
    target = args.docs or args.out / "trl_keychain.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    png = target.with_name(target.stem + "_learning_curves.png")
    plot(results, png)
    shown: list[str] = []
    skip = False
    for a in sys.argv[1:]:  # the command that makes these runs: not the page-only or note flags
        if skip or a in ("--report-only", "--hardware-note", "--trainers"):
            skip = a in ("--hardware-note", "--trainers")
            continue
        shown.append(a)
    command = " ".join(["python bench/trl_keychain.py", *shown])
    target.write_text(page(args, results, png, command.strip()))
    for name, row in summary(results).items():
        print(
            f"{name}: held-out {mean_std(row['before'])} -> {mean_std(row['after'])} %, "
            f"{row['step_s']:.2f} s per RL step"
        )
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
