"""GRPO vs GiGPO on built-in ALFWorld and WebShop (and ARPO vs GRPO on math-python) with the local
trainer, same warm start and budget, several seeds; plus the speed of one RL step beside plain
Hugging Face ``generate`` measured in the same run. Writes ``docs/results/results.md`` and a PNG.

    nice -n 10 .venv/bin/python bench/learning_table.py                       # the full table (hours)
    nice -n 10 .venv/bin/python bench/learning_table.py --envs alfworld --seeds 0 --steps 10   # one seed, fewer steps
    .venv/bin/python bench/learning_table.py --smoke                          # every part, under a minute

Each training run is ``toolgym train --trainer local --config ENV_ESTIMATOR`` with the budget given
here as overrides (the exact command is printed and written to the results page); runs are
sequential, each in its own process, and a run whose directory already holds a finished
``metrics.jsonl`` is reused, so an interrupted table resumes. ``--smoke`` uses the generic tiny
model (no warm start: nothing learns), two tasks, two samples, two RL steps, and writes to
``--out`` only (not ``docs/``).

Splits: training draws from the environment's ``train`` split, the in-run evaluations (the curves,
sample efficiency) use its ``validation`` split (``toolgym.val``: what choices may look at), and only
the final evaluation reads the config's test splits (``toolgym.test``; ALFWorld: in- and
out-of-distribution), each reported once per final configuration. ``--final-eval-tasks N`` evaluates
the warm start (once per environment) and each run's last checkpoint on the first N tasks of every
test split, with the in-run decoding, each in its own process; the page's before/after columns use the
first split (noise sqrt(5) times smaller at N = 5 x 96 than the in-run evaluation's). The result is kept
in the run's ``final_eval.json``. Runs recorded without checkpoints get the warm start's figures on the
test splits they lack (``--report-only --final-eval-tasks N``, with ``--model ENV=DIR`` naming a
rebuild of the warm start when the original is not on this machine); their after-RL side there stays
unmeasured, and the page says so.

Beside the page, the benchmark keeps what the page is made from in ``--records`` (default
``docs/results/data/NAME/`` for ``--docs docs/results/NAME.md``; kilobytes: each run's metrics, final evaluation and
command, the warm starts' ``warmstart.json``, no checkpoints or trajectories). ``--report-only --out``
that folder rewrites the page on any machine, and copying a recorded run into another ``--out``
puts it on a page with new runs (``runs/`` is scratch; a fresh clone has none of it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python bench/learning_table.py` imports bench.results_page
PAIRS = {"alfworld": ("grpo", "gigpo"), "webshop": ("grpo", "gigpo"), "math_python": ("grpo", "arpo")}
ESTIMATORS = {
    "alfworld": ("grpo", "gigpo", "graphgpo"),
    "webshop": ("grpo", "gigpo", "graphgpo"),
    "math_python": ("grpo", "arpo"),
}


def hand_sections(records: Path) -> dict[str, str]:
    """The sections of a results page kept by hand beside its records: ``protocol.md`` (what was run, on
    what, when, how to rerun it) and ``about.md``; missing files give empty sections."""
    return {
        name: (records / f"{name}.md").read_text() if (records / f"{name}.md").is_file() else ""
        for name in ("protocol", "about")
    }


def estimators_of(args: argparse.Namespace, env: str) -> tuple[str, ...]:
    """The estimators run (or reported) for ``env``: ``--estimators ENV=A,B`` or the env's pair."""
    return args.estimators.get(env, PAIRS[env])


