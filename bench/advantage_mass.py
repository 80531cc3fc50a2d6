"""Where each estimator's advantage mass goes, on a training run's saved rollouts.

    .venv/bin/python bench/advantage_mass.py runs/learning_table/alfworld-gigpo-seed2 --steps 1 20

For each chosen RL step (its ``tasks x group`` trajectories in the run's ``trajectories.jsonl``, in
order), GRPO's and GiGPO's per-step advantages are recomputed from the same episodes, and the table
says how much of the total |advantage| falls on task groups without a single success (GRPO gives
those nothing: no outcome to compare), the mean advantage on the steps of successful and failed
episodes, and the correlation of a step's advantage with its episode's success. GiGPO is shown with
verl-agent's invalid-action penalty of 0.1 and without it (alfworld_gigpo ships it off), both terms
apart: at a warm start that makes many invalid actions, the penalty's step signal in groups without
success can outweigh the success signal. GraphGPO (the reference recipe's defaults) is shown on the
anchors the run recorded; the mean advantage on invalid and on valid steps shows whether its graph
credits invalid actions (with ALFWorld's text anchors every "Nothing happens." is one node, linked
to the goal by any success that passed through it). Nothing is trained; a few seconds per RL step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("GiGPO, penalty 0.1", {"gamma": 0.95, "omega": 1.0, "mode": "mean_norm", "invalid_penalty": 0.1}),
    ("GiGPO, no penalty", {"gamma": 0.95, "omega": 1.0, "mode": "mean_norm", "invalid_penalty": 0.0}),
    # verl-agent's ALFWorld script divides both terms by the group's std; its WebShop script does not (alfworld_gigpo: mean_norm)
    (
        "GiGPO, no penalty, std-normalised",
        {"gamma": 0.95, "omega": 1.0, "mode": "mean_std_norm", "invalid_penalty": 0.0},
    ),
]

# the reference recipe's defaults, as training/local/configs/alfworld_graphgpo.yaml ships them
GRAPHGPO: dict[str, Any] = {
    "omega": 0.1,
    "goal_reward": 10.0,
    "step_weight": 1.0,
    "episode_weight": 1.0,
    "mode": "mean_std_norm",
}


def load_step(path: Path, step: int, per_step: int) -> list[Any]:
    """The trajectories of RL step ``step`` (from 1): the ``step``-th policy version to appear in the
    file (an episode that ended in an error is kept in failures.jsonl, so a step can hold fewer than
    ``per_step`` lines); lines ``(step - 1) * per_step`` onwards where no version is recorded."""
    from toolgym.core.trajectory import Trajectory

    with path.open() as f:
        trajectories = [Trajectory.model_validate_json(line) for line in f]
    if any(t.weight_version is None for t in trajectories):
        return trajectories[(step - 1) * per_step : step * per_step]
    versions = list(dict.fromkeys(str(t.weight_version) for t in trajectories))
    if step > len(versions):
        return []
    return [t for t in trajectories if str(t.weight_version) == versions[step - 1]]


def mass_rows(trajectories: list[Any]) -> dict[str, Any]:
    """The episode summary and one row per estimator (and GiGPO term) for one RL step."""
    from toolgym.training.advantages import (
        gigpo_trajectory_advantages,
        graphgpo_trajectory_advantages,
        grpo_trajectory_advantages,
    )

    won = np.array([bool(t.steps) and bool(t.steps[-1].info.get("won", t.reward > 0)) for t in trajectories])
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault(t.group_id, []).append(i)
    solved = np.zeros(len(trajectories), dtype=bool)  # the trajectory's group has at least one success
    for idx in groups.values():
        solved[idx] = won[idx].any()
    steps = [s for t in trajectories for s in t.steps]
    summary = {
        "episodes": len(trajectories),
        "groups": len(groups),
        "success": float(won.mean()),
        "groups_with_success": int(sum(won[idx].any() for idx in groups.values())),
        "invalid_steps": float(np.mean([not s.valid for s in steps])) if steps else 0.0,
        "steps_of_successes": float(
            np.mean([len(t.steps) for t, w in zip(trajectories, won, strict=True) if w])
        )
        if won.any()
        else float("nan"),
        "steps_of_failures": float(
            np.mean([len(t.steps) for t, w in zip(trajectories, won, strict=True) if not w])
        )
        if (~won).any()
        else float("nan"),
    }

    valid = np.array([s.valid for s in steps], dtype=bool)

    def row(name: str, per_traj: list[np.ndarray]) -> dict[str, Any]:
        flat = np.concatenate(per_traj)
        owner = np.concatenate([np.full(len(a), i) for i, a in enumerate(per_traj)]).astype(int)
        total = float(np.abs(flat).sum()) or 1.0
        ok = won[owner]
        corr = float(np.corrcoef(flat, ok)[0, 1]) if flat.std() > 0 and 0 < ok.mean() < 1 else float("nan")
        return {
            "estimator": name,
            "unsolved_share": float(np.abs(flat[~solved[owner]]).sum()) / total,
            "mean_per_row": float(flat.mean()),
            "mean_abs": float(np.abs(flat).mean()) if flat.size else 0.0,
            "mean_on_success": float(flat[ok].mean()) if ok.any() else float("nan"),
            "mean_on_failure": float(flat[~ok].mean()) if (~ok).any() else float("nan"),
            "corr_success": corr,
            "mean_on_invalid": float(flat[~valid].mean()) if (~valid).any() else float("nan"),
            "mean_on_valid": float(flat[valid].mean()) if valid.any() else float("nan"),
        }

    grpo = grpo_trajectory_advantages(trajectories)
    rows = [row("GRPO", [np.full(len(t.steps), a) for t, a in zip(trajectories, grpo, strict=True)])]
    for name, options in VARIANTS:
        parts = gigpo_trajectory_advantages(trajectories, **options)
        rows += [
            row(f"{name}: A_E + A_S", [p.combined for p in parts]),
            row(f"{name}: A_S only", [p.step for p in parts]),
        ]
    graph = graphgpo_trajectory_advantages(trajectories, **GRAPHGPO)
    rows += [
        row("GraphGPO: A_E + A_G", [p.combined for p in graph]),
        row("GraphGPO: A_G only", [p.step for p in graph]),
    ]
    return {"summary": summary, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a `toolgym train --trainer local` output directory")
    parser.add_argument("--steps", type=int, nargs="+", default=[1], help="RL steps to look at (from 1)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rl = json.loads((args.run / "run.json").read_text())["rl"]
    per_step = int(rl["tasks_per_step"]) * int(rl["group_size"])
    path = args.run / "trajectories" / "trajectories.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} is missing: the run kept no trajectories")
    out = {}
    for step in args.steps:
        trajectories = load_step(path, step, per_step)
        if len(trajectories) < per_step // 2:
            raise SystemExit(
                f"{path} has no RL step {step} ({len(trajectories)} of its {per_step} trajectories)"
            )
        r = out[step] = mass_rows(trajectories)
        s = r["summary"]
        print(
            f"\nRL step {step}: {s['episodes']} episodes in {s['groups']} task groups, success {s['success']:.1%}, "
            f"{s['groups_with_success']} groups with a success, {s['invalid_steps']:.1%} of steps invalid, "
            f"{s['steps_of_successes']:.1f} steps per success and {s['steps_of_failures']:.1f} per failure"
        )
        print(
            "| estimator | |A| share on groups without success | mean A, steps of successes | mean A, steps of failures | corr(A, success) "
            "| mean A over all step rows | mean A, invalid steps | mean A, valid steps | mean |A| |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for row in r["rows"]:
            print(
                f"| {row['estimator']} | {row['unsolved_share']:.1%} | {row['mean_on_success']:+.3f} | {row['mean_on_failure']:+.3f} | "
                f"{row['corr_success']:+.3f} | {row['mean_per_row']:+.3f} | {row['mean_on_invalid']:+.3f} | {row['mean_on_valid']:+.3f} | {row['mean_abs']:.3f} |"
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
