"""Does a warm start reproduce? Build one recipe N times, each in its own process on a clean cache (its
own tokenizer too), compare the weights bit for bit, and measure each build's held-out success.

    .venv/bin/python bench/warmstart_repro.py --env math_python           # 2 builds, ~2 min each on 2 free cores
    .venv/bin/python bench/warmstart_repro.py --smoke                     # toy size, about a minute
    .venv/bin/python bench/warmstart_repro.py --env alfworld --heldout-tasks 480 --builds 3

Builds run one after another (``--threads`` torch threads each, the CLI's default 2), so that they do
not slow each other down; each is ``toolgym warmstart`` with ``TOOLGYM_CACHE`` set to a fresh folder
under ``--out``. Held-out success is the learning table's "before" column: the local config's
held-out tasks (``toolgym.val``) and decoding, measured by ``bench/warmstart_sweep.py --eval-model`` in
a process of its own.

Baseline, printed beside the figures: the warm start docs/results.md used
(``docs/results/data/results/warmstart-ENV.json``): its SFT steps, the first SFT step at which a build's
losses leave its losses (another CPU or torch rounds differently from the first update on), and its
held-out success from the records (the final evaluation when one of ``--heldout-tasks`` tasks exists,
else the runs' step-0 evaluation). Writes ``OUT/repro.json``; exits 1 when the builds' weights differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results" / "data" / "results"
HELDOUT = {"math_python": "math_python_grpo", "alfworld": "alfworld_grpo", "webshop": "webshop_grpo"}
"""The local config whose held-out tasks each recipe's page row reports."""
SMOKE = ["episodes=8", "sft_max_steps=4", "sft_check_every=2", "sft_val_tasks=2"]


def build(args: argparse.Namespace, k: int) -> dict[str, Any]:
    """Build ``k``: ``toolgym warmstart`` in its own process and a fresh cache; its summary."""
    from toolgym.training.warmstart.floats import weights_digest

    cache = args.out / f"build{k}"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    sets = [x for f in args.set for x in ("--set", f)]
    cmd = [
        sys.executable,
        "-m",
        "toolgym",
        "warmstart",
        "--env",
        args.env,
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
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True, check=False)
    if done.returncode != 0:
        tail = (cache / "build.log").read_text().strip().splitlines()[-3:]
        raise SystemExit(f"build {k} failed (exit {done.returncode}): {' | '.join(tail)}")
    directory = Path(done.stdout.strip().splitlines()[-1])
    info = json.loads((directory / "warmstart.json").read_text())
    return {
        "build": k,
        "dir": str(directory),
        "digest": weights_digest(directory),
        "tokenizer_digest": _file_digest(directory / "tokenizer.json"),
        "rows": info["rows"],
        "sft_steps": info["sft_steps"],
        "sft_losses": info["sft_losses"],
        "validation": info["validation"],
        "floats": info.get("floats", {}),
        "build_s": info["seconds"],
        "wall_s": time.perf_counter() - started,
    }