def run_overrides(args: argparse.Namespace, env: str, seed: int, out: Path) -> list[str]:
    """The budget every estimator of ``env`` gets (same tasks, steps, group, evaluation)."""
    o = [
        f"verl.trainer.total_training_steps={args.steps}",
        f"verl.data.train_batch_size={args.tasks}",
        f"toolgym.val.num_tasks={args.eval_tasks}",
        f"verl.trainer.test_freq={args.test_freq}",
        f"verl.trainer.save_freq={args.test_freq}",
        f"toolgym.train.seed={10_000 * seed}",
        f"verl.trainer.default_local_dir={out}",
    ]
    if env != "math_python":
        o.append(f"toolgym.group_size={args.group}")
    if args.device != "cpu":
        o.append(f"verl.trainer.device={args.device}")
    if args.model.get(env):
        o.append(f"verl.actor_rollout_ref.model.path={args.model[env]}")
    o += args.set  # --set: the same change to every run (an ablation)
    if args.smoke:
        o += [
            "verl.actor_rollout_ref.model.path=tiny",
            "toolgym.engine.max_turns=3",
            "toolgym.engine.max_tokens_per_turn=8",
            "verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        ]
        o.append("toolgym.env_kwargs.max_steps=3" if env == "alfworld" else "toolgym.env_kwargs.max_turns=3")
    return o


def train_command(
    args: argparse.Namespace, env: str, estimator: str, seed: int, out: Path
) -> tuple[list[str], str]:
    """(the ``toolgym train`` command of one run, as shown on the results page)."""
    cmd = [
        "toolgym",
        "train",
        "--trainer",
        "local",
        "--config",
        f"{env}_{estimator}",
        *run_overrides(args, env, seed, out),
    ]
    return cmd, ("nice -n 10 " if args.device == "cpu" else "") + shlex.join(cmd)


def train(args: argparse.Namespace, env: str, estimator: str, seed: int) -> tuple[Path, str, float]:
    """Run (or reuse) one training run; returns (output dir, command, wall seconds)."""
    from bench.results_page import read_run

    out = args.out / f"{env}-{estimator}-seed{seed}"
    cmd, shown = train_command(args, env, estimator, seed, out)
    done = out / "wall_s.txt"
    if done.exists() and read_run(env, estimator, seed, out, shown, 0.0).steps >= args.steps:
        print(f"reusing {out}", flush=True)
        return out, shown, float(done.read_text())
    print(f"$ {shown}", flush=True)
    # a finished shorter run is extended from its last checkpoint: its wall time adds to the earlier one
    previous = float(done.read_text()) if done.exists() else 0.0
    out.mkdir(parents=True, exist_ok=True)
    # what started this run, for a page written later with --report-only (whose arguments may differ)
    (out / "command.txt").write_text(shown + "\n")
    (out / "bench.txt").write_text(reproduce_command(args, envs=[env]) + "\n")
    started = time.perf_counter()
    env_vars = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    # runs side by side (--jobs): each one's progress goes to its own log
    with open(out / "train.log", "a") if args.jobs > 1 else contextlib.nullcontext() as log:
        result = subprocess.run(
            [sys.executable, "-m", "toolgym", *cmd[1:]],
            env=env_vars,
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            check=False,
        )
    if result.returncode != 0:
        raise SystemExit(f"run failed (exit {result.returncode}): {shown}")
    wall = previous + time.perf_counter() - started
    done.write_text(f"{wall:.1f}")
    return out, shown, wall


# -- the final evaluation: the config's test splits, more tasks than the in-run validation ---------------


_WARM_LOCK = threading.Lock()


def test_splits(env: str, estimator: str) -> dict[str, str]:
    """The test splits of ``ENV_ESTIMATOR`` (``toolgym.test``: name → the environment split it evaluates),
    the first one the page's before/after columns. Training never reads them."""
    from toolgym.training.runner import load_config

    tests = load_config(f"{env}_{estimator}", [])["toolgym"].get("test") or {}
    if not tests:
        raise SystemExit(
            f"config {env}_{estimator} names no test split (toolgym.test): --final-eval-tasks has nothing to evaluate"
        )
    return {name: str((r.get("env_kwargs") or {}).get("split", "default")) for name, r in tests.items()}


def evaluate_model(
    args: argparse.Namespace, config: str, model: Path, tests: Sequence[str]
) -> dict[str, Any]:
    """``model`` on the first ``--final-eval-tasks`` tasks of each of ``config``'s test splits ``tests``,
    in one process of its own; test name → record."""
    threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "warmstart_sweep.py"),
        "--eval-model",
        str(model),
        "--heldout",
        config,
        *(x for name in tests for x in ("--test", name)),
        "--heldout-tasks",
        str(args.final_eval_tasks),
        "--device",
        args.device,
        "--threads",
        str(threads),
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"the final evaluation of {model} failed: {(result.stderr.strip().splitlines() or ['no output'])[-1]}"
        )
    lines = [json.loads(ln) for ln in result.stdout.splitlines() if ln.startswith("{")]
    out: dict[str, Any] = {}
    for name, r in zip(tests, lines[-len(tests) :], strict=True):
        if (
            r.get("failed", 0) > 0.01 * r["tasks"]
        ):  # errored episodes score 0: the figure would measure the errors
            raise SystemExit(
                f"the final evaluation of {model}: {r['failed']} of {r['tasks']} episodes ended in an error"
            )
        out[name] = {
            "test": r.get("test", name),
            "split": r.get("split", ""),
            "success": r["success"],
            "score": r["score"],
            "episodes": r["tasks"],
            "failed": r.get("failed", 0),
            "by_type": r.get("by_type", {}),
            "per_task": r.get("per_task", {}),
            "seconds": r["seconds"],
        }
    return out


