"""ARPO vs GRPO where the tool is needed more than once: multi-hop keychain (every chain 2-3 links, so
the question's key never answers and a solved episode makes a lookup per link), from the demo's warm
start, same budget of 8 trajectories per task, several seeds. Reports held-out success and what it
cost in tool calls (per trajectory, per solved task, and the calls the policy sampled in training,
which ARPO's forks save by sharing a prefix), with ARPO's branching rate per RL step. Writes
``docs/results/arpo_keychain.md`` from the records it keeps in ``docs/results/data/arpo_keychain/``.

    nice -n 10 .venv/bin/python bench/arpo_keychain.py --docs docs/results/arpo_keychain.md   # 3 seeds, ~10 min on 2 cores
    .venv/bin/python bench/arpo_keychain.py --smoke                                         # every part, seconds
    .venv/bin/python bench/arpo_keychain.py --report-only --out docs/results/data/arpo_keychain \\
        --docs docs/results/arpo_keychain.md                                                # the page from its records

Each run is ``toolgym train --trainer local --config keychain_{grpo,arpo}`` in its own process, with
the overrides printed and kept in the run's ``command.txt``; the twins differ only in the estimator
and ARPO's rollout (``training/local/configs/keychain_arpo.yaml``). Seed ``k`` trains on the tasks
from environment seed ``10000·(k+1)`` (disjoint task sets: the train split is drawn per seed) and
samples with that seed; every run is evaluated on the same held-out tasks (the ``test`` split, whose
chains no training task shares), greedily, so runs pair task by task. A run whose directory holds a
finished ``metrics.jsonl`` is reused. ``--smoke`` trains the untrained generic tiny model two steps
on two tasks and writes under ``--out`` only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python bench/arpo_keychain.py` imports bench.results_page

from bench.results_page import Run, read_run  # noqa: E402
from bench.results_stats import BOOTSTRAP_SEED, RESAMPLES, curve_auc, paired_bootstrap  # noqa: E402

ENV = "keychain"
ESTIMATORS = ("grpo", "arpo")
NAMES = {"grpo": "GRPO", "arpo": "ARPO"}
RUN_FILES = ("metrics.jsonl", "run.json", "command.txt", "wall_s.txt")
"""What the page is made from, per run (kilobytes; no checkpoints or trajectories)."""


def overrides(args: argparse.Namespace, seed: int, out: Path) -> list[str]:
    """The budget both estimators get (same tasks, steps and evaluation)."""
    o = [
        f"verl.trainer.total_training_steps={args.steps}",
        f"verl.data.train_batch_size={args.tasks}",
        f"toolgym.val.num_tasks={args.eval_tasks}",
        f"verl.trainer.test_freq={args.test_freq}",
        f"verl.trainer.save_freq={args.steps}",
        f"toolgym.train.seed={10_000 * (seed + 1)}",
        f"verl.trainer.default_local_dir={out}",
    ]
    if args.smoke:
        o += [
            "verl.actor_rollout_ref.model.path=tiny",
            "toolgym.group_size=4",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        ]
    return o


def train_command(args: argparse.Namespace, estimator: str, seed: int, out: Path) -> list[str]:
    cmd = ["toolgym", "train", "--trainer", "local", "--config", f"{ENV}_{estimator}"]
    cmd += overrides(args, seed, out)
    if args.smoke and estimator == "arpo":
        cmd += ["toolgym.arpo.global_rollouts=4", "toolgym.arpo.initial_rollouts=2"]
    return cmd


def train(args: argparse.Namespace, estimator: str, seed: int) -> Run:
    """Run (or reuse) one training run and read it back."""
    out = args.out / f"{ENV}-{estimator}-seed{seed}"
    cmd = train_command(args, estimator, seed, out)
    shown = "nice -n 10 " + shlex.join(cmd)
    done = out / "wall_s.txt"
    if done.exists():
        run = read_run(ENV, estimator, seed, out, shown, float(done.read_text()))
        if run.steps >= args.steps:
            print(f"reusing {out}", flush=True)
            return run
        shutil.rmtree(out)  # another budget: start again rather than mix two
    print(f"$ {shown}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(shown + "\n")
    started = time.perf_counter()
    if args.smoke:  # in this process: a smoke run is seconds of work behind seconds of imports
        from toolgym.training import runner

        runner.run(cmd[5], cmd[6:])
    else:
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        result = subprocess.run([sys.executable, "-m", "toolgym", *cmd[1:]], env=env, check=False)
        if result.returncode != 0:
            raise SystemExit(f"run failed (exit {result.returncode}): {shown}")
    wall = time.perf_counter() - started
    done.write_text(f"{wall:.1f}")
    return read_run(ENV, estimator, seed, out, shown, wall)


def load_runs(folder: Path, seeds: Sequence[int] | None) -> list[Run]:
    """The runs kept under ``folder`` (a records folder or ``--out``), in (seed, estimator) order;
    ``seeds`` None: every seed found there."""
    if seeds is None:
        found = {p.name.rpartition("-seed")[2] for p in folder.glob(f"{ENV}-*-seed*")}
        seeds = sorted(int(s) for s in found if s.isdigit())
    runs = []
    for seed in seeds:
        for est in ESTIMATORS:
            out = folder / f"{ENV}-{est}-seed{seed}"
            if not (out / "metrics.jsonl").exists() or not (out / "wall_s.txt").exists():
                continue  # not finished (wall_s.txt is written last)
            wall = float((out / "wall_s.txt").read_text())
            command = (out / "command.txt").read_text().strip() if (out / "command.txt").exists() else ""
            run = read_run(ENV, est, seed, out, command, wall)
            if run.evals:
                runs.append(run)
    return runs


# -- figures of one run, from its records ---------------------------------------------------------------


def held_tool_use(record: dict[str, Any], key: str) -> float:
    return float((record.get("tool_use") or {}).get(key, math.nan))


def training_steps(run: Run) -> list[dict[str, Any]]:
    return [r for r in run.records if int(r.get("step", 0)) > 0 and "step_groups" in r]


def rollout_calls_per_solved(run: Run) -> float:
    """Tool calls the policy sampled in all its training rollouts per successful rollout: what a
    solved training episode cost (a fork's shared prefix counted once, in its parent)."""
    calls = solved = 0.0
    for r in training_steps(run):
        sg = r["step_groups"]
        calls += sg.get("tool_calls_sampled_per_trajectory", math.nan) * r["episodes"]
        solved += sg.get("solved", math.nan)
    return calls / solved if solved else math.nan


def step_mean(run: Run, key: str) -> float:
    values = [r["step_groups"][key] for r in training_steps(run) if key in r["step_groups"]]
    return statistics.mean(values) if values else math.nan


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.mean(vals) if vals else math.nan


def num(value: float, spec: str = ".2f") -> str:
    """``value`` formatted, or a dash where there is none (no solved episode, no branching)."""
    return "–" if math.isnan(value) else format(value, spec)


def cell(values: Sequence[float], *, pct: bool = False, digits: int = 2) -> str:
    """Mean ± sample standard deviation over seeds (the value alone for one seed)."""
    vals = [v * (100 if pct else 1) for v in values if not math.isnan(v)]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


# -- the page ---------------------------------------------------------------------------------------------


def render(
    runs: Sequence[Run], *, reproduce: str, note: str = "", warm_start: dict[str, Any] | None = None
) -> str:
    by = {est: [r for r in runs if r.estimator == est] for est in ESTIMATORS}
    seeds = sorted({r.seed for r in runs})
    first = runs[0]
    warm = first.before
    lines = [
        "# ARPO vs GRPO on a task that needs the tool more than once (multi-hop keychain)",
        "",
        "Generated by `bench/arpo_keychain.py` from the records in `docs/results/data/arpo_keychain/` "
        "(rewrite with `--report-only`); do not edit by hand.",
        "",
    ]
    if note:
        lines += [note, ""]
    arpo_cfg = ((first.rl or {}).get("engine") or {}).get("arpo") or next(
        (((r.rl or {}).get("engine") or {}).get("arpo") for r in by["arpo"]), None
    )
    budget = f"{arpo_cfg['budget']} trajectories per task" if arpo_cfg else "the same trajectories per task"
    env_kwargs = (first.rl or {}).get("env_kwargs") or {}
    lo, hi = env_kwargs.get("min_hops", "?"), env_kwargs.get("max_hops", "?")
    temperature = ((first.rl or {}).get("ppo") or {}).get("temperature", "?")
    lines += [
        f"**Task**: `keychain` with {lo}-{hi} links per chain (`min_hops: {lo}, max_hops: {hi}`): the question names a start "
        "key, `get(key)` answers the next key or, at the chain's end, the value, and only the value earns the "
        "reward. The start key's lookup never gives the value, so a solved episode makes one lookup per link "
        f"({lo} to {hi}); guessing, echoing the question or answering after one call score at chance or 0 "
        "(`tests/plugins/demo/test_keychain_multihop.py`).",
        "",
        f"**Warm start**: the demo's (`warmstart:keychain`, SFT on the scripted solver's 1-3-link episodes). "
        f"On the {warm['episodes']} held-out tasks, greedy, before RL: success {warm['success']:.1%}, "
        f"**{held_tool_use(warm, 'tool_calls_per_trajectory'):.2f} tool calls per trajectory**, "
        f"{num(held_tool_use(warm, 'tool_calls_per_solved'))} per solved task.",
        "",
        f"**Budget**: {first.steps} RL steps × {(first.rl or {}).get('tasks_per_step', '?')} tasks × {budget} "
        f"(GRPO: {(by['grpo'][0].rl or {}).get('group_size', '?') if by['grpo'] else '?'} sampled from the prompt; ARPO: "
        + (
            f"{arpo_cfg['initial']} from the prompt, then forks after tool results with probability "
            f"clip({arpo_cfg['tau']} + {arpo_cfg['beta']}·ΔH), fresh rollouts filling the rest"
            if arpo_cfg
            else "forks after tool results"
        )
        + f"), temperature {temperature}, the settings of `keychain_gigpo` otherwise, not tuned on this task.",
        "",
        f"**Splits**: training tasks from the `train` split, drawn per seed (seed k: environment seeds from "
        f"10000·(k+1)); every figure marked held-out is on the same {warm['episodes']} tasks of the `test` split "
        "(chains no training task shares), evaluated greedily, never used to choose a setting. Seeds: "
        + ", ".join(map(str, seeds))
        + ".",
        "",
        "## Result",
        "",
        "| estimator | seeds | trajectories / RL step | held-out success (warm start) | **held-out success (after)** | "
        "held-out tool calls / trajectory | **held-out tool calls / solved task** | training tool calls / trajectory "
        "(in context) | **training tool calls sampled / trajectory** | sampled tool calls / solved training trajectory | wall / run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for est, rs in by.items():
        if not rs:
            continue
        lines.append(
            f"| {NAMES[est]} | {len(rs)} | {cell([r.mean_of('episodes') for r in rs], digits=0)} | "
            f"{cell([r.before['success'] for r in rs], pct=True, digits=1)} | "
            f"**{cell([r.after['success'] for r in rs], pct=True, digits=1)}** | "
            f"{cell([held_tool_use(r.after, 'tool_calls_per_trajectory') for r in rs])} | "
            f"**{cell([held_tool_use(r.after, 'tool_calls_per_solved') for r in rs])}** | "
            f"{cell([step_mean(r, 'tool_calls_per_trajectory') for r in rs])} | "
            f"**{cell([step_mean(r, 'tool_calls_sampled_per_trajectory') for r in rs])}** | "
            f"{cell([rollout_calls_per_solved(r) for r in rs])} | "
            f"{_mean([r.wall_s for r in rs]) / 60:.1f} min |"
        )
    lines += [
        "",
        "Success in %, mean ± standard deviation over seeds. *Held-out tool calls / solved task*: the calls of "
        "the held-out episodes that succeeded, per such episode (the chain's length is the floor). "
        "*In context*: the calls in each training trajectory's steps, a fork's copied prefix included; *sampled*: "
        "without it, the calls the policy made in that RL step per trajectory (ARPO's saving: a fork shares "
        "its parent's calls instead of making them again). Training figures are means over RL steps. A fork "
        "rebuilds the environment by replaying the prefix's calls (toolgym's engine does, for stateful tools); "
        "keychain's lookups are free, and the replays are not counted as sampled.",
        "",
    ]
    lines += comparison(by)
    lines += per_seed(runs)
    lines += branching_per_step(by)
    lines += curves(by)
    lines += findings(by)
    if warm_start:
        lines += [
            "## Warm start",
            "",
            f"`warmstart:keychain` (`toolgym demo --rl-steps 0 --seed 0`): {warm_start.get('sft_steps', '?')} SFT steps "
            f"(early stop at {warm_start.get('sft_target', '?')} greedy success on training-split checks), "
            f"weights sha256 `{warm_start.get('weights_sha256', '?')[:16]}`; its own held-out figure on 1-3-link chains: "
            f"{warm_start.get('heldout_success', math.nan):.1%}.",
            "",
        ]
    lines += ["## Reproduce", "", "```", reproduce, "```", "", "Runs:", "", "```"]
    lines += [r.command for r in runs]
    lines += ["```", ""]
    return "\n".join(lines)


def comparison(by: dict[str, list[Run]]) -> list[str]:
    pairs = {r.seed: (r, next((g for g in by["grpo"] if g.seed == r.seed), None)) for r in by["arpo"]}
    pairs = {s: p for s, p in pairs.items() if p[1] is not None}
    if not pairs:
        return []
    arpo = [p[0] for p in pairs.values()]
    grpo = [p[1] for p in pairs.values() if p[1] is not None]
    rows = []

    def add(name: str, a: list[list[float]], b: list[list[float]], unit: str, scale: float) -> None:
        d = paired_bootstrap(a, b)
        unit_s = f" {unit}" if unit else ""
        rows.append(
            f"| {name} | {len(a)} × {d.tasks} | **{num(d.mean * scale, '+.2f')}**{unit_s} | "
            + " / ".join(num(x * scale, "+.2f") for x in d.per_seed)
            + f" | [{num(d.low * scale, '+.2f')}, {num(d.high * scale, '+.2f')}] |"
        )

    tasks = sorted(set.intersection(*(set(r.after.get("per_task", {})) for r in arpo + grpo)), key=int)
    if tasks:
        add(
            "held-out success after RL (seeds × tasks)",
            [[r.after["per_task"][t] for t in tasks] for r in arpo],
            [[r.after["per_task"][t] for t in tasks] for r in grpo],
            "points",
            100,
        )
    add(
        "area under the held-out curve (mean success over the run)",
        [[curve_auc([(s, e["success"]) for s, e in r.evals])] for r in arpo],
        [[curve_auc([(s, e["success"]) for s, e in r.evals])] for r in grpo],
        "points",
        100,
    )
    for name, get in (
        ("held-out tool calls / solved task", lambda r: held_tool_use(r.after, "tool_calls_per_solved")),
        (
            "training tool calls sampled / trajectory",
            lambda r: step_mean(r, "tool_calls_sampled_per_trajectory"),
        ),
        ("sampled tool calls / solved training trajectory", rollout_calls_per_solved),
    ):
        add(name, [[get(r)] for r in arpo], [[get(r)] for r in grpo], "", 1)
    return [
        "## ARPO − GRPO, paired by seed",
        "",
        "| figure | units resampled | mean difference | per seed | 95 % interval |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"Paired bootstrap ({RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}, `bench/results_stats.py`) over seeds and, "
        "for held-out success, the held-out tasks within each seed; the other rows have one figure per run, so "
        "their interval is over seeds only.",
        "",
    ]


def per_seed(runs: Sequence[Run]) -> list[str]:
    lines = [
        "## Per seed",
        "",
        "| seed | estimator | held-out success (warm start → after) | held-out tool calls / solved task | "
        "training tool calls sampled / trajectory | ARPO branch rate (mean over steps) | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rate = step_mean(r, "arpo_branch_rate")
        lines.append(
            f"| {r.seed} | {NAMES[r.estimator]} | {r.before['success']:.1%} → {r.after['success']:.1%} | "
            f"{num(held_tool_use(r.after, 'tool_calls_per_solved'))} | "
            f"{num(step_mean(r, 'tool_calls_sampled_per_trajectory'))} | "
            f"{num(rate, '.1%')} | {r.wall_s / 60:.1f} min |"
        )
    return [*lines, ""]


def _at_step(rs: Sequence[Run], step: int, key: str, *, top: bool = False) -> float:
    values = []
    for r in rs:
        for rec in r.records:
            if int(rec.get("step", -1)) == step:
                v = rec.get(key) if top else (rec.get("step_groups") or {}).get(key)
                if isinstance(v, (int, float)):
                    values.append(float(v))
    return _mean(values)


def branching_per_step(by: dict[str, list[Run]]) -> list[str]:
    arpo, grpo = by["arpo"], by["grpo"]
    if not arpo:
        return []
    steps = sorted({int(r["step"]) for run in arpo for r in training_steps(run)})
    lines = [
        "## ARPO's branching per RL step",
        "",
        "Mean over seeds. *Decisions*: branch draws after a tool result while the task's group had budget left; "
        "*branch rate*: the share of them that forked; *forks*: the share of the step's trajectories that are "
        "forks (the rest started from the prompt).",
        "",
        "| RL step | decisions | branch rate | forks | ARPO tool calls / traj. (in context) | ARPO sampled | "
        "GRPO tool calls / traj. | ARPO train success | GRPO train success |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in steps:
        lines.append(
            f"| {s} | {num(_at_step(arpo, s, 'arpo_decisions'), '.0f')} | {num(_at_step(arpo, s, 'arpo_branch_rate'), '.1%')} | "
            f"{num(_at_step(arpo, s, 'arpo_fork_share'), '.1%')} | {num(_at_step(arpo, s, 'tool_calls_per_trajectory'))} | "
            f"{num(_at_step(arpo, s, 'tool_calls_sampled_per_trajectory'))} | "
            f"{num(_at_step(grpo, s, 'tool_calls_per_trajectory'))} | "
            f"{num(_at_step(arpo, s, 'train_success', top=True), '.1%')} | {num(_at_step(grpo, s, 'train_success', top=True), '.1%')} |"
        )
    return [*lines, ""]


def curves(by: dict[str, list[Run]]) -> list[str]:
    steps = sorted({s for rs in by.values() for r in rs for s, _ in r.evals})
    lines = [
        "## Held-out success during training",
        "",
        "| RL step | " + " | ".join(NAMES[e] for e in ESTIMATORS if by[e]) + " |",
        "|---|" + "---|" * sum(1 for e in ESTIMATORS if by[e]),
    ]
    for s in steps:
        cells = []
        for est in ESTIMATORS:
            if by[est]:
                vals = [dict(r.evals).get(s, {}).get("success", math.nan) for r in by[est]]
                cells.append(cell(vals, pct=True, digits=1))
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def findings(by: dict[str, list[Run]]) -> list[str]:
    arpo, grpo = by["arpo"], by["grpo"]
    if not arpo or not grpo:
        return []
    pairs = [
        (a, next(g for g in grpo if g.seed == a.seed)) for a in arpo if any(g.seed == a.seed for g in grpo)
    ]
    if not pairs:
        return []
    wins = sum(a.after["success"] > g.after["success"] for a, g in pairs)
    ties = sum(a.after["success"] == g.after["success"] for a, g in pairs)
    sa, sg = _mean([a.after["success"] for a, _ in pairs]), _mean([g.after["success"] for _, g in pairs])
    ca = _mean([step_mean(a, "tool_calls_sampled_per_trajectory") for a, _ in pairs])
    cg = _mean([step_mean(g, "tool_calls_sampled_per_trajectory") for _, g in pairs])
    pa = _mean([held_tool_use(a.after, "tool_calls_per_solved") for a, _ in pairs])
    pg = _mean([held_tool_use(g.after, "tool_calls_per_solved") for _, g in pairs])
    warm = _mean([held_tool_use(r.before, "tool_calls_per_trajectory") for r in arpo + grpo])
    tasks = sorted(set.intersection(*(set(r.after.get("per_task", {})) for p in pairs for r in p)), key=int)
    d = (
        paired_bootstrap(
            [[a.after["per_task"][t] for t in tasks] for a, _ in pairs],
            [[g.after["per_task"][t] for t in tasks] for _, g in pairs],
        )
        if tasks
        else None
    )
    spread = _mean([statistics.stdev(r.after["success"] for r in rs) for rs in (arpo, grpo) if len(rs) > 1])
    if d is None:
        verdict = ""
    elif d.low <= 0 <= d.high:
        verdict = (
            f" The paired 95 % interval, [{d.low * 100:+.1f}, {d.high * 100:+.1f}] points, holds 0: no difference in "
            "accuracy is resolved at this budget"
            + (
                f"; the seeds' spread ({spread * 100:.1f} points, standard deviation) is larger than the gap."
                if spread > abs(d.mean)
                else "."
            )
        )
    else:
        verdict = (
            f" The paired 95 % interval, [{d.low * 100:+.1f}, {d.high * 100:+.1f}] points, excludes 0: "
            + ("ARPO" if d.low > 0 else "GRPO")
            + " is ahead."
        )
    return [
        "## Findings",
        "",
        f"- The warm start makes {warm:.2f} tool calls per held-out trajectory"
        + (
            ": ARPO has tool results to branch on in its episodes."
            if warm >= 2
            else ", fewer than two: ARPO has little to branch on, and this row cannot test it."
        ),
        f"- Held-out success after RL: ARPO {sa:.1%} vs GRPO {sg:.1%} ({(sa - sg) * 100:+.1f} points); ARPO ahead in "
        f"{wins} of {len(pairs)} seeds" + (f", level in {ties}" if ties else "") + "; above the warm start: "
        f"ARPO in {sum(a.after['success'] > a.before['success'] for a, _ in pairs)}, "
        f"GRPO in {sum(g.after['success'] > g.before['success'] for _, g in pairs)} of {len(pairs)}.{verdict}",
        f"- Tool calls the policy sampled per training trajectory: ARPO {ca:.2f} vs GRPO {cg:.2f} "
        f"({num(ca / cg if cg else math.nan, '.0%')} of GRPO's; the ARPO paper reports about half at comparable accuracy).",
        f"- Held-out tool calls per solved task: ARPO {num(pa)} vs GRPO {num(pg)}: on this task a solved episode "
        "needs one call per link, so neither can do with fewer; what differs is the training rollouts' cost.",
        *branching_finding(arpo),
        "",
    ]


def branching_finding(arpo: Sequence[Run]) -> list[str]:
    """How far the branching rate strays from ``tau``: near it, the entropy term decided little."""
    rate = _mean([step_mean(r, "arpo_branch_rate") for r in arpo])
    cfg = ((arpo[0].rl or {}).get("engine") or {}).get("arpo") if arpo else None
    if math.isnan(rate) or not cfg:
        return []
    tau = float(cfg["tau"])
    how = (
        "close to it: on average the entropy term moved the forks little from where a coin at tau would put them "
        "(docs/fidelity.md, ARPO, measures how far it can on tiny models)"
        if abs(rate - tau) < 0.1
        else "the entropy term moves it"
    )
    return [
        f"- ARPO forked at {rate:.1%} of its branch decisions (mean over steps and seeds; tau = {tau:g}): {how}."
    ]


# -- records ------------------------------------------------------------------------------------------------


def warm_start_info(runs: Sequence[Run]) -> dict[str, Any] | None:
    """What identifies the warm start the runs started from (its demo metrics and weights' digest)."""
    for run in runs:
        try:
            model = Path(json.loads((run.out / "run.json").read_text())["run"]["model_dir"])
        except (OSError, KeyError, ValueError):
            continue
        metrics, weights = model.parent / "metrics.json", model / "model.safetensors"
        if not (metrics.exists() and weights.exists()):
            return None
        m = json.loads(metrics.read_text())
        return {
            "model_dir": str(model),
            "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
            "sft_steps": len(m.get("sft_losses", [])),
            "sft_target": (m.get("config") or {}).get("sft_target"),
            "heldout_success": m.get("heldout_success_before_rl"),
            "demo_config": m.get("config"),
        }
    return None


def save_records(
    runs: Sequence[Run], records: Path, warm: dict[str, Any] | None, note: str, reproduce: str
) -> None:
    for run in runs:
        dst = records / run.out.name
        for name in RUN_FILES:
            src = run.out / name
            if src.is_file() and src.resolve() != (dst / name).resolve():
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst / name)
    records.mkdir(parents=True, exist_ok=True)
    if warm is not None:
        (records / "warmstart-keychain.json").write_text(json.dumps(warm, indent=2) + "\n")
    (records / "note.txt").write_text(note + "\n" if note else "")
    (records / "bench.txt").write_text(reproduce + "\n")


def reproduce_command(args: argparse.Namespace) -> str:
    parts = ["--seeds", *map(str, args.seeds), "--steps", str(args.steps), "--tasks", str(args.tasks)]
    parts += ["--eval-tasks", str(args.eval_tasks), "--test-freq", str(args.test_freq)]
    return "nice -n 10 .venv/bin/python bench/arpo_keychain.py " + shlex.join(
        [*(["--smoke"] if args.smoke else []), *parts, "--docs", str(args.docs)]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="every part at toy size, seconds, output under --out only"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="default: 0 1 2 (--report-only: every seed found)"
    )
    parser.add_argument("--steps", type=int, default=20, help="RL steps per run")
    parser.add_argument("--tasks", type=int, default=16, help="tasks per RL step")
    parser.add_argument("--eval-tasks", type=int, default=256, help="held-out tasks (test split)")
    parser.add_argument("--test-freq", type=int, default=5, help="held-out evaluation every this many steps")
    parser.add_argument("--out", type=Path, default=Path("runs/arpo_keychain"))
    parser.add_argument(
        "--docs", type=Path, default=None, help="the page to write (default: results.md in --out)"
    )
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="where to keep what the page is made from (default: docs/results/data/NAME/ beside --docs NAME.md)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="train nothing: the page from the runs in --out"
    )
    parser.add_argument(
        "--note", default="", help="a note shown at the top of the page (kept with the records)"
    )
    args = parser.parse_args(argv)
    if args.smoke and not args.report_only:
        args.seeds, args.steps, args.tasks, args.eval_tasks, args.test_freq = [0], 2, 2, 4, 1
        args.docs = args.out / "results.md"
    args.docs = args.docs or args.out / "results.md"
    records = args.records or args.docs.parent / "data" / args.docs.stem
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        runs = load_runs(args.out, args.seeds)
        if not runs:
            raise SystemExit(f"no finished runs under {args.out}; run without --report-only first")
        args.seeds = sorted({r.seed for r in runs})
        kept_cmd = args.out / "bench.txt"  # the command that made the runs, not this one's
        reproduce = kept_cmd.read_text().strip() if kept_cmd.is_file() else reproduce_command(args)
        if not args.note and (args.out / "note.txt").is_file():
            args.note = (args.out / "note.txt").read_text().strip()
        kept = args.out / "warmstart-keychain.json"
        warm = json.loads(kept.read_text()) if kept.is_file() else warm_start_info(runs)
    else:
        args.seeds = args.seeds or [0, 1, 2]
        reproduce = reproduce_command(args)
        (args.out / "bench.txt").write_text(reproduce + "\n")
        runs = []
        for seed in args.seeds:
            for est in ESTIMATORS:
                run = train(args, est, seed)
                print(
                    f"{est} seed {seed}: held-out {run.before['success']:.1%} -> {run.after['success']:.1%}, "
                    f"tool calls per solved task {held_tool_use(run.after, 'tool_calls_per_solved'):.2f}, "
                    f"sampled per training trajectory {step_mean(run, 'tool_calls_sampled_per_trajectory'):.2f} "
                    f"({run.wall_s / 60:.1f} min)",
                    flush=True,
                )
                runs.append(run)
        warm = None if args.smoke else warm_start_info(runs)
    args.docs.parent.mkdir(parents=True, exist_ok=True)
    args.docs.write_text(render(runs, reproduce=reproduce, note=args.note, warm_start=warm))
    if not args.smoke:
        save_records(runs, records, warm, args.note, reproduce)
    print(f"wrote {args.docs}" + ("" if args.smoke else f"; records in {records}"))


if __name__ == "__main__":
    main()
