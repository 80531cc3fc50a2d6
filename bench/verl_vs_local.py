"""verl's own trainer against the local reference trainer: the demo's keychain task, the demo's warm
start, the same seeds, tasks, group size, estimator (GiGPO) and budget; held-out success before and
after RL, learning curves, and seconds per RL step of each, measured in the same run.

    .venv/bin/python bench/verl_vs_local.py                      # 3 seeds x 40 steps x 16 tasks x 8 samples
    .venv/bin/python bench/verl_vs_local.py --smoke              # every part at toy sizes (CI)
    .venv/bin/python bench/verl_vs_local.py --docs docs/results/verl_vs_local.md   # the project's page

Both trainers read the same kind of config file (``training/local/configs/keychain_gigpo.yaml`` for the
local one, ``training/verl/configs/keychain_cpu.yaml`` with the keychain_gigpo settings as overrides for
verl, on the CPU: ``training/verl/README.md``, "verl on a laptop"); both evaluate greedily on the same
held-out tasks (the test split, ``toolgym.val``), the local trainer with its own evaluator, verl with its
validation (``val-core/.../reward/mean@1``; keychain's reward is success). A run whose ``result.json``
exists is not run again, so an interrupted bench resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import run_toolgym  # noqa: E402


def shared(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """What both trainers get: budget, seeds, held-out tasks."""
    return {
        "steps": args.steps,
        "tasks": args.tasks,
        "group": args.group,
        "eval_tasks": args.eval_tasks,
        "test_freq": args.test_freq,
        "train_seed": 10_000 * (seed + 1),
    }


def local_overrides(args: argparse.Namespace, seed: int, out: Path) -> list[str]:
    s = shared(args, seed)
    return [
        f"verl.trainer.total_training_steps={s['steps']}",
        f"verl.data.train_batch_size={s['tasks']}",
        f"verl.actor_rollout_ref.actor.ppo_mini_batch_size={min(8, s['tasks'])}",
        f"toolgym.group_size={s['group']}",
        f"toolgym.val.num_tasks={s['eval_tasks']}",
        f"verl.trainer.test_freq={s['test_freq']}",
        f"verl.trainer.save_freq={s['steps']}",
        f"toolgym.train.seed={s['train_seed']}",
        f"verl.trainer.default_local_dir={out}",
    ]


def verl_overrides(args: argparse.Namespace, seed: int, out: Path, model: Path) -> list[str]:
    """``keychain_cpu`` made into ``keychain_gigpo``: the local config's task, engine, estimator and PPO settings."""
    s = shared(args, seed)
    return [
        f"verl.actor_rollout_ref.model.path={model}",
        "toolgym.env_kwargs={min_hops: 1, max_hops: 3}",
        "toolgym.advantage={estimator: gigpo, options: {gamma: 0.95, omega: 1.0}}",
        "toolgym.layout=trajectory",  # one row per episode, as the local trainer's (GiGPO's step advantages on its tokens)
        f"toolgym.group_size={s['group']}",
        "toolgym.engine={max_turns: 5, max_tokens_per_turn: 32, max_tokens_per_trajectory: 640}",
        f"toolgym.train={{num_tasks: {s['steps'] * s['tasks']}, first_task: 0, seed: {s['train_seed']}}}",
        f"toolgym.val={{num_tasks: {s['eval_tasks']}, first_task: 0, seed: 7000000, env_kwargs: {{split: test}}}}",
        f"verl.data.train_batch_size={s['tasks']}",
        "verl.data.max_prompt_length=1024",
        # a row is never cut: the response holds the engine's whole trajectory budget, as the local
        # trainer's rows do (at 128, the longest 3-hop episodes lost their last turn and its answer)
        "verl.data.max_response_length=640",
        # the local trainer's update, key by key where verl's defaults differ: tasks in the order the
        # toolgym dataset lists them, rows not reordered by length, rows shuffled across mini-batches,
        # and no dual clip (PPO's clip on both sides only)
        "verl.data.shuffle=false",
        "verl.trainer.balance_batch=false",
        "verl.actor_rollout_ref.actor.shuffle=true",
        "verl.actor_rollout_ref.actor.clip_ratio_c=1.0e9",
        "verl.actor_rollout_ref.actor.optim.lr=1.0e-3",
        "verl.actor_rollout_ref.actor.optim.weight_decay=0.0",  # the local trainer's AdamW (verl's default is 0.01)
        f"verl.actor_rollout_ref.actor.ppo_mini_batch_size={min(8, s['tasks'])}",
        # step rows: their number varies with the episodes' lengths, so micro-batches go by tokens
        "verl.actor_rollout_ref.actor.use_dynamic_bsz=true",
        "verl.actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384",
        "verl.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "verl.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=16384",
        "verl.actor_rollout_ref.actor.ppo_epochs=1",
        "verl.actor_rollout_ref.actor.clip_ratio_low=0.2",
        "verl.actor_rollout_ref.actor.clip_ratio_high=0.2",
        "verl.actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "verl.actor_rollout_ref.actor.grad_clip=1.0",
        "verl.actor_rollout_ref.rollout.temperature=0.5",
        f"verl.trainer.total_training_steps={s['steps']}",
        "verl.trainer.total_epochs=1",
        "verl.trainer.val_before_train=true",
        f"verl.trainer.test_freq={s['test_freq']}",
        "verl.trainer.save_freq=-1",
        "verl.trainer.project_name=verl_vs_local",
        f"verl.trainer.experiment_name=verl-seed{seed}",
        f"verl.trainer.default_local_dir={out}",
        *args.verl_set,
    ]