def warm_start_tests(args: argparse.Namespace, env: str, warm: Path, tests: dict[str, str]) -> dict[str, Any]:
    """The warm start ``warm`` on each test split (once per environment, kept in ``--out`` as
    ``final-eval-ENV-WARM-N-TEST.json``). Where ``warm`` is not on this machine (a page rewritten from
    records), ``--model ENV=DIR`` names a rebuild of it, and each file says which model it measured."""
    cache = {
        name: args.out / f"final-eval-{env}-{warm.name}-{args.final_eval_tasks}-{name}.json" for name in tests
    }
    with _WARM_LOCK:  # the estimators of an environment share these evaluations
        missing = [name for name, path in cache.items() if not path.exists()]
        if missing:
            model = warm if warm.is_dir() else Path(args.model[env]) if args.model.get(env) else None
            if model is None:
                raise SystemExit(
                    f"the warm start {warm} is not on this machine: build it (toolgym warmstart --env {env}) "
                    f"and name it with --model {env}=DIR"
                )
            print(
                f"final evaluation: {env} warm start {model.name} on {args.final_eval_tasks} tasks of test split(s) "
                + ", ".join(missing),
                flush=True,
            )
            for name, result in evaluate_model(args, f"{env}_grpo", model, missing).items():
                cache[name].write_text(json.dumps({**result, "model": str(model)}, indent=2))
        return {name: json.loads(path.read_text()) for name, path in cache.items()}


def final_eval(args: argparse.Namespace, env: str, estimator: str, out: Path, steps: int) -> None:
    """Write ``out/final_eval.json``: the warm start and the run's step-``steps`` checkpoint on the first
    ``--final-eval-tasks`` tasks of each test split of the config (kept when it already holds those tasks,
    that step and every split). A recorded run whose checkpoint was not kept gets the warm start's
    figures on the splits it lacks (``warm_start_tests``); its after-RL figures there stay unmeasured."""
    path = out / "final_eval.json"
    bench = out / "bench.txt"  # the page's "reproduce" line: the benchmark that made this run's figures
    if bench.exists() and "--final-eval-tasks" not in bench.read_text():
        bench.write_text(f"{bench.read_text().strip()} --final-eval-tasks {args.final_eval_tasks}\n")
    tests = test_splits(env, estimator)
    done = json.loads(path.read_text()) if path.exists() else None
    current = bool(done) and done.get("tasks") == args.final_eval_tasks and done.get("step") == steps
    if current and set(tests) <= set(done.get("splits") or {}):
        return
    warm = Path(
        json.loads((out / "run.json").read_text())["run"]["model_dir"]
    )  # the model the run started from
    checkpoint = out / f"step-{steps:05d}"
    if not checkpoint.is_dir():
        if current:  # a record (records keep no checkpoints): the warm start's side only
            warm_start_tests(args, env, warm, tests)
            return
        raise SystemExit(
            f"{out}: no checkpoint of its last step ({checkpoint.name}) to evaluate; --steps must be a multiple of --test-freq"
        )
    before = warm_start_tests(args, env, warm, tests)
    print(
        f"final evaluation: {out.name} step {steps} on {args.final_eval_tasks} tasks of test split(s) {', '.join(tests)}",
        flush=True,
    )
    after = evaluate_model(args, f"{env}_{estimator}", checkpoint, list(tests))
    splits = {
        name: {"split": split, "before": before[name], "after": after[name]} for name, split in tests.items()
    }
    first = next(iter(tests))
    path.write_text(
        json.dumps(
            {
                "tasks": args.final_eval_tasks,
                "step": steps,
                "warm_start": str(warm),
                "test": first,
                "split": tests[first],
                "before": splits[first]["before"],
                "after": splits[first]["after"],
                "splits": splits,
            },
            indent=2,
        )
    )


