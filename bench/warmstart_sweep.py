"""Which warm-start recipe reaches the target: build several variants of a recipe side by side and
compare their validation success (greedy, training split) over SFT steps.

    .venv/bin/python bench/warmstart_sweep.py --env alfworld --device cuda --jobs 4 \\
        --variant base: --variant wide:hidden_size=128,num_heads=4 --variant deep:hidden_size=128,num_layers=4,num_heads=4
    .venv/bin/python bench/warmstart_sweep.py --smoke            # two toy variants on CPU, under a minute
    .venv/bin/python bench/warmstart_sweep.py --env webshop --heldout webshop_grpo --heldout-tasks 96 \
        --variant v2k:vocab_size=2048 --variant v4k:vocab_size=4096

``--heldout CONFIG`` then measures each built variant on the local config's validation tasks
(``toolgym.val``: the environment's ``validation`` split, which choices may look at) with its held-out
decoding, ``--heldout-tasks`` of them, in a process of its own (``--eval-model DIR``, which prints one
JSON line). ``--eval-model DIR --heldout CONFIG --test NAME`` measures a model on the config's test
split ``toolgym.test.NAME`` instead (ALFWorld: ``in_distribution``, ``out_of_distribution``; repeat
``--test`` for several, one JSON line each): the learning table's final evaluation, reported and never
chosen on.

A variant is ``NAME:FIELD=VALUE,...`` (fields of ``WarmStartRecipe``; ``NAME:`` alone is the shipped
recipe); ``--set FIELD=VALUE`` applies to every variant. Each variant is one ``toolgym warmstart``
process with its own cache directory under ``--out`` (no two processes build the same tokenizer),
``--jobs`` at a time. The baseline is the shipped recipe, built in the same run when listed. Prints
one line per variant (rows, SFT steps, validation success at each check, seconds) and writes
``sweep.json`` under ``--out``; a variant whose directory already holds a build is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, colon, fields = text.partition(":")
    if not colon or not name:
        raise SystemExit(
            f"--variant {text!r}: give NAME:FIELD=VALUE,... (NAME: alone for the shipped recipe)"
        )
    return name, [f for f in fields.split(",") if f]


def build(args: argparse.Namespace, name: str, fields: list[str]) -> dict[str, Any]:
    """One variant: ``toolgym warmstart`` in its own process and cache; returns its summary."""
    cache = args.out / name
    cache.mkdir(parents=True, exist_ok=True)
    sets = [x for f in [*args.set, *fields] for x in ("--set", f)]
    cmd = [
        sys.executable,
        "-m",
        "toolgym",
        "warmstart",
        "--env",
        args.env,
        "--device",
        args.device,
        "--threads",
        str(args.threads),
        *sets,
    ]
    env = {
        **os.environ,
        "TOOLGYM_CACHE": str(cache),
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    started = time.perf_counter()
    with open(cache / "build.log", "w") as log:
        result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True, check=False)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        tail = (cache / "build.log").read_text().strip().splitlines()[-3:]
        return {
            "name": name,
            "fields": fields,
            "error": f"exit {result.returncode}: {' | '.join(tail)}",
            "wall_s": wall,
        }
    directory = Path(result.stdout.strip().splitlines()[-1])
    info = json.loads((directory / "warmstart.json").read_text())
    return {
        "name": name,
        "fields": fields,
        "dir": str(directory),
        "rows": info["rows"],
        "scripted_success": info["scripted_success"],
        "sft_steps": info["sft_steps"],
        "validation": info["validation"],
        "final_loss": info["sft_losses"][-1] if info["sft_losses"] else None,
        "build_s": info["seconds"],
        "wall_s": wall,
        "device": info.get("device", "cpu"),
        "recipe": info["recipe"],
    }


def heldout(args: argparse.Namespace, directory: str) -> dict[str, Any]:
    """The held-out evaluation of ``--heldout`` on the model in ``directory``, in its own process."""
    cmd = [
        sys.executable,
        __file__,
        "--eval-model",
        directory,
        "--heldout",
        args.heldout,
        "--heldout-tasks",
        str(args.heldout_tasks),
        "--device",
        args.device,
        "--threads",
        str(args.threads),
        *(f"--heldout-set={o}" for o in args.heldout_set),
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def evaluate_model(args: argparse.Namespace) -> None:
    """``--eval-model DIR``: success of one model with the local config ``--heldout`` on its validation
    tasks, or on each test split named by ``--test`` (one JSON line per evaluation, in one process)."""
    import asyncio

    import torch

    from toolgym.core.errors import ConfigError
    from toolgym.training import runner

    torch.set_num_threads(max(1, args.threads))
    overrides = [f"toolgym.val.num_tasks={args.heldout_tasks}", *args.heldout_set]
    data = runner.load_config(args.heldout, overrides)
    tests = data["toolgym"].get("test") or {}
    unknown = [name for name in args.test if name not in tests]
    if unknown:
        raise ConfigError(
            f"config {args.heldout} has no test split {unknown[0]!r} under toolgym.test; it has: "
            + (", ".join(tests) or "none")
        )
    settings_of = []
    for name in args.test or [""]:
        if name:  # the test range takes the evaluation's place (same decoding); training never reads it
            data["toolgym"]["val"] = {**tests[name], "num_tasks": args.heldout_tasks}
        rl, settings = runner.build(data)
        # the config's sandboxes (math_python runs Python in them): without them every tool call fails
        # and the figure would measure the missing sandbox, not the model
        runner.check_environment(rl, settings["sandbox_backend"])
        settings_of.append((name, rl, settings))

    async def go(name: str, rl: Any, settings: dict[str, Any]) -> dict[str, Any]:
        loop, _, close = runner.open_loop(
            rl, Path(args.eval_model), device=args.device, sandbox_backend=settings["sandbox_backend"]
        )
        try:
            result = await loop.evaluate()
        finally:
            await close()
        return {
            "config": args.heldout,
            "split": str({**rl.env_kwargs, **rl.eval.env_kwargs}.get("split", "default")),
            **({"test": name} if name else {}),
            "tasks": result.episodes,
            "success": result.success,
            "score": result.mean_score,
            "failed": result.failed,
            "seconds": result.seconds,
            "by_type": result.by_type,
            "per_task": result.per_task,
        }

    for name, rl, settings in settings_of:
        print(json.dumps(asyncio.run(go(name, rl, settings))), flush=True)


def line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['name']:>10}: FAILED {r['error']}"
    checks = " ".join(f"{step}:{success:.0%}" for step, success in r["validation"])
    held = r.get("heldout")
    tail = ""
    if held:
        tail = (
            f"; held-out FAILED {held['error']}"
            if "error" in held
            else f"; held-out {held['success']:.1%} (score {held['score']:.1%}, {held['tasks']} tasks of {held['config']})"
        )
    return (
        f"{r['name']:>10}: {r['rows']} rows, {r['sft_steps']} SFT steps, final loss {r['final_loss']:.3f}, "
        f"validation {checks}, {r['build_s']:.0f} s on {r['device']}{tail}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="alfworld")
    parser.add_argument("--variant", action="append", default=[], help="NAME:FIELD=VALUE,... (repeatable)")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE for every variant")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads per variant")
    parser.add_argument("--out", type=Path, default=Path("runs/warmstart_sweep"))
    parser.add_argument("--smoke", action="store_true", help="two toy variants on CPU")
    parser.add_argument(
        "--heldout", help="a local config (e.g. webshop_grpo): measure each variant on its held-out tasks"
    )
    parser.add_argument("--heldout-tasks", type=int, default=96)
    parser.add_argument(
        "--heldout-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of the --heldout config (e.g. toolgym.sandbox_backend=local)",
    )
    parser.add_argument("--eval-model", help=argparse.SUPPRESS)
    parser.add_argument(
        "--test",
        action="append",
        default=[],
        metavar="NAME",
        help="with --eval-model: the config's test split toolgym.test.NAME instead of its validation tasks "
        "(repeatable: one JSON line each)",
    )
    args = parser.parse_args()
    if args.eval_model:
        from toolgym.core.errors import ToolgymError

        try:
            evaluate_model(args)
        except ToolgymError as exc:  # one clear line (the caller shows the last line of stderr)
            raise SystemExit(f"error: {exc}") from None
        return
    if args.smoke:
        args.variant = ["base:", "wide:hidden_size=96,num_heads=3"]
        args.set = ["episodes=8", "sft_max_steps=2", "sft_check_every=2", "sft_val_tasks=2", *args.set]
        args.threads = 1
    if not args.variant:
        args.variant = ["base:"]
    variants = [parse_variant(v) for v in args.variant]
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"building {len(variants)} {args.env} warm-start variant(s) on {args.device}, {args.jobs} at a time; logs under {args.out}/NAME/",
        flush=True,
    )

    def one(v: tuple[str, list[str]]) -> dict[str, Any]:
        r = build(args, *v)
        if args.heldout and "error" not in r:
            r["heldout"] = heldout(args, r["dir"])
        print(line(r), flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, variants))
    (args.out / "sweep.json").write_text(
        json.dumps({"env": args.env, "device": args.device, "set": args.set, "variants": results}, indent=2)
    )
    print(f"wrote {args.out / 'sweep.json'}")
    if any("error" in r for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