def run_local(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    out = args.out / f"local-seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    wall = run_toolgym(
        ["train", "--trainer", "local", "--config", "keychain_gigpo", *local_overrides(args, seed, out)],
        out / "log.txt",
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [(r["step"], r["heldout"]["success"]) for r in records if "heldout" in r]
    steps = [r["wall_s"] for r in records if "wall_s" in r]
    phases = {
        name: statistics.median(r[key] for r in records if key in r)
        for name, key in (("rollout", "sample_s"), ("update", "update_s"))
        if any(key in r for r in records)
    }
    return {
        "trainer": "local",
        "seed": seed,
        "curve": curve,
        "step_s": steps,
        "wall_s": wall,
        "phases": phases,
    }


def run_verl(args: argparse.Namespace, seed: int, model: Path) -> dict[str, Any]:
    out = args.out / f"verl-seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "VERL_FILE_LOGGER_ROOT": str(out / "logs")}
    wall = run_toolgym(
        ["train", "--config", "keychain_cpu", *verl_overrides(args, seed, out, model)], out / "log.txt", env
    )
    log = out / "logs" / "verl_vs_local" / f"verl-seed{seed}.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    key = "val-core/toolgym/keychain/reward/mean@1"
    curve = [(r["step"], float(r["data"][key])) for r in rows if key in r["data"]]
    steps = [float(r["data"]["timing_s/step"]) for r in rows if "timing_s/step" in r["data"]]
    timed = [r["data"] for r in rows if "timing_s/step" in r["data"]]
    phases = {
        key.removeprefix("timing_s/"): statistics.median(float(d[key]) for d in timed if key in d)
        for key in sorted({k for d in timed for k in d if k.startswith("timing_s/") and k != "timing_s/step"})
    }
    return {
        "trainer": "verl",
        "extra_overrides": list(args.verl_set),
        "seed": seed,
        "curve": curve,
        "step_s": steps,
        "wall_s": wall,
        "phases": phases,
    }


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * spread:.1f}"