# -- speed: one RL step, and the sampler beside plain HF generate ----------------------------------


async def measure_speed(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from toolgym.core.registry import get_registry
    from toolgym.training.runner import build, load_config, model_dir, open_loop

    tasks, group = (2, 2) if args.smoke else (args.speed_tasks, args.speed_group)
    overrides = [
        f"verl.data.train_batch_size={tasks}",
        f"toolgym.group_size={group}",
        "verl.trainer.total_training_steps=1",
    ]
    if args.smoke:
        overrides += [
            "verl.actor_rollout_ref.model.path=tiny",
            "toolgym.engine.max_turns=3",
            "toolgym.env_kwargs.max_steps=3",
            "toolgym.engine.max_tokens_per_turn=8",
        ]
    rl, settings = build(load_config("alfworld_gigpo", overrides))
    path = model_dir(settings["model"])
    loop, tokenizer, close = open_loop(rl, path)
    try:
        log = await loop.step()
        prompts = await first_prompts(get_registry(), rl, tokenizer, tasks * group)
        sampler_s, sampler_tokens = await sampler_turn(loop.policy.backend, prompts, rl)
        hf_s, hf_tokens = hf_generate_turn(loop.trainer.model, tokenizer, prompts, rl)
    finally:
        await close()
    turns = log.stats.get("steps", 0.0)
    return {
        "tasks": tasks,
        "group": group,
        "episodes": log.episodes,
        "model": settings["model"],
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "step_s": log.sample_s + log.update_s,
        "sample_s": log.sample_s,
        "update_s": log.update_s,
        "tokens": log.tokens,
        "turns": int(turns),
        "tokens_per_s": log.tokens / max(log.sample_s, 1e-9),
        "episodes_per_s": log.episodes / max(log.sample_s, 1e-9),
        "bench_prompts": len(prompts),
        "sampler_s": sampler_s,
        "sampler_tokens_per_s": sampler_tokens / max(sampler_s, 1e-9),
        "hf_s": hf_s,
        "hf_tokens_per_s": hf_tokens / max(hf_s, 1e-9),
    }


async def first_prompts(registry: Any, rl: Any, tokenizer: Any, n: int) -> list[list[int]]:
    """The first-turn prompt ids of ``n`` training episodes (as the engine renders them)."""
    out = []
    for i in range(n):
        env = registry.env(rl.env).make(**rl.env_kwargs)
        messages, _ = await env.reset(seed=rl.seed + i)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


async def sampler_turn(backend: Any, prompts: list[list[int]], rl: Any) -> tuple[float, int]:
    from toolgym.core.types import GenerationRequest, SamplingParams

    max_new = int(rl.engine.get("max_tokens_per_turn", 24))
    requests = [
        GenerationRequest(p, SamplingParams(max_new_tokens=max_new, temperature=1.0, seed=i), f"bench-{i}")
        for i, p in enumerate(prompts)
    ]
    started = time.perf_counter()
    results = await asyncio.gather(*(backend.generate(r) for r in requests))
    return time.perf_counter() - started, sum(len(r.output_ids) for r in results)


def hf_generate_turn(model: Any, tokenizer: Any, prompts: list[list[int]], rl: Any) -> tuple[float, int]:
    """Plain ``model.generate`` on the same prompts: one left-padded batch, sampling, the same
    token limit and stop string."""
    import torch

    max_new = int(rl.engine.get("max_tokens_per_turn", 24))
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(0)
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new,
            do_sample=True,
            temperature=1.0,
            pad_token_id=pad,
            stop_strings=["</action>"],
            tokenizer=tokenizer,
        )
    seconds = time.perf_counter() - started
    new = out[:, width:]
    eos = set(tokenizer.all_special_ids)
    tokens = 0
    for row in new.tolist():
        for t in row:
            tokens += 1
            if t in eos:
                break
    return seconds, tokens


