"""It learns from pixels: a tiny vision-language model on screenshot-only MiniWoB++, warm-started on
scripted trajectories, then GRPO and GiGPO with the local trainer; held-out success before and after RL
over several seeds, a blind baseline measured in the same run, and where an RL step's time goes.

    nice -n 10 .venv/bin/python bench/miniwob_pixels.py --docs docs/results/miniwob_pixels.md   # the page
    .venv/bin/python bench/miniwob_pixels.py --smoke --out DIR        # every part at toy sizes (CI)
    .venv/bin/python bench/miniwob_pixels.py --report-only --docs docs/results/miniwob_pixels.md

The model (the recipe's ``tiny-qwen3-vl``: Qwen3-VL-shaped, random weights, built here) sees only a
screenshot of the task area, with no element ids drawn on it, and acts only by coordinates (``browser_click_at``,
``browser_type_at``): ``--env-arg observation=screenshot actions=coordinates``. The tasks (click-test,
focus-text) put their one target at a random place, so the screenshot is all that says where to click.

1. **warm start**: ``toolgym warmstart --env miniwob_screenshot`` (:mod:`toolgym.training.warmstart.vision`:
   SFT on the scripted solvers' screenshot episodes, which click the centre of their element).
2. **before**: the warm start on the held-out tasks (seeds 7,000,000 + i, greedy), once: it is the same
   model and the same tasks for every seed, so every run starts from this figure.
3. **blind baseline**: a policy that never looks: each task's median target point over scripted episodes
   on other seeds, clicked on every held-out instance; a policy that ignores the pixels can do about this well.
4. **RL**: ``toolgym train --trainer local --config miniwob_screenshot_grpo`` with the overrides printed on
   the page, GRPO and GiGPO (its step-level groups: a missed click leaves the page as it was, so the
   retry shares the first turn's anchor), the same training tasks per seed; held-out success after the
   last step, and each step's seconds split into rollouts and update, the rollouts' episodes further into
   model, browser tool, environment (page start, screenshots) and sandbox time.

What the page is made from is kept in ``--records`` (default ``docs/results/data/NAME`` for ``--docs
docs/results/NAME.md``): the warm start's ``warmstart.json``, ``before.json``, ``blind.json`` and one
``ESTIMATOR-seedK.json`` per run. A run whose result is in ``--out`` is not run again.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import run_toolgym  # noqa: E402

RECIPE = "miniwob_screenshot"
CONFIG = "miniwob_screenshot_grpo"
HELDOUT_SEED = 7_000_000
"""The config's held-out tasks (``toolgym.val.seed``): environment seeds 7,000,000 + i."""
BLIND_FIT_SEED = 800_000
"""Scripted episodes that place the blind baseline's points (neither training, validation nor held-out seeds)."""
GIGPO = {"gamma": 0.95, "omega": 1.0}
SHAPES = {
    "tiny-vl": "Qwen2.5-VL-shaped, random weights, built locally",
    "tiny-qwen3-vl": "Qwen3-VL-shaped, random weights, built locally, its tower started as "
    "`core/llm/local/tiny_vl.py` says",
}
PHASES = ("llm_s", "tool_s", "env_s", "sandbox_s")
PHASE_NAMES = {
    "llm_s": "model (prefill with the screenshot, decoding)",
    "tool_s": "browser tool (the click, settling, the page read back)",
    "env_s": "environment (page start, screenshots, the result read)",
    "sandbox_s": "sandbox (acquire and release a browser)",
}


def model_name() -> str:
    """The tiny VLM the warm-start recipe starts from (``--model`` name)."""
    from toolgym.training.warmstart.recipe import recipe

    return recipe(RECIPE).model


def warm_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The warm-start recipe's changes: toy sizes for ``--smoke``, then ``--warm-set``'s (none by default)."""
    changes: dict[str, Any] = {}
    if args.smoke:
        changes.update(episodes=4, sft_max_steps=4, sft_check_every=4, sft_val_tasks=0, sft_batch_size=2)
    changes.update(args.warm_set)
    return changes


def recipe_field(text: str) -> tuple[str, Any]:
    """``--warm-set sft_max_steps=500`` → ``("sft_max_steps", 500)`` (the value read as YAML)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    from toolgym.training.warmstart.recipe import recipe

    kwargs = dict(recipe(RECIPE).env_kwargs)
    if args.smoke:
        kwargs["max_turns"] = 1
    return kwargs