def summary(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for trainer in ("local", "verl"):
        runs = [r for r in results if r["trainer"] == trainer]
        if not runs:
            continue
        before = [r["curve"][0][1] for r in runs]
        after = [r["curve"][-1][1] for r in runs]
        out[trainer] = {
            "before": before,
            "after": after,
            "gain": [a - b for a, b in zip(after, before, strict=True)],
            "step_s": statistics.median(s for r in runs for s in r["step_s"]),
            "wall_s": statistics.mean(r["wall_s"] for r in runs),
        }
    return out


def plot(results: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for trainer, color in (("local", "tab:blue"), ("verl", "tab:orange")):
        for r in (r for r in results if r["trainer"] == trainer):
            steps, values = zip(*r["curve"], strict=True)
            ax.plot(
                steps,
                [100 * v for v in values],
                color=color,
                alpha=0.7,
                label=trainer if r["seed"] == min(x["seed"] for x in results) else None,
            )
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out success (%)")
    ax.set_title("keychain, GiGPO from the demo's warm start")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def page(args: argparse.Namespace, results: list[dict[str, Any]], png: Path, command: str) -> str:
    rows = summary(results)
    seeds = sorted({r["seed"] for r in results})
    lines = [
        "# verl's trainer vs the local trainer on the demo's task",
        "",
        "Written by `bench/verl_vs_local.py`; do not edit by hand.",
        "",
        "## Protocol",
        "",
        "- **Task**: keychain (the demo's task), 1-3 hops, at most 5 turns of 32 tokens; held-out: "
        f"{args.eval_tasks} tasks of the test split, greedy, the same tasks for every run.",
        "- **Model**: the demo's warm start (`warmstart:keychain`: the tiny model after its SFT on scripted "
        "episodes), the same weights for both trainers.",
        f"- **Budget**: {args.steps} RL steps × {args.tasks} tasks × {args.group} samples, GiGPO (γ 0.95, ω 1.0), "
        "PPO-clip 0.2, lr 1e-3, mini-batches of 8 tasks, sampling at T = 0.5; seeds "
        f"{', '.join(map(str, seeds))} (training seeds 10000 × (seed + 1)).",
        "- **Trainers**: local: `toolgym train --trainer local --config keychain_gigpo`; verl: "
        "`toolgym train --config keychain_cpu` (verl 0.9.1's own trainer on the CPU: FSDP2 on gloo, the "
        "`toolgym_cpu` rollout replica) with the same settings as overrides, and the keys where verl's "
        "defaults make another update than the local trainer's set to the local trainer's (a response long "
        "enough for the whole trajectory, tasks in order, rows not reordered by length but shuffled across "
        "mini-batches, no dual clip; `verl_overrides` in the bench).",
        f"- **Hardware**: {os.cpu_count()} CPU cores, no GPU; the runs one after the other"
        + (f" ({args.hardware_note})." if args.hardware_note else "."),
        f"- **Reproduce**: `{command}` (the page alone, from the records: add `--report-only`)",
        "",
        "## Held-out success (%) before and after RL",
        "",
        "| trainer | before | after | gain (points) | seconds per RL step (median) | wall per run (s) |",
        "|---|---|---|---|---|---|",
    ]
    for trainer, row in rows.items():
        gain = [100 * g for g in row["gain"]]
        spread = statistics.stdev(gain) if len(gain) > 1 else 0.0
        lines.append(
            f"| {trainer} | {mean_std(row['before'])} | {mean_std(row['after'])} | "
            f"{statistics.mean(gain):+.1f} ± {spread:.1f} | {row['step_s']:.2f} | {row['wall_s']:.0f} |"
        )
    lines += ["", "Cells: mean ± std over seeds. Per seed (held-out success at each evaluation):", ""]
    for r in sorted(results, key=lambda r: (r["trainer"], r["seed"])):
        curve = ", ".join(f"step {s}: {100 * v:.1f}" for s, v in r["curve"])
        lines.append(f"- {r['trainer']}, seed {r['seed']}: {curve}")
    lines += ["", f"![learning curves]({png.name})", "", "## What came out", ""]
    if "local" in rows and "verl" in rows:
        local, verl = rows["local"], rows["verl"]
        lo, hi = min(local["gain"]), max(local["gain"])
        inside = [g for g in verl["gain"] if lo <= g <= hi]
        lines.append(
            f"- verl's gain per seed ({', '.join(f'{100 * g:+.1f}' for g in verl['gain'])} points) against the local "
            f"trainer's ({', '.join(f'{100 * g:+.1f}' for g in local['gain'])}): {len(inside)} of {len(verl['gain'])} "
            "inside the local trainer's range."
        )
        for name, row in (("the local trainer", local), ("verl", verl)):
            gain = [100 * g for g in row["gain"]]
            spread = statistics.stdev(gain) if len(gain) > 1 else 0.0
            rose = sum(g > 0 for g in gain)
            clear = statistics.mean(gain) > spread
            lines.append(
                f"- {name}: held-out success rose in {rose} of {len(gain)} seeds; the mean gain "
                f"({statistics.mean(gain):+.1f} points) is {'above' if clear else 'within'} the spread over seeds "
                f"({spread:.1f}){'' if clear else ': at this budget the gain is not told apart from noise'}."
            )
        diff, se = gain_difference(local["gain"], verl["gain"])
        if se > 0:
            lines.append(
                f"- The gains differ by {100 * diff:+.1f} points (verl − local); the standard error of that "
                f"difference over {len(local['gain'])} and {len(verl['gain'])} seeds is {100 * se:.1f} points, so the "
                f"difference is {'within two standard errors: not told apart from seed noise' if abs(diff) <= 2 * se else 'beyond two standard errors'}."
            )
        lines.append(
            f"- One RL step takes {verl['step_s']:.1f} s through verl against {local['step_s']:.2f} s in the local "
            f"trainer ({verl['step_s'] / local['step_s']:.0f}×); a verl run also starts Ray and its workers "
            f"(wall per run {verl['wall_s']:.0f} s against {local['wall_s']:.0f} s)."
        )
    lines += phase_table(results)
    about = args.records / "about.md" if args.records is not None else None
    if about is not None and about.is_file():  # hand-written notes kept beside the records
        lines += ["", "## About these runs", "", about.read_text().strip()]
    return "\n".join(lines) + "\n"


def gain_difference(local: list[float], verl: list[float]) -> tuple[float, float]:
    """(mean verl gain − mean local gain, its standard error: Welch's, over the seeds of each)."""
    diff = statistics.mean(verl) - statistics.mean(local)
    if len(local) < 2 or len(verl) < 2:
        return diff, 0.0
    return diff, (statistics.variance(local) / len(local) + statistics.variance(verl) / len(verl)) ** 0.5


PHASES = {
    "local": (("rollout", "rollout: the engine's episodes, sampled in process"), ("update", "PPO update")),
    "verl": (
        ("gen", "rollout (agent loop on the `toolgym_cpu` replica)"),
        ("reward", "reward"),
        ("old_log_prob", "actor recomputes old log-probs"),
        ("ref", "reference model log-probs"),
        ("adv", "advantages"),
        ("update_actor", "actor update (FSDP2)"),
        ("update_weights", "weight sync to the rollout"),
    ),
}


def phase_table(results: list[dict[str, Any]]) -> list[str]:
    """Where a step's seconds go, per trainer (medians over steps and seeds)."""
    rows: list[str] = []
    for trainer, phases in PHASES.items():
        runs = [r for r in results if r["trainer"] == trainer and r.get("phases")]
        for key, label in phases:
            values = [r["phases"][key] for r in runs if key in r["phases"]]
            if values:
                rows.append(f"| {trainer} | {label} | {statistics.median(values):.2f} |")
        if runs:
            step = statistics.median(s for r in runs for s in r["step_s"])
            rows.append(f"| {trainer} | **whole step** | **{step:.2f}** |")
    if not rows:
        return []
    return [
        "",
        "## Where a step's time goes",
        "",
        "Seconds per RL step (median over steps and seeds); verl's phases are its own `timing_s/*` metrics, the "
        "local trainer's its `sample_s` and `update_s`. Phases overlap or leave gaps (verl's bookkeeping, "
        "TransferQueue), so they need not add up to the step.",
        "",
        "| trainer | phase | seconds |",
        "|---|---|---|",
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=16, help="tasks per RL step")
    parser.add_argument("--group", type=int, default=8, help="samples per task")
    parser.add_argument("--eval-tasks", type=int, default=128)
    parser.add_argument("--test-freq", type=int, default=10, help="held-out evaluation every N steps")
    parser.add_argument("--trainers", nargs="+", default=["local", "verl"], choices=["local", "verl"])
    parser.add_argument("--out", type=Path, default=Path("runs/verl_vs_local"))
    parser.add_argument("--docs", type=Path, default=None, help="the page (default: OUT/verl_vs_local.md)")
    parser.add_argument("--smoke", action="store_true", help="every part at toy sizes: 1 seed, 1 step")
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="keep each run's result here as <trainer>-seed<k>.json (with --docs: docs/results/data/verl_vs_local)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="write the page from --records, run nothing"
    )
    parser.add_argument(
        "--verl-set",
        action="append",
        default=[],
        metavar="verl.KEY=VALUE",
        help="one more override for verl's runs (repeatable; an ablation), recorded with each run",
    )
    parser.add_argument("--hardware-note", default="", help="what else ran on the machine, for the page")
    args = parser.parse_args()
    if args.records is None and args.docs is not None:
        args.records = args.docs.parent / "data" / args.docs.stem
    command = "python bench/verl_vs_local.py " + shlex.join(a for a in sys.argv[1:] if a != "--report-only")
    if args.smoke:
        args.seeds, args.steps, args.tasks, args.group, args.eval_tasks, args.test_freq = [0], 1, 2, 2, 4, 1
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        if args.records is None:
            raise SystemExit("--report-only reads the records: give --records DIR (or --docs PAGE)")
        results = [
            json.loads((args.records / f"{trainer}-seed{seed}.json").read_text())
            for seed in args.seeds
            for trainer in args.trainers
        ]
        write_page(args, results, command)
        return
    from toolgym.training.runner import demo_warm_start

    model = demo_warm_start()
    results = []
    for seed in args.seeds:
        for trainer in args.trainers:
            saved = args.out / f"{trainer}-seed{seed}" / "result.json"
            if saved.is_file():
                result = json.loads(saved.read_text())
                print(f"{trainer} seed {seed}: kept from {saved}", flush=True)
            else:
                print(f"{trainer} seed {seed}: training ({args.steps} steps) ...", flush=True)
                result = run_local(args, seed) if trainer == "local" else run_verl(args, seed, model)
                saved.write_text(json.dumps(result, indent=2))
            curve = result["curve"]
            print(
                f"{trainer} seed {seed}: held-out {100 * curve[0][1]:.1f}% -> {100 * curve[-1][1]:.1f}%, "
                f"{statistics.median(result['step_s']):.2f} s per step, {result['wall_s']:.0f} s in all",
                flush=True,
            )
            results.append(result)
            if args.records is not None:
                args.records.mkdir(parents=True, exist_ok=True)
                (args.records / f"{trainer}-seed{seed}.json").write_text(json.dumps(result, indent=2) + "\n")
    write_page(args, results, command)


def write_page(args: argparse.Namespace, results: list[dict[str, Any]], command: str) -> None:
    docs = args.docs or args.out / "verl_vs_local.md"
    docs.parent.mkdir(parents=True, exist_ok=True)
    png = docs.with_name(docs.stem + "_learning_curves.png")
    plot(results, png)
    docs.write_text(page(args, results, png, command))
    print(f"wrote {docs} and {png}")


if __name__ == "__main__":
    main()