# -- main ----------------------------------------------------------------------------------------------


def warm_start_infos(args: argparse.Namespace, runs: Sequence[Any] = ()) -> dict[str, dict[str, Any]]:
    """The ``warmstart.json`` of each environment's warm start (none in smoke runs): the one its ``runs``
    started from (``run.json``'s model directory, else the records' copy when it names that model), and
    without runs the cached one. Never the cache's when runs say otherwise: a page rewritten from its
    records after the shipped recipe changed must still describe the model its runs started from."""
    from toolgym.training.warmstart import build as warmstart

    out = {}
    for env in [] if args.smoke else args.envs:
        started = next((_model_dir(run) for run in runs if run.env == env), None)
        kept = args.out / f"warmstart-{env}.json"  # --out is a records folder (the cache may not hold it)
        if started is not None:
            here = started / "warmstart.json"
            info = (
                json.loads(here.read_text())
                if here.exists()
                else json.loads(kept.read_text())
                if kept.exists()
                else None
            )
            if info is not None and (here.exists() or _names(info, started)):
                out[env] = info
            continue  # no record of that model: no line rather than another model's
        path = (
            Path(args.model[env])
            if env in args.model
            else warmstart.cached(env)
            if env in warmstart.RECIPES
            else None
        )
        if path is not None and (path / "warmstart.json").exists():
            out[env] = json.loads((path / "warmstart.json").read_text())
        elif kept.exists():
            out[env] = json.loads(kept.read_text())
    return out


def warm_start_test_figures(args: argparse.Namespace, runs: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Per environment, the warm start's figures on each test split (``final-eval-ENV-WARM-N-TEST.json``
    in ``--out``, for the warm start its runs started from): a page rewritten from records shows them
    even where the runs' own ``final_eval.json`` predates the split."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        warm = _model_dir(run)
        tasks = (run.final or {}).get("tasks")
        if warm is None or not tasks or run.env in out:
            continue
        prefix = f"final-eval-{run.env}-{warm.name}-{tasks}-"
        found = {
            p.name[len(prefix) : -len(".json")]: json.loads(p.read_text())
            for p in sorted(args.out.glob(f"{prefix}*.json"))
        }
        if found:
            out[run.env] = found
    return out