def overrides(args: argparse.Namespace, model: Path, out: Path, *, estimator: str, seed: int) -> list[str]:
    """The ``toolgym train`` overrides of one run. Its own evaluation after the last step is cut to one
    task: the bench evaluates the last checkpoint itself (:func:`evaluate_model`), as it does the warm
    start, and keeps those held-out episodes for the click statistics."""
    kwargs = env_kwargs(args)
    o = [f"verl.actor_rollout_ref.model.path={model}"]
    o += [f"toolgym.env_kwargs.{k}={v}" for k, v in kwargs.items()]
    o += [
        f"toolgym.engine.max_turns={kwargs['max_turns']}",
        f"toolgym.engine.max_tokens_per_turn={args.max_tokens}",
        f"toolgym.group_size={args.group}",
        f"verl.data.train_batch_size={args.tasks}",
        f"verl.actor_rollout_ref.actor.ppo_mini_batch_size={args.tasks}",
        f"verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro}",
        f"verl.actor_rollout_ref.actor.optim.lr={args.lr}",
        "toolgym.val.num_tasks=1",
        f"toolgym.train.seed={10_000 * (seed + 1)}",
        f"verl.trainer.total_training_steps={args.steps}",
        "verl.trainer.val_before_train=false",
        f"verl.trainer.test_freq={args.steps}",
        f"verl.trainer.save_freq={args.steps}",
        f"verl.trainer.default_local_dir={out}",
    ]
    if estimator == "gigpo":
        o.append("toolgym.advantage.estimator=gigpo")
        o += [f"toolgym.advantage.options.{k}={v}" for k, v in GIGPO.items()]
    return o + list(args.set)  # --set: the same change to every run (an ablation)


def read_metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def episode_timings(out: Path) -> dict[str, Any]:
    """Mean seconds per training episode of a run (its stored trajectories), by phase."""
    from toolgym.trajectories.store import iter_trajectories

    trajs = [t for t in iter_trajectories(out / "trajectories") if t.seed < HELDOUT_SEED]
    if not trajs:
        return {"episodes": 0}
    timed = {k: statistics.mean(getattr(t.timings, k) for t in trajs) for k in ("total_s", *PHASES)}
    turns = statistics.mean(len(t.steps) for t in trajs)
    return {"episodes": len(trajs), "turns": turns, **timed}


STEP_KEYS = (
    "step",
    "train_success",
    "mean_reward",
    "episodes",
    "trainable",
    "rows",
    "policy_loss",
    "sample_s",
    "update_s",
    "wall_s",
    "tokens",
    "entropy",
    "filters",
)


def step_records(out: Path) -> list[dict[str, Any]]:
    """The run's per-step records (``metrics.jsonl``), the keys the page uses."""
    return [{k: r.get(k) for k in STEP_KEYS} for r in read_metrics(out) if r.get("step", 0) >= 1]


def train_run(args: argparse.Namespace, model: Path, estimator: str, seed: int) -> dict[str, Any]:
    """One RL run and the held-out evaluation of its last checkpoint (or both, when ``--out`` holds them)."""
    out = args.out / f"{estimator}-seed{seed}"
    saved = out / "result.json"
    if saved.is_file():
        print(f"{estimator} seed {seed}: kept from {saved}", flush=True)
        kept = json.loads(saved.read_text())
        if (out / "metrics.jsonl").is_file():  # the step records as this version of the bench keeps them
            kept["steps"] = step_records(out)
        return kept
    if out.exists():
        shutil.rmtree(out)  # a run that did not finish: start it again
    out.mkdir(parents=True)
    argv = [
        "train",
        "--trainer",
        "local",
        "--config",
        CONFIG,
        *overrides(args, model, out, estimator=estimator, seed=seed),
    ]
    print(f"{estimator} seed {seed}: training ({args.steps} steps) ...", flush=True)
    wall = run_toolgym(argv, out / "log.txt", _env())
    print(
        f"{estimator} seed {seed}: held-out evaluation of step {args.steps} ({args.eval_tasks} tasks) ...",
        flush=True,
    )
    after = evaluate_model(args, out / f"step-{args.steps:05d}", out / "heldout")
    result = {
        "estimator": estimator,
        "seed": seed,
        "command": "nice -n 10 toolgym "
        + shlex.join(argv[:5] + [a for a in argv[5:] if "default_local_dir" not in a]),
        "wall_s": wall,
        "after": after["heldout"],
        "clicks": after["clicks"],
        "steps": step_records(out),
        "episodes": episode_timings(out),
    }
    saved.write_text(json.dumps(result, indent=2))
    return result