def heldout(args: argparse.Namespace, directory: str) -> dict[str, Any]:
    """Held-out success of the model in ``directory`` (``bench/warmstart_sweep.py --eval-model``)."""
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "warmstart_sweep.py"),
        "--eval-model",
        directory,
        "--heldout",
        args.heldout,
        "--heldout-tasks",
        str(args.heldout_tasks),
        "--threads",
        str(args.threads),
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_difference(a: list[float], b: list[float]) -> int | None:
    """The first SFT step (1-based) whose loss differs between two builds; None when none does."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i + 1
    return None if len(a) == len(b) else min(len(a), len(b)) + 1


def record(env: str, tasks: int) -> dict[str, Any] | None:
    """The page's warm start of ``env``: its ``warmstart.json`` and, where the records hold one on
    ``tasks`` tasks, its held-out success (``heldout``, ``heldout_tasks``, ``heldout_from``)."""
    path = RECORDS / f"warmstart-{env}.json"
    if not path.exists():
        return None
    info = json.loads(path.read_text())
    from toolgym.training.warmstart.recipe import WarmStartRecipe

    name = f"{env}-{WarmStartRecipe(**info['recipe']).key()}"
    final = RECORDS / f"final-eval-{env}-{name}-{tasks}.json"
    if final.exists():
        got = json.loads(final.read_text())
        return {
            **info,
            "heldout": got["success"],
            "heldout_tasks": got["episodes"],
            "heldout_from": final.name,
        }
    for run in sorted(RECORDS.glob(f"{env}-*-seed*")):
        try:
            started = Path(json.loads((run / "run.json").read_text())["run"]["model_dir"]).name
            first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
        except (OSError, KeyError, ValueError, IndexError):
            continue
        held = first.get("heldout") or {}
        if started == name and first.get("step") == 0 and held.get("episodes") == tasks:
            return {
                **info,
                "heldout": held["success"],
                "heldout_tasks": tasks,
                "heldout_from": f"{run.name}/metrics.jsonl step 0",
            }
    return info


def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def line(r: dict[str, Any], base: dict[str, Any] | None) -> str:
    held = r.get("heldout") or {}
    held_text = (
        f"held-out FAILED {held['error']}" if "error" in held else f"held-out {held.get('success', 0):.1%}"
    )
    if base is not None and "error" not in held:
        held_text += (
            f" (page {base['heldout']:.1%})" if "heldout" in base else " (page: no record on these tasks)"
        )
    off = first_difference(r["sft_losses"], base["sft_losses"]) if base else None
    versus = (
        "" if base is None else f", losses {'= page' if off is None else f'leave the page at step {off}'}"
    )
    checks = " ".join(f"{s}:{v:.0%}" for s, v in r["validation"])
    steps_page = f" (page {base['sft_steps']})" if base else ""
    return (
        f"build {r['build']}: weights {r['digest'][:16]}, {r['sft_steps']} SFT steps{steps_page}{versus}, "
        f"final loss {r['sft_losses'][-1]:.4f}, validation {checks or '-'}, {held_text}, {r['build_s']:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env", default="math_python", help="a warm-start recipe: math_python, alfworld, webshop"
    )
    parser.add_argument("--builds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads of each build")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a recipe change")
    parser.add_argument("--heldout", help="the local config of the held-out tasks (default: the page row's)")
    parser.add_argument("--heldout-tasks", type=int, help="default: 64 (math_python), else 480; 0: none")
    parser.add_argument("--out", type=Path, default=Path("runs/warmstart_repro"))
    parser.add_argument("--smoke", action="store_true", help="a toy recipe and 4 held-out tasks")
    args = parser.parse_args()
    if args.builds < 2:
        raise SystemExit("--builds must be 2 or more: a reproduction compares builds")
    env = args.env.replace("-", "_")
    args.heldout = args.heldout or HELDOUT.get(env)
    if args.heldout_tasks is None:
        args.heldout_tasks = 4 if args.smoke else 64 if env == "math_python" else 480
    if args.smoke:
        args.set = [*SMOKE, *args.set]
    base = None if args.smoke or args.set else record(env, args.heldout_tasks)
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.builds} builds of the {env} warm start, one at a time, {args.threads} torch threads each, "
        f"clean caches under {args.out}/",
        flush=True,
    )
    results = []
    for k in range(1, args.builds + 1):
        r = build(args, k)
        if args.heldout and args.heldout_tasks > 0:
            r["heldout"] = heldout(args, r["dir"])
        results.append(r)
        print(line(r, base), flush=True)
    same = len({r["digest"] for r in results}) == 1
    off = first_difference(results[0]["sft_losses"], results[1]["sft_losses"])
    held = [r["heldout"]["success"] for r in results if "success" in r.get("heldout", {})]
    spread = f"; held-out {min(held):.1%} to {max(held):.1%}" if held else ""
    page = (
        f"; page: {base['sft_steps']} steps, held-out {base['heldout']:.1%} ({base['heldout_from']})"
        if base and "heldout" in base
        else ""
    )
    print(
        f"weights {'bit-identical' if same else 'DIFFER'} over {len(results)} builds "
        f"(losses {'identical' if off is None else f'differ from step {off}'}){spread}{page}",
        flush=True,
    )
    summary = {
        "env": env,
        "set": args.set,
        "threads": args.threads,
        "identical": same,
        "heldout_config": args.heldout,
        "heldout_tasks": args.heldout_tasks,
        "builds": results,
        "page": None if base is None else {k: v for k, v in base.items() if k != "sft_losses"},
    }
    (args.out / "repro.json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.out / 'repro.json'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