def _model_dir(run: Any) -> Path | None:
    """The model directory a run started from (its ``run.json``), or None when not recorded."""
    try:
        return Path(json.loads((run.out / "run.json").read_text())["run"]["model_dir"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _names(info: dict[str, Any], model_dir: Path) -> bool:
    """Whether a ``warmstart.json`` is that of the warm start built in ``model_dir`` (its cache name)."""
    from toolgym.training.warmstart.build import WarmStartRecipe

    try:
        recipe = WarmStartRecipe(**info["recipe"])
    except (KeyError, TypeError):
        return False
    return model_dir.name == f"{recipe.name}-{recipe.key()}"


# what a page is made from: per run, then per --out (see the module docstring)
RUN_RECORDS = ("metrics.jsonl", "final_eval.json", "run.json", "command.txt", "bench.txt", "wall_s.txt")


def save_records(args: argparse.Namespace, runs: list[Any], records: Path) -> None:
    """Copy the small files of the page's ``runs`` (and the warm-start evaluations, speed figures and
    warm starts' recipes) from ``--out`` into ``records``; a no-op for files already there."""

    def keep(src: Path, dst: Path) -> None:
        if src.is_file() and src.resolve() != dst.resolve():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)

    for run in runs:
        name = f"{run.env}-{run.estimator}-seed{run.seed}"
        for file in RUN_RECORDS:
            keep(args.out / name / file, records / name / file)
    for path in [args.out / "speed.json", *args.out.glob("final-eval-*.json")]:
        keep(path, records / path.name)
    for env, info in warm_start_infos(args, runs).items():
        records.mkdir(parents=True, exist_ok=True)
        (records / f"warmstart-{env}.json").write_text(json.dumps(info, indent=2))
    for name, text in (
        ("note.txt", args.note),
        ("partial.txt", args.partial),
    ):  # the page's notes, for a rewrite from records
        records.mkdir(parents=True, exist_ok=True)
        (records / name).write_text(text + "\n" if text else "")


def reproduce_command(args: argparse.Namespace, envs: list[str] | None = None) -> str:
    extra = [
        *(["--device", args.device] if args.device != "cpu" else []),
        *(x for env, path in args.model.items() for x in ("--model", f"{env}={path}")),
        *(["--jobs", str(args.jobs)] if args.jobs > 1 else []),
        *(
            x
            for env, ests in args.estimators.items()
            if env in (envs or args.envs)
            for x in ("--estimators", f"{env}={','.join(ests)}")
        ),
        *(x for kv in args.set for x in ("--set", kv)),
    ]
    return (
        ("nice -n 10 " if args.device == "cpu" else "")
        + ".venv/bin/python bench/learning_table.py "
        + shlex.join(
            [
                *(["--smoke"] if args.smoke else []),
                "--envs",
                *(envs or args.envs),
                "--seeds",
                *map(str, args.seeds),
                "--steps",
                str(args.steps),
                "--tasks",
                str(args.tasks),
                "--group",
                str(args.group),
                "--eval-tasks",
                str(args.eval_tasks),
                "--test-freq",
                str(args.test_freq),
                *(
                    ["--final-eval-tasks", str(args.final_eval_tasks)]
                    if args.final_eval_tasks and set(envs or args.envs) & set(args.final_eval_envs)
                    else []
                ),
                *extra,
            ]
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="every part at toy size, under a minute, output under --out only"
    )
    parser.add_argument("--envs", nargs="+", default=["alfworld", "webshop"], choices=sorted(PAIRS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help="RL steps per run (20: what one run does in the issue's 20 min on 2 cores; WebShop alone 18-19 min)",
    )
    parser.add_argument("--tasks", type=int, default=16, help="tasks per RL step")
    parser.add_argument("--group", type=int, default=8, help="samples per task")
    parser.add_argument(
        "--eval-tasks", type=int, default=96, help="in-run evaluation tasks (the validation split)"
    )
    parser.add_argument(
        "--test-freq", type=int, default=5, help="evaluate (and checkpoint) every this many RL steps"
    )
    parser.add_argument(
        "--final-eval-tasks",
        type=int,
        default=0,
        help="evaluate the warm start and each run's last checkpoint on this many tasks of each test split "
        "of the config (toolgym.test; 0: off); the page's before/after columns then use them",
    )
    parser.add_argument(
        "--final-eval-envs",
        nargs="+",
        default=sorted(PAIRS),
        choices=sorted(PAIRS),
        help="the environments --final-eval-tasks applies to (default: all; without it an environment's "
        "before/after figures are its in-run validation's)",
    )
    parser.add_argument("--speed-tasks", type=int, default=16)
    parser.add_argument("--speed-group", type=int, default=8)
    parser.add_argument("--no-speed", action="store_true", help="skip the speed measurement")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write the page from the runs (and speed.json) already under --out "
        "(with --final-eval-tasks, evaluating their last checkpoints first)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/learning_table"))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (verl.trainer.device of every run)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="ENV=PATH",
        help="the warm start of ENV's runs (a model directory) instead of the config's warmstart:ENV",
    )
    parser.add_argument(
        "--estimators",
        action="append",
        default=[],
        metavar="ENV=EST,EST",
        help="the estimators of ENV's rows instead of its pair (GRPO vs GiGPO, or vs ARPO), "
        "e.g. alfworld=grpo,gigpo,graphgpo or alfworld=graphgpo",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override given to every run (toolgym.* or verl.*), e.g. "
        "verl.actor_rollout_ref.actor.loss_agg_mode=episode-mean-token-mean; use its own --out",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="training runs side by side (each logs to its train.log)"
    )
    parser.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="the results page to write (default: results.md in --out; the project's own page is "
        "written only when named: --docs docs/results/results.md)",
    )
    parser.add_argument(
        "--png", type=Path, default=None, help="default: NAME_learning_curves.png beside --docs NAME.md"
    )
    parser.add_argument(
        "--partial", default="", help="a note that the table is partial (what is missing), shown on the page"
    )
    parser.add_argument(
        "--note",
        default="",
        help="a note shown at the top of the page (recipes, devices, timings); kept with "
        "the records, so --report-only from them shows it again",
    )
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="where to keep what the page is made from (default: docs/results/data/NAME/ beside --docs docs/results/NAME.md); "
        "--report-only --out RECORDS rewrites the page from it",
    )
    args = parser.parse_args()
    if args.docs is None:
        args.docs = args.out / "results.md"
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    models = dict(m.partition("=")[::2] for m in args.model)
    if any(not path for path in models.values()):
        raise SystemExit("--model takes ENV=PATH")
    args.model = models
    if any(not kv.startswith(("toolgym.", "verl.")) or "=" not in kv for kv in args.set):
        raise SystemExit("--set takes toolgym.KEY=VALUE or verl.KEY=VALUE")
    args.estimators = {
        env: tuple(e for e in ests.split(",") if e)
        for env, _, ests in (x.partition("=") for x in args.estimators)
    }
    for env, ests in args.estimators.items():
        if env not in ESTIMATORS or not ests or not set(ests) <= set(ESTIMATORS[env]):
            raise SystemExit(
                f"--estimators {env}={','.join(ests)}: the environments and their estimators are "
                + "; ".join(f"{e}={','.join(v)}" for e, v in ESTIMATORS.items())
            )
    if args.smoke:
        args.seeds, args.steps, args.tasks, args.group, args.eval_tasks, args.test_freq = [0], 2, 2, 2, 2, 1
        args.final_eval_tasks = min(args.final_eval_tasks, 3)
        args.envs = ["alfworld"]
        args.docs = args.out / "results.md"
        args.partial = (
            args.partial or "Smoke run: toy sizes, untrained tiny model; checks the machinery only."
        )
    png = args.png or args.docs.with_name(
        f"{args.docs.stem}_learning_curves.png"
    )  # results.md: results_learning_curves.png
    records = (
        args.records or args.docs.parent / "data" / args.docs.stem
    )  # docs/results/results.md: docs/results/data/results/
    args.out.mkdir(parents=True, exist_ok=True)
    from bench.results_page import read_run, write_results

    speed = None
    if args.report_only:
        for name, attr in (
            ("note.txt", "note"),
            ("partial.txt", "partial"),
        ):  # kept by the records of a page written earlier
            if not getattr(args, attr) and (args.out / name).is_file():
                setattr(args, attr, (args.out / name).read_text().strip())
        speed_file = args.out / "speed.json"
        speed = json.loads(speed_file.read_text()) if speed_file.exists() and not args.no_speed else None
        runs, benches = [], []
        for env in args.envs:
            for seed in args.seeds:
                for estimator in estimators_of(args, env):
                    out = args.out / f"{env}-{estimator}-seed{seed}"
                    wall = (
                        float((out / "wall_s.txt").read_text())
                        if (out / "wall_s.txt").exists()
                        else float("nan")
                    )
                    command = (
                        (out / "command.txt").read_text().strip()
                        if (out / "command.txt").exists()
                        else train_command(args, env, estimator, seed, out)[1]
                    )
                    run = read_run(env, estimator, seed, out, command, wall)
                    if run.evals and args.final_eval_tasks and env in args.final_eval_envs:
                        final_eval(args, env, estimator, out, run.steps)
                        run = read_run(env, estimator, seed, out, command, wall)
                    if run.evals:
                        runs.append(run)
                        bench = (
                            (out / "bench.txt").read_text().strip()
                            if (out / "bench.txt").exists()
                            else reproduce_command(args, envs=[env])
                        )
                        benches += [bench] if bench not in benches else []
        write_results(
            runs,
            docs=args.docs,
            png=png,
            speed=speed,
            reproduce="\n".join(benches) or reproduce_command(args),
            partial_note=args.partial,
            note=args.note,
            warm_starts=warm_start_infos(args, runs),
            warm_tests=warm_start_test_figures(args, runs),
            **hand_sections(records),
        )
        save_records(args, runs, records)
        print(f"wrote {args.docs} and {png} from {len(runs)} run(s); records in {records}")
        return
    if not args.no_speed and "alfworld" not in args.envs:
        print("speed: measured on ALFWorld only (it is not among --envs); skipped", flush=True)
    elif not args.no_speed:
        speed = asyncio.run(measure_speed(args))
        print(
            f"one RL step of {speed['tasks']} tasks x group {speed['group']} on built-in ALFWorld: {speed['step_s']:.1f} s "
            f"(rollouts {speed['sample_s']:.1f} s, update {speed['update_s']:.1f} s); {speed['tokens_per_s']:,.0f} tok/s, "
            f"{speed['episodes_per_s']:.2f} episodes/s",
            flush=True,
        )
        print(
            f"one turn of {speed['bench_prompts']} prompts: KV-cached batched sampler {speed['sampler_tokens_per_s']:,.0f} tok/s "
            f"vs plain HF generate (baseline) {speed['hf_tokens_per_s']:,.0f} tok/s",
            flush=True,
        )
        (args.out / "speed.json").write_text(json.dumps(speed, indent=2))
    plan = [
        (env, estimator, seed)
        for env in args.envs
        for seed in args.seeds
        for estimator in estimators_of(args, env)
    ]

    def one(job: tuple[str, str, int]) -> Any:
        env, estimator, seed = job
        out, command, wall = train(args, env, estimator, seed)
        run = read_run(env, estimator, seed, out, command, wall)
        if args.final_eval_tasks and env in args.final_eval_envs:
            final_eval(args, env, estimator, out, run.steps)
            run = read_run(env, estimator, seed, out, command, wall)
        stats = "".join(
            f"\n    step groups {key}: {run.mean_stat(key):.3f}"
            for key in ("repeat_rate", "mean_group_size", "size_1", "mixed_outcome")
        )
        print(
            f"{env} {estimator} seed {seed}: held-out {run.held_before['success']:.1%} -> {run.held_after['success']:.1%} "
            f"({run.held_tasks} tasks) "
            f"({run.steps} steps, {wall / 60:.1f} min){stats}",
            flush=True,
        )
        return run

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(one, plan))
    write_results(
        runs,
        docs=args.docs,
        png=png,
        speed=speed,
        reproduce=reproduce_command(args),
        partial_note=args.partial,
        note=args.note,
        warm_starts=warm_start_infos(args, runs),
        warm_tests=warm_start_test_figures(args, runs),
        **hand_sections(records),
    )
    save_records(args, runs, records)
    print(f"wrote {args.docs} and {png}; records in {records}")


if __name__ == "__main__":
    main()