def before_run(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    """The warm start on the held-out tasks (the same figure for every seed: same model, same tasks, greedy)."""
    out = args.out / "before"
    saved = out / "result.json"
    if saved.is_file():
        print(f"warm start held-out: kept from {saved}", flush=True)
        return json.loads(saved.read_text())
    shutil.rmtree(out, ignore_errors=True)
    print(f"warm start held-out: {args.eval_tasks} tasks ...", flush=True)
    result = evaluate_model(args, model, out / "heldout")
    saved.write_text(json.dumps(result, indent=2))
    return result


def evaluate_model(args: argparse.Namespace, model: Path, store: Path) -> dict[str, Any]:
    """``model`` on the held-out tasks with the local trainer's evaluator and the runs' settings (in this
    process); the episodes are kept in ``store``. Returns the held-out record and each task's first click."""
    return asyncio.run(_evaluate(args, model, store))


async def _evaluate(args: argparse.Namespace, model: Path, store: Path) -> dict[str, Any]:
    from toolgym.training.local.progress import eval_record
    from toolgym.training.runner import build, load_config, open_loop
    from toolgym.trajectories.store import TrajectoryWriter, iter_trajectories

    cfg = load_config(CONFIG, overrides(args, model, store.parent, estimator="grpo", seed=0))
    rl, _ = build(cfg)
    rl = rl.model_copy(update={"eval": rl.eval.model_copy(update={"num_tasks": args.eval_tasks})})
    writer = TrajectoryWriter(store)
    loop, _, close = open_loop(rl, model, sandbox_backend="docker", artifacts_dir=store / "artifacts")
    try:
        result = await loop.evaluate(on_trajectory=writer.write)
    finally:
        writer.close()
        await close()
    return {"heldout": eval_record(result), "clicks": first_clicks(iter_trajectories(store))}


def first_clicks(trajectories: Any) -> dict[str, list[int] | None]:
    """Each held-out task's first click ``[x, y]`` (None: the first turn made none), by task index."""
    clicks: dict[str, list[int] | None] = {}
    for t in trajectories:
        call = t.steps[0].tool_calls[0] if t.steps and t.steps[0].tool_calls else None
        args = call.arguments if call is not None and isinstance(call.arguments, dict) else {}
        ok = isinstance(args.get("x"), int) and isinstance(args.get("y"), int)
        clicks[str(t.seed - HELDOUT_SEED)] = [args["x"], args["y"]] if ok else None
    return dict(sorted(clicks.items(), key=lambda kv: int(kv[0])))


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


# -- the blind baseline ----------------------------------------------------------------------------------


def blind_run(args: argparse.Namespace) -> dict[str, Any]:
    """Each task's median target point (scripted episodes on other seeds), clicked on every held-out task."""
    saved = args.out / "blind" / "result.json"
    if saved.is_file():
        print(f"blind baseline: kept from {saved}", flush=True)
        return json.loads(saved.read_text())
    print(
        f"blind baseline: {args.blind_fit} scripted episodes place the points, then {args.eval_tasks} held-out tasks ...",
        flush=True,
    )
    shutil.rmtree(args.out / "blind", ignore_errors=True)
    result = asyncio.run(_blind(args, args.out / "blind"))
    saved.write_text(json.dumps(result, indent=2))
    return result


async def _blind(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from toolgym.collect.plan import CollectOptions
    from toolgym.collect.run import collect
    from toolgym.core.rollout.config import EngineConfig
    from toolgym.trajectories.store import iter_trajectories

    kwargs = env_kwargs(args)
    engine = EngineConfig(
        max_turns=kwargs["max_turns"], max_tokens_per_turn=args.max_tokens, max_live_episodes=4
    )

    def options(where: Path, episodes: int, seed: int) -> CollectOptions:
        return CollectOptions(
            env="miniwob", out=where, model="scripted", tokenizer=model_name(), episodes=episodes,
            engine=engine.model_copy(update={"seed": seed}), env_kwargs=kwargs, sandbox_backend="docker", fail_fast=0,
        )  # fmt: skip

    await collect(options(out / "fit", args.blind_fit, BLIND_FIT_SEED))
    targets: dict[str, list[tuple[int, int]]] = {}
    for t in iter_trajectories(out / "fit"):
        call = t.steps[0].tool_calls[0] if t.steps and t.steps[0].tool_calls else None
        if call is not None and isinstance(call.arguments, dict):
            task = t.metadata["env_info"]["miniwob_task"]
            targets.setdefault(task, []).append((int(call.arguments["x"]), int(call.arguments["y"])))
    # the solver's clicks on the held-out tasks: what a policy's clicks are compared with (never trained on)
    await collect(options(out / "targets", args.eval_tasks, HELDOUT_SEED))
    solved = list(iter_trajectories(out / "targets"))
    tasks_of = {str(t.seed - HELDOUT_SEED): t.metadata["env_info"]["miniwob_task"] for t in solved}
    centres = {k: [tasks_of[k], *xy] for k, xy in first_clicks(solved).items() if xy is not None}
    points = {
        task: (int(statistics.median(x for x, _ in xy)), int(statistics.median(y for _, y in xy)))
        for task, xy in sorted(targets.items())
    }
    opts = options(out / "heldout", args.eval_tasks, HELDOUT_SEED)
    from toolgym.core.rollout.policies import policy_tokenizer, policy_vision
    from toolgym.core.tokens.chat import ChatFormat

    chat = ChatFormat(policy_tokenizer(model_name()), vision=policy_vision(model_name()))
    await collect(opts, policy=fixed_points(chat, points))
    won = {t.seed - HELDOUT_SEED: float(t.reward >= 1.0 - 1e-9) for t in iter_trajectories(out / "heldout")}
    return {
        "points": points,
        "fit_episodes": sum(len(v) for v in targets.values()),
        "success": statistics.mean(won.values()) if won else 0.0,
        "episodes": len(won),
        "per_task": {str(k): v for k, v in sorted(won.items())},
        "targets": dict(sorted(centres.items(), key=lambda kv: int(kv[0]))),
    }


def _fixed_points_class() -> Any:
    from toolgym.core.rollout.policy import ScriptedPolicy
    from toolgym.core.types import GenerationResult

    class _FixedPoints(ScriptedPolicy):
        """Clicks one fixed point per task, whatever the screenshot shows (the blind baseline)."""

        name = "blind-points"

        def __init__(self, chat: Any, points: dict[str, tuple[int, int]]) -> None:
            super().__init__(chat)
            self.points = points

        async def act(self, env: Any) -> GenerationResult:
            x, y = self.points[env.task.metadata["task"]]
            call = {"name": "browser_click_at", "arguments": {"x": x, "y": y}}
            text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
            return GenerationResult(
                output_ids=self.chat.encode(text) + self._eos, logprobs=None, finish_reason="stop"
            )

    return _FixedPoints


def fixed_points(chat: Any, points: dict[str, tuple[int, int]]) -> Any:
    """The blind baseline's policy (its class is made on first use: the bench imports toolgym lazily)."""
    return _fixed_points_class()(chat, points)


# -- the image-swap test ----------------------------------------------------------------------------------


def swap_test(model: Path, dataset: Path) -> dict[str, Any]:
    """The loss of a model on scripted rows (``dataset``: the blind baseline's fitting episodes, never trained
    on) with each row's own screenshot, and with the screenshot of another instance of the same task
    (the next row's): equal losses mean the model's clicks do not depend on what the screenshot shows."""
    from transformers import AutoModelForImageTextToText

    from toolgym.core.tokens.vision import load_image_processor
    from toolgym.training.local.config import OptimConfig, PPOConfig
    from toolgym.training.local.sft import sft_rows
    from toolgym.training.local.trainer import PolicyTrainer
    from toolgym.trajectories.store import iter_trajectories

    by_task: dict[str, list[Any]] = {}
    for t in iter_trajectories(dataset):
        rows = sft_rows([t], min_reward=1.0 - 1e-9, images_root=dataset)
        if rows:
            by_task.setdefault(t.metadata["env_info"]["miniwob_task"], []).append(rows[0])
    own = [r for rows in by_task.values() if len(rows) > 1 for r in rows]
    swapped = [
        dataclasses.replace(r, images=rows[(i + 1) % len(rows)].images)
        for rows in by_task.values()
        if len(rows) > 1
        for i, r in enumerate(rows)
    ]
    if not own:
        return {"rows": 0}
    net = AutoModelForImageTextToText.from_pretrained(str(model)).float().eval()
    trainer = PolicyTrainer(
        net,
        optim=OptimConfig(lr=1e-9),
        ppo=PPOConfig(micro_batch_size=8),
        image_processor=load_image_processor(model),
    )
    tokens = statistics.mean(r.num_tokens for r in own)
    return {
        "rows": len(own),
        "tokens_per_row": tokens,
        "own": trainer.mean_nll(own),
        "swapped": trainer.mean_nll(swapped),
        "feature_spread": feature_spread(net, load_image_processor(model), [r.images[0] for r in own]),
    }


def feature_spread(net: Any, processor: Any, images: list[bytes]) -> float:
    """How much the vision tower's output (the image tokens the text model reads) differs between
    screenshots: the mean absolute deviation from the mean over images, position by position, over the
    mean absolute value (0: every screenshot gives the text model the same tokens)."""
    import io

    import torch
    from PIL import Image

    outs = []
    with torch.no_grad():
        for data in images:
            inputs = processor(images=[Image.open(io.BytesIO(data)).convert("RGB")], return_tensors="pt")
            out = net.model.visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
            outs.append(out if isinstance(out, torch.Tensor) else out.pooler_output)
    stack = torch.stack(outs)  # (images, tokens, width): one screenshot size, so one token grid
    return float((stack - stack.mean(0)).abs().mean() / stack.abs().mean())


def swap_tests(args: argparse.Namespace, model: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`swap_test` of the warm start and of each run's last checkpoint (kept in ``OUT/swap.json``)."""
    saved = args.out / "swap.json"
    done: dict[str, Any] = json.loads(saved.read_text()) if saved.is_file() else {}
    fit = args.out / "blind" / "fit"
    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.resolve import TINY

    fresh = ensure_tiny_model(TINY[model_name()])  # type: ignore[arg-type]
    todo = [(model_name(), fresh), ("warm start", model)] + [
        (
            f"{r['estimator']}-seed{r['seed']}",
            args.out / f"{r['estimator']}-seed{r['seed']}" / f"step-{args.steps:05d}",
        )
        for r in runs
    ]
    for name, path in todo:
        if name not in done and path.is_dir():
            print(f"image-swap test: {name} ...", flush=True)
            done[name] = swap_test(path, fit)
            saved.write_text(json.dumps(done, indent=2))
    return done


def swap_rows(data: dict[str, Any]) -> list[str]:
    swap = data.get("swap") or {}
    lines = []
    for name, r in swap.items():
        if not r.get("rows"):
            continue
        label = (
            {"warm start": "warm start"}.get(name)
            or (f"{name}, random weights" if name.startswith("tiny-") else None)
            or (f"{NAME[name.split('-')[0]]} seed {name.rsplit('seed', 1)[1]}")
        )
        lines.append(
            f"| {label} | {r['rows']} | {r['own']:.4f} | {r['swapped']:.4f} | {r['swapped'] - r['own']:+.4f} | "
            f"{100 * r.get('feature_spread', 0.0):.2f} % |"
        )
    return lines


# -- the page ----------------------------------------------------------------------------------------------


def click_stats(clicks: dict[str, Any], targets: dict[str, Any]) -> dict[str, Any]:
    """How a policy's first clicks follow the targets on the held-out tasks, task by task (a pooled
    figure would mostly measure that the tasks' targets lie in different places): the tasks with a
    click, the distinct points clicked per task, the mean absolute distance to the solver's point
    (pixels), and the correlation of the click's x and y with the target's within each task, averaged
    over the tasks where it is defined (None: every click of a task at one place, which follows nothing)."""
    by_task: dict[str, list[tuple[list[int], list[int]]]] = {}
    for k, c in clicks.items():
        if c is not None and k in targets:
            by_task.setdefault(targets[k][0], []).append((c, targets[k][1:]))
    pairs = [pair for task in by_task.values() for pair in task]
    out: dict[str, Any] = {
        "tasks": len(clicks),
        "clicked": len(pairs),
        "points": {task: len({tuple(c) for c, _ in ps}) for task, ps in sorted(by_task.items())},
    }
    for axis, name in ((0, "x"), (1, "y")):
        out[f"mae_{name}"] = statistics.mean(abs(c[axis] - t[axis]) for c, t in pairs) if pairs else None
        rs = []
        for ps in by_task.values():
            try:
                rs.append(statistics.correlation([c[axis] for c, _ in ps], [t[axis] for _, t in ps]))
            except statistics.StatisticsError:  # fewer than two clicks, or all at one place
                pass
        out[f"r_{name}"] = statistics.mean(rs) if rs else None
    return out


def _num(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * spread:.1f}"


REWARD_NOTES = {
    "distance": " The RL runs train on `reward=distance`: a miss scores -1 plus up to 0.5 by how near its last "
    "click came to the scripted solver's point (a Gaussian of the distance, 16 px spread), so that a click one image "
    "cell off the target scores above one across the page; success still counts wins only."
}
"""What the page says of a training reward other than the environment's default (``--set``)."""


def trained_reward(args: argparse.Namespace) -> str:
    """The ``reward`` the runs train on (``--set toolgym.env_kwargs.reward=...``; ``raw`` by default)."""
    found = [s.split("=", 1)[1] for s in args.set if s.startswith("toolgym.env_kwargs.reward=")]
    return found[-1] if found else "raw"


def page(args: argparse.Namespace, data: dict[str, Any], command: str) -> str:
    warm, before, blind, runs = data["warmstart"], data["before"], data["blind"], data["runs"]
    b = before["heldout"]["success"]
    recipe = warm["recipe"]
    lines = [
        f"# It learns from pixels: {recipe['model']} on screenshot-only MiniWoB++",
        "",
        "Generated by `bench/miniwob_pixels.py` from the records in "
        f"`{_rel(args.records)}`; do not edit by hand.",
        "",
        f"A tiny vision-language model (`{recipe['model']}`, {SHAPES.get(recipe['model'], 'random weights')}) sees only a "
        f"screenshot of the MiniWoB++ task area (scale {recipe['env_kwargs'].get('screenshot_scale')}, no element ids drawn, "
        "the latest screenshot only) and acts only by coordinates (`browser_click_at`, `browser_type_at`). "
        f"Tasks: {recipe['env_kwargs']['tasks'].replace(',', ', ')}, each with one target at a random place; at most "
        f"{recipe['env_kwargs']['max_turns']} turns; a task ends with 1 when the page's own `core.js` says so, else -1."
        + REWARD_NOTES.get(trained_reward(args), ""),
        "",
        "## Held-out success (%)",
        "",
        f"{before['heldout']['episodes']} held-out tasks (seeds {HELDOUT_SEED:,} + i), greedy. *Before* is the warm start, "
        "evaluated once: every run starts from the same model and is evaluated on the same tasks.",
        "",
        "| estimator | seed | before | after | change |",
        "|---|---|---|---|---|",
    ]
    for est in args.estimators:
        mine = [r for r in runs if r["estimator"] == est]
        for r in mine:
            a = r["after"]["success"] if r["after"] else None
            lines.append(f"| {NAME[est]} | {r['seed']} | {pct(b)} | {pct(a)} | {_signed(a, b)} |")
        afters = [r["after"]["success"] for r in mine if r["after"]]
        if afters:
            lines.append(
                f"| **{NAME[est]}** | mean ± std ({len(afters)}) | {pct(b)} | **{mean_std(afters)}** | "
                f"{mean_std([a - b for a in afters])} |"
            )
    lines += [
        "",
        f"Blind baseline, measured in the same run: **{pct(blind['success'])} %** on the same {blind['episodes']} tasks, "
        f"clicking each task's median target point over {blind['fit_episodes']} scripted episodes on other seeds "
        f"({', '.join(f'{k} at ({x}, {y})' for k, (x, y) in blind['points'].items())}), whatever the screenshot shows.",
        "",
        "## Does it look at the screenshot?",
        "",
        "Each policy's first click on the held-out tasks beside the scripted solver's point (the target's centre) "
        "on the same tasks, task by task: how many distinct points it clicked per task (a greedy policy that "
        "ignores the image clicks one), the correlation of x and of y with the target's within a task, averaged "
        "over the tasks where it is defined (– where every click of a task is at one place), and the mean "
        "distance in pixels.",
        "",
        "| policy | tasks with a click | distinct points clicked | r(x) | r(y) | mean abs dx | mean abs dy |",
        "|---|---|---|---|---|---|---|",
        *click_rows(data),
        "",
        "Image-swap test: the loss (nats per target token, about "
        f"{statistics.mean(r['tokens_per_row'] for r in (data.get('swap') or {}).values() if r.get('rows')) if any(r.get('rows') for r in (data.get('swap') or {}).values()) else 0:.0f} "
        "tokens per row, the coordinates' digits among them) on the blind baseline's scripted episodes, never trained "
        "on, with each row's own screenshot and with the screenshot of another instance of the same task. A model whose "
        "clicks follow the image loses more with the wrong screenshot. The last column is how much the vision "
        "tower's output differs between these screenshots (mean absolute deviation from the mean over screenshots, "
        "over the mean absolute value): what the text model could tell the instances apart by.",
        "",
        "| policy | rows | own screenshot | another instance's | difference | image tokens' spread |",
        "|---|---|---|---|---|---|",
        *swap_rows(data),
        "",
        "## Warm start",
        "",
        f"`toolgym warmstart --env {recipe['name']}` ({_changes(args)}): {recipe['episodes']} scripted screenshot episodes "
        f"(scripted success {pct(warm.get('scripted_success'))} %), {warm['rows']} SFT rows with their screenshots, "
        f"{warm['sft_steps']} SFT steps (lr {recipe['sft_lr']}, batches of {recipe['sft_batch_size']}), loss "
        f"{warm['sft_losses'][0]:.3f} → {warm['sft_losses'][-1]:.3f}; validation (training-split tasks, greedy): "
        + (", ".join(f"{pct(s)} % at {k}" for k, s in warm["validation"]) or "none")
        + f"; {warm['seconds'] / 60:.1f} min.",
        "",
        "## Where an RL step's time goes",
        "",
        f"{args.tasks} tasks x {args.group} samples per step; medians over every step of every run, seconds.",
        "",
        "| estimator | whole step | rollouts | update | rows | episode (mean) | "
        + " | ".join(PHASE_NAMES[p].split(" (")[0] for p in PHASES)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(PHASES),
    ]
    for est in args.estimators:
        mine = [r for r in runs if r["estimator"] == est]
        steps = [s for r in mine for s in r["steps"]]
        if not steps:
            continue
        eps = [r["episodes"] for r in mine if r["episodes"].get("episodes")]
        med = {
            k: statistics.median(s[k] for s in steps if s.get(k) is not None)
            for k in ("wall_s", "sample_s", "update_s", "rows")
        }
        per = {k: statistics.mean(e[k] for e in eps) for k in ("total_s", *PHASES)} if eps else {}
        lines.append(
            f"| {NAME[est]} | {med['wall_s']:.1f} | {med['sample_s']:.1f} | {med['update_s']:.1f} | {med['rows']:.0f} | "
            + (
                f"{per['total_s']:.2f} | " + " | ".join(f"{per[p]:.2f}" for p in PHASES)
                if per
                else "– |" * len(PHASES)
            )
            + " |"
        )
    lines += [
        "",
        "The whole step is the rollouts (episodes run concurrently, so their phases overlap), the update (the PPO "
        "forward and backward passes over the rows, screenshots through the vision tower) and the trainer's bookkeeping. "
        "The episode columns are mean seconds per training episode: "
        + "; ".join(f"{PHASE_NAMES[p]}" for p in PHASES)
        + ".",
        "",
        "## Runs",
        "",
        "| run | steps | train success by step (%) | episodes lost to sandbox errors | wall (min) |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        curve = " ".join(f"{100 * s['train_success']:.0f}" for s in r["steps"])
        lost = sum(int((s.get("filters") or {}).get("filter/sandbox_error", 0)) for s in r["steps"])
        total = sum(int(s.get("episodes") or 0) for s in r["steps"])
        lines.append(
            f"| {NAME[r['estimator']]} seed {r['seed']} | {len(r['steps'])} | {curve} | {lost} of {total} | "
            f"{r['wall_s'] / 60:.1f} |"
        )
    lines += [
        "",
        "## Protocol",
        "",
        f"    {command}",
        "",
        "Each run (the first, GRPO seed 0; the others differ in `toolgym.train.seed` and the estimator):",
        "",
        f"    {shown_command(runs[0]['command'], recipe) if runs else ''}",
        "",
        f"Hardware: {args.hardware_note or 'this machine'}.",
        "",
    ]
    if data.get("about"):
        lines += ["## About these figures", "", data["about"].strip(), ""]
    return "\n".join(lines)


NAME = {"grpo": "GRPO", "gigpo": "GiGPO"}


def shown_command(command: str, recipe: dict[str, Any]) -> str:
    """A run's command as a reader reruns it: the cached warm start of the shipped recipe by its name."""
    from toolgym.training.warmstart.recipe import WarmStartRecipe
    from toolgym.training.warmstart.recipe import recipe as shipped

    if WarmStartRecipe(**recipe) != shipped(RECIPE):
        return command
    return re.sub(
        r"(model\.path=)\S*/" + re.escape(RECIPE) + r"-[0-9a-f]+", r"\1warmstart:" + RECIPE, command
    )


def click_rows(data: dict[str, Any]) -> list[str]:
    targets = data["blind"].get("targets") or {}
    rows = [("warm start", data["before"].get("clicks") or {})]
    rows += [(f"{NAME[r['estimator']]} seed {r['seed']}", r.get("clicks") or {}) for r in data["runs"]]
    lines = []
    for name, clicks in rows:
        c = click_stats(clicks, targets)
        points = ", ".join(f"{n} ({task})" for task, n in c["points"].items()) or "–"
        lines.append(
            f"| {name} | {c['clicked']}/{c['tasks']} | {points} | {_num(c['r_x'])} | {_num(c['r_y'])} | "
            f"{_num(c['mae_x'], 1)} | {_num(c['mae_y'], 1)} |"
        )
    return lines


def _signed(a: float | None, b: float) -> str:
    return "–" if a is None else f"{100 * (a - b):+.1f}"


def _changes(args: argparse.Namespace) -> str:
    changes = warm_changes(args)
    return "the shipped recipe" if not changes else " ".join(f"--set {k}={v}" for k, v in changes.items())


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def save_records(args: argparse.Namespace, data: dict[str, Any]) -> None:
    rec = args.records
    rec.mkdir(parents=True, exist_ok=True)
    (rec / "warmstart.json").write_text(json.dumps(data["warmstart"], indent=2) + "\n")
    (rec / "before.json").write_text(json.dumps(data["before"], indent=2) + "\n")
    (rec / "blind.json").write_text(json.dumps(data["blind"], indent=2) + "\n")
    (rec / "swap.json").write_text(json.dumps(data.get("swap") or {}, indent=2) + "\n")
    for r in data["runs"]:
        (rec / f"{r['estimator']}-seed{r['seed']}.json").write_text(json.dumps(r, indent=2) + "\n")


def load_records(args: argparse.Namespace) -> dict[str, Any]:
    rec = args.records
    runs = [
        json.loads((rec / f"{est}-seed{seed}.json").read_text())
        for est in args.estimators
        for seed in args.seeds
        if (rec / f"{est}-seed{seed}.json").is_file()
    ]
    about = rec / "about.md"
    return {
        "warmstart": json.loads((rec / "warmstart.json").read_text()),
        "before": json.loads((rec / "before.json").read_text()),
        "blind": json.loads((rec / "blind.json").read_text()),
        "swap": json.loads((rec / "swap.json").read_text()) if (rec / "swap.json").is_file() else {},
        "runs": runs,
        "about": about.read_text() if about.is_file() else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--estimators", nargs="+", default=["grpo", "gigpo"], choices=["grpo", "gigpo"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per RL step")
    parser.add_argument("--group", type=int, default=4, help="samples per task")
    parser.add_argument("--micro", type=int, default=8, help="rows per forward pass of the update")
    parser.add_argument(
        "--lr",
        type=float,
        default=1e-4,
        help="RL learning rate (3e-4 lowered held-out success in 6 of 6 runs; 1e-3 broke the tool-call format)",
    )
    parser.add_argument("--max-tokens", type=int, default=40, help="tokens per turn")
    parser.add_argument("--eval-tasks", type=int, default=48)
    parser.add_argument(
        "--blind-fit", type=int, default=32, help="scripted episodes that place the blind points"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/miniwob_pixels"))
    parser.add_argument("--docs", type=Path, default=None, help="the page (default: OUT/miniwob_pixels.md)")
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="default: docs/results/data/NAME with --docs, else OUT/records",
    )
    parser.add_argument("--smoke", action="store_true", help="every part at toy sizes: 1 seed, 1 step")
    parser.add_argument(
        "--report-only", action="store_true", help="write the page from --records, run nothing"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more `toolgym train` override for every run (repeatable; an ablation), shown in each run's command",
    )
    parser.add_argument(
        "--warm-set",
        action="append",
        default=[],
        type=recipe_field,
        metavar="FIELD=VALUE",
        help="one more warm-start recipe field (repeatable; e.g. sft_max_steps=500 for a shorter warm start); "
        "its own cached build",
    )
    parser.add_argument("--hardware-note", default="", help="what else ran on the machine, for the page")
    args = parser.parse_args()
    command = "python bench/miniwob_pixels.py " + shlex.join(a for a in sys.argv[1:] if a != "--report-only")
    if args.smoke:
        args.seeds, args.steps, args.tasks, args.group, args.eval_tasks, args.blind_fit = [0], 1, 1, 2, 2, 2
        args.micro, args.max_tokens = 2, 32
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.records is None:
        args.records = args.docs.parent / "data" / args.docs.stem if args.docs else args.out / "records"
    if args.report_only:
        write_page(args, load_records(args), command)
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from toolgym.training.warmstart import build as warmstart

    started = time.monotonic()
    recipe = warmstart.recipe(RECIPE, **warm_changes(args))
    model = warmstart.find_built(recipe)
    if model is None:
        print(f"warm start {RECIPE}: building (once; cached) ...", flush=True)
        printed: dict[str, int] = {}

        def progress(phase: str, done: int, total: int, note: str) -> None:
            step = max(1, total // 5)
            if done == total or done - printed.get(phase, -step) >= step:
                printed[phase] = done
                print(f"  warm start {phase}: {done}/{total} {note}", flush=True)

        model = warmstart.build(recipe, progress=progress)
    else:
        print(f"warm start {RECIPE}: cached in {model}", flush=True)
    data: dict[str, Any] = {"warmstart": json.loads((model / "warmstart.json").read_text())}
    data["before"] = before_run(args, model)
    print(f"warm start held-out success: {pct(data['before']['heldout']['success'])} %", flush=True)
    data["blind"] = blind_run(args)
    print(f"blind baseline held-out success: {pct(data['blind']['success'])} %", flush=True)
    data["runs"] = []
    for seed in args.seeds:
        for est in args.estimators:
            r = train_run(args, model, est, seed)
            after = r["after"]["success"] if r["after"] else None
            step_s = statistics.median(s["wall_s"] for s in r["steps"]) if r["steps"] else 0.0
            print(
                f"{est} seed {seed}: held-out {pct(data['before']['heldout']['success'])} % -> {pct(after)} %, "
                f"{step_s:.1f} s per step, {r['wall_s'] / 60:.1f} min in all",
                flush=True,
            )
            data["runs"].append(r)
    data["swap"] = swap_tests(args, model, data["runs"])
    about = args.records / "about.md"
    data["about"] = about.read_text() if about.is_file() else ""
    save_records(args, data)
    write_page(args, data, command)
    print(f"benchmark: {(time.monotonic() - started) / 60:.1f} min", flush=True)


def write_page(args: argparse.Namespace, data: dict[str, Any], command: str) -> None:
    docs = args.docs or args.out / "miniwob_pixels.md"
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(page(args, data, command))
    print(f"wrote {docs}", flush=True)


if __name__ == "__main__":
    main()
