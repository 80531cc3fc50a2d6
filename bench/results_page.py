"""The learning table: runs' ``metrics.jsonl`` files → ``docs/results/results.md`` and a learning-curve PNG.

A *run* is one ``toolgym train --trainer local`` output directory. Its held-out success before RL
is the step-0 record, after RL the last record with a held-out evaluation, unless the directory
holds a ``final_eval.json`` (``bench/learning_table.py --final-eval-tasks``: the warm start and the
last checkpoint on more held-out tasks), whose figures then fill the table. Runs are grouped by
(environment, estimator); each cell shows mean ± sample standard deviation over seeds (just the
value for one seed). Below them: the split every figure comes from, the in-run curves' sample efficiency
(success at steps 5 and 10, area under the curve) and, per pair of estimators, paired differences with a
bootstrap interval (``bench/results_stats.py``). Nothing here runs training: ``bench/learning_table.py`` does, then calls
:func:`write_results`.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.results_stats import BOOTSTRAP_SEED, RESAMPLES, curve_auc, paired_bootstrap

ALFWORLD_TYPES = (
    ("Pick", "pick_and_place_simple"),
    ("Look", "look_at_obj_in_light"),
    ("Clean", "pick_clean_then_place_in_recep"),
    ("Heat", "pick_heat_then_place_in_recep"),
    ("Cool", "pick_cool_then_place_in_recep"),
    ("Pick2", "pick_two_obj_and_place"),
)
NAMES = {"grpo": "GRPO", "gigpo": "GiGPO", "arpo": "ARPO", "graphgpo": "GraphGPO"}
STAT_KEYS = ("repeat_rate", "mean_group_size", "size_1", "size_2_4", "size_5_9", "size_10p", "mixed_outcome")


@dataclass
class Run:
    """One training run, read back from its output directory."""

    env: str
    estimator: str
    seed: int
    out: Path
    command: str
    wall_s: float
    records: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    """``final_eval.json``: ``tasks``, ``step``, ``before`` and ``after`` (held-out records)."""
    rl: dict[str, Any] | None = None
    """``run.json``'s resolved ``rl`` settings (env options, evaluation split), when recorded."""

    @property
    def evals(self) -> list[tuple[int, dict[str, Any]]]:
        return [(int(r["step"]), r["heldout"]) for r in self.records if "heldout" in r]

    @property
    def before(self) -> dict[str, Any]:
        return self.evals[0][1]

    @property
    def after(self) -> dict[str, Any]:
        return self.evals[-1][1]

    @property
    def held_before(self) -> dict[str, Any]:
        """The warm start's held-out record: the final evaluation's when there is one."""
        return self.final["before"] if self.final else self.before

    @property
    def held_after(self) -> dict[str, Any]:
        """The last checkpoint's held-out record: the final evaluation's when there is one."""
        return self.final["after"] if self.final else self.after

    @property
    def held_tasks(self) -> int:
        return int(self.held_after.get("episodes") or 0)

    @property
    def steps(self) -> int:
        return max((int(r["step"]) for r in self.records), default=0)

    def mean_stat(self, key: str) -> float:
        values = [
            r["step_groups"][key] for r in self.records if r.get("step_groups", {}).get(key) is not None
        ]
        return statistics.mean(values) if values else float("nan")

    def mean_of(self, key: str) -> float:
        values = [r[key] for r in self.records if isinstance(r.get(key), (int, float))]
        return statistics.mean(values) if values else float("nan")


def read_run(env: str, estimator: str, seed: int, out: Path, command: str, wall_s: float) -> Run:
    lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
    records = [json.loads(ln) for ln in lines if ln.strip()]
    final = json.loads((out / "final_eval.json").read_text()) if (out / "final_eval.json").exists() else None
    rl = json.loads((out / "run.json").read_text()).get("rl") if (out / "run.json").exists() else None
    run = Run(env, estimator, seed, out, command, wall_s, records, final, rl)
    if final is not None and final.get("step") != run.steps:  # evaluated before the run was extended: stale
        run.final = None
    return run


def _cell(values: Sequence[float], pct: bool = True) -> str:
    vals = [v for v in values if v == v]
    if not vals:
        return "–"
    scale = 100.0 if pct else 1.0
    mean = statistics.mean(vals) * scale
    if len(vals) == 1:
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {statistics.stdev(vals) * scale:.1f}"


def _groups(runs: Sequence[Run]) -> dict[tuple[str, str], list[Run]]:
    out: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        if r.evals:
            out.setdefault((r.env, r.estimator), []).append(r)
    return out


def table(runs: Sequence[Run]) -> str:
    """The markdown tables: held-out success before/after per environment and estimator,
    ALFWorld by task type, WebShop score, and the step-group statistics."""
    lines: list[str] = []
    groups = _groups(runs)
    envs = sorted({env for env, _ in groups})
    for env in envs:
        rows = [(est, rs) for (e, est), rs in sorted(groups.items()) if e == env]
        every = [r for _, rs in rows for r in rs]
        finals = all(r.final for r in every)
        split = _with_roles([_final_split(r) if finals else _eval_split(r) for r in every])
        lines += [
            f"### {env}",
            "",
            f"Before/after on {split}: "
            + ("the final evaluation." if finals else "the first and last in-run evaluations."),
            "",
        ]
        if env.startswith("alfworld"):
            head = (
                "| estimator | seeds | RL steps | held-out tasks | "
                + " | ".join(n for n, _ in ALFWORLD_TYPES)
                + " | All (before) | **All (after)** | Δ | wall/run |"
            )
            lines += [head, "|" + "---|" * (len(ALFWORLD_TYPES) + 8)]
            for est, rs in rows:
                types = [
                    _cell([r.held_after.get("by_type", {}).get(t, float("nan")) for r in rs])
                    for _, t in ALFWORLD_TYPES
                ]
                lines.append(
                    f"| {NAMES.get(est, est)} | {len(rs)} | {rs[0].steps} | {_tasks(rs)} | "
                    + " | ".join(types)
                    + f" | {_cell([r.held_before['success'] for r in rs])} | **{_cell([r.held_after['success'] for r in rs])}** | "
                    f"{_cell([r.held_after['success'] - r.held_before['success'] for r in rs])} | "
                    f"{statistics.mean(r.wall_s for r in rs) / 60:.1f} min |"
                )
        else:
            lines += [
                "| estimator | seeds | RL steps | held-out tasks | score (before) | **score (after)** | success (before) | "
                "**success (after)** | tool calls/trajectory | wall/run |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for est, rs in rows:
                lines.append(
                    f"| {NAMES.get(est, est)} | {len(rs)} | {rs[0].steps} | {_tasks(rs)} | "
                    f"{_cell([r.held_before.get('score', float('nan')) for r in rs])} | "
                    f"**{_cell([r.held_after.get('score', float('nan')) for r in rs])}** | {_cell([r.held_before['success'] for r in rs])} | "
                    f"**{_cell([r.held_after['success'] for r in rs])}** | {_tool_calls(rs)} | "
                    f"{statistics.mean(r.wall_s for r in rs) / 60:.1f} min |"
                )
        lines += [
            "",
            "Step groups of the training rollouts (GiGPO's anchor states; mean over RL steps and seeds):",
            "",
            "| estimator | anchor repeat rate | steps per group | size 1 | 2–4 | 5–9 | ≥ 10 | groups with mixed outcomes | train success | tok/s | ep/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for est, rs in rows:
            stat = {k: statistics.mean(r.mean_stat(k) for r in rs) for k in STAT_KEYS}
            lines.append(
                f"| {NAMES.get(est, est)} | {stat['repeat_rate']:.1%} | {stat['mean_group_size']:.2f} | {stat['size_1']:.1%} | "
                f"{stat['size_2_4']:.1%} | {stat['size_5_9']:.1%} | {stat['size_10p']:.1%} | {stat['mixed_outcome']:.1%} | "
                f"{statistics.mean(r.mean_of('train_success') for r in rs):.1%} | "
                f"{statistics.mean(r.mean_of('tokens_per_s') for r in rs):,.0f} | {statistics.mean(r.mean_of('episodes_per_s') for r in rs):.2f} |"
            )
        lines.append("")
    return "\n".join(lines)


def _tasks(rs: Sequence[Run]) -> str:
    counts = sorted({r.held_tasks for r in rs})
    return " / ".join(map(str, counts))


def _tool_calls(rs: Sequence[Run]) -> str:
    """Tool calls per training trajectory, or a dash where the environment has no tools (WebShop's
    actions are commands to the page, not tool calls)."""
    calls = [r.mean_stat("tool_calls_per_trajectory") for r in rs]
    return "–" if all(c == 0 or math.isnan(c) for c in calls) else _cell(calls, pct=False)


def findings(runs: Sequence[Run]) -> str:
    """Plain sentences computed from the runs: does RL beat the warm start per seed, and by how
    much does each estimator differ from GRPO (with the spread, when there are several seeds)."""
    out: list[str] = []
    groups = _groups(runs)
    for env in sorted({env for env, _ in groups}):
        base = groups.get((env, "grpo"), [])
        for (e, est), rs in sorted(groups.items()):
            if e != env:
                continue
            better = sum(r.held_after["success"] > r.held_before["success"] for r in rs)
            split = _joined([_final_split(r) if r.final else _eval_split(r) for r in rs])
            where = f" on {_tasks(rs)} held-out tasks" + (f" of {split}" if split != "not recorded" else "")
            if any(
                r.final for r in rs
            ):  # the in-run evaluation (fewer tasks) too: the two can disagree within the noise
                in_run = sum(r.after["success"] > r.before["success"] for r in rs)
                per_seed = " / ".join(
                    f"{r.held_before['success']:.1%} → {r.held_after['success']:.1%}" for r in rs
                )
                where += (
                    f" (per seed {per_seed}); "
                    f"at the last in-run evaluation on {int(rs[0].after.get('episodes') or 0)} tasks: {in_run} of {len(rs)}"
                )
            out.append(
                f"- {env}, {NAMES.get(est, est)}: held-out success rose above the warm start in {better} of {len(rs)} seed(s){where}."
            )
            if est != "grpo" and base:
                deltas = [r.held_after["success"] for r in rs]
                ref = [r.held_after["success"] for r in base]
                diff = statistics.mean(deltas) - statistics.mean(ref)
                name = NAMES.get(est, est)
                if len(deltas) > 1 and len(ref) > 1:
                    spread = f"; std over seeds {statistics.stdev(deltas):.1%} vs {statistics.stdev(ref):.1%}"
                    # two standard errors of the difference of the means: a smaller lead is not a win
                    noise = 2 * math.sqrt(
                        statistics.variance(deltas) / len(deltas) + statistics.variance(ref) / len(ref)
                    )
                    verdict = (
                        f"{name} does not beat GRPO here"
                        if diff <= 0
                        else f"{name} beats GRPO here"
                        if diff > noise
                        else f"{name} is ahead by less than two standard errors of the difference ({noise * 100:.1f} points): "
                        "no claim that it beats GRPO"
                    )
                else:
                    spread = (
                        "; one seed each: no spread"
                        if len(deltas) == len(ref)
                        else f"; {len(deltas)} seed(s) of {name}, {len(ref)} of GRPO: no spread for the difference"
                    )
                    verdict = (
                        f"{name} does not beat GRPO here"
                        if diff <= 0
                        else f"{name} is ahead, but with one seed on a side: no claim either way"
                    )
                out.append(
                    f"- {env}: {name} {statistics.mean(deltas):.1%} vs GRPO {statistics.mean(ref):.1%} after RL "
                    f"({diff * 100:+.1f} points{spread}): {verdict}."
                )
            if (
                est == "arpo" and base
            ):  # the ARPO paper's cost claim: comparable accuracy with about half the tool calls
                calls = statistics.mean(r.mean_stat("tool_calls_per_trajectory") for r in rs)
                ref_calls = statistics.mean(r.mean_stat("tool_calls_per_trajectory") for r in base)
                if not (math.isnan(calls) or math.isnan(ref_calls)) and ref_calls > 0:
                    out.append(
                        f"- {env}: tool calls per training trajectory, ARPO {calls:.2f} vs GRPO {ref_calls:.2f} "
                        f"({calls / ref_calls:.0%} of GRPO's; the ARPO paper reports about half at comparable accuracy)."
                    )
        gigpo = groups.get((env, "gigpo"), [])
        mixed = statistics.mean(r.mean_stat("mixed_outcome") for r in gigpo) if gigpo else math.nan
        repeat = statistics.mean(r.mean_stat("repeat_rate") for r in gigpo) if gigpo else math.nan
        if not math.isnan(mixed):  # the runs logged step groups
            out.append(
                f"- {env}, GiGPO's step groups: {repeat:.0%} of steps share their anchor state with another step, but only "
                f"{mixed:.0%} of the groups mix successes and failures; the rest give no step-level signal beyond the "
                "episode's."
            )
        episodes = min((r.held_tasks for (e, _), rs in groups.items() if e == env for r in rs), default=0)
        if episodes:
            out.append(
                f"- {env}: one held-out episode is {100 / episodes:.1f} points ({episodes} tasks); "
                "differences of a few points are a few episodes."
            )
    return "\n".join(out)


# -- the comparisons: splits, sample efficiency, paired differences ------------------------

TUNED_ON_HELDOUT = {
    # these test tasks also steered the shipped warm starts and training options over many iterations,
    # before the environments had validation splits, so their figures carry that selection
    "alfworld": "ALFWorld's in-distribution tasks (`eval_in_distribution`)",
    "webshop": "WebShop's test goals (`test`)",
}
VALIDATION_SEED = 900_000
SEED_CARVED = ("alfworld", "alfworld-verl", "math-python")
"""Environments whose ``validation`` split is ``train``'s tasks from ``VALIDATION_SEED`` on."""
SPLIT_ROLES = {
    "train": "train",
    "trainval": "train",
    "validation": "validation",
    "eval": "validation",  # WebShop's published development split
    "test": "test",
    "eval_in_distribution": "test",
    "eval_out_of_distribution": "test",
}
"""What each environment split is for: training, choices (validation), or report only (test)."""


def _train_split(run: Run) -> str:
    # run.json names no split for training when the config leaves the env's default, `train` for every
    # built-in environment
    return str(((run.rl or {}).get("env_kwargs") or {}).get("split", "train")) if run.rl else "not recorded"


def _eval_split(run: Run) -> str:
    split = (((run.rl or {}).get("eval") or {}).get("env_kwargs") or {}).get("split")
    return str(split) if split else "not recorded"


def _final_split(run: Run) -> str:
    """The split of the final evaluation's before/after figures: recorded since test splits were named;
    before that, the final evaluation took the in-run evaluations' split (more of its tasks)."""
    return str((run.final or {}).get("split") or _eval_split(run))


def _role(split: str) -> str:
    return SPLIT_ROLES.get(split, "unknown role")


def _joined(values: Sequence[str]) -> str:
    distinct = list(dict.fromkeys(values))
    return " / ".join(f"`{v}`" if v != "not recorded" else v for v in distinct)


def _with_roles(values: Sequence[str]) -> str:
    distinct = list(dict.fromkeys(values))
    return " / ".join(f"`{v}` ({_role(v)})" if v != "not recorded" else v for v in distinct)


def split_lines(runs: Sequence[Run]) -> list[str]:
    """One line per environment: the split of its training rollouts, of its in-run evaluations and of
    its final evaluation, each with its role (train, validation, test), from each run's ``run.json`` and
    ``final_eval.json``; runs recorded before the environments had validation splits are named as such."""
    groups = _groups(runs)
    lines = []
    for env in sorted({env for env, _ in groups}):
        rs = [r for (e, _), group in sorted(groups.items()) if e == env for r in group]
        ests = {r.estimator for r in rs}
        in_run = int(rs[0].evals[-1][1].get("episodes") or 0)
        final = sorted({int(r.final["tasks"]) for r in rs if r.final})
        in_run_splits = [_eval_split(r) for r in rs]
        line = (
            f"- {env}: training rollouts: {_with_roles([_train_split(r) for r in rs])}; in-run evaluations "
            f"({in_run} tasks: {'' if final else 'before/after, '}the curves, sample efficiency"
            f"{', differences' if len(ests) > 1 else ''}): {_with_roles(in_run_splits)}"
        )
        if env.startswith("webshop") and {"validation", "eval"} & set(in_run_splits):
            from toolgym.training.warmstart.recipe import recipe

            made = recipe("webshop")  # its scripted episodes play seeds data_seed .. data_seed + episodes - 1
            evals = [(r.rl or {}).get("eval") or {} for r in rs]
            if all(
                e.get("seed") == made.data_seed and int(e.get("first_task") or 0) >= made.episodes
                for e in evals
            ):
                line += (
                    " — WebShop's validation goals are its published `eval` goals; these are ones the shipped warm "
                    f"start's scripted episodes left out (they drew seeds {made.data_seed:,}-"
                    f"{made.data_seed + made.episodes - 1:,} of the split, these runs seeds from "
                    f"{made.data_seed + made.episodes:,})"
                )
            else:
                line += (
                    " — WebShop's validation goals are its published `eval` goals, from which the shipped warm "
                    "start's scripted episodes were drawn (its recipe under Warm starts): the curves start from a "
                    "model that has seen many of them"
                )
        if any(_role(x) == "test" for x in in_run_splits):
            line += (
                " — recorded before the environment had a validation split: these runs' in-run evaluations read "
                "a test split"
            )
        if final:
            final_splits = [_final_split(r) for r in rs if r.final]
            named = _with_roles(final_splits)
            if any(not r.final.get("split") for r in rs if r.final) and named.endswith(")"):
                # recorded before test splits were named: the final evaluation took the in-run tasks' split
                named = f"{named[:-1]}; the config's held-out tasks then, whose first {in_run} are the in-run ones)"
            line += (
                f"; final evaluation ({' / '.join(map(str, final))} tasks: before/after"
                f"{', differences' if len(ests) > 1 else ''}): {named}"
            )
        lines.append(line + ".")
    tuned = [TUNED_ON_HELDOUT[env] for env in sorted({env for env, _ in groups}) if env in TUNED_ON_HELDOUT]
    if tuned:
        lines.append(
            f"- {' and '.join(tuned)} also steered the shipped warm starts and training options over many iterations, "
            "before validation splits existed: read figures on them as validation figures"
            + (
                "; ALFWorld's out-of-distribution split (`eval_out_of_distribution`) steered nothing."
                if "alfworld" in {env for env, _ in groups}
                else "."
            )
        )
    return lines


def test_table(runs: Sequence[Run], warm_tests: dict[str, dict[str, Any]] | None = None) -> str:
    """Per environment with named test splits: each split's warm-start figure and each estimator's after
    RL (mean ± std over seeds), from the runs' ``final_eval.json`` (``splits``) and the warm start's own
    evaluations (``warm_tests``: environment → test name → record). A run recorded without its last
    checkpoint has no after-RL figure on a split added later; the cell says so, and names the seeds a
    figure comes from where only some of an estimator's runs measured that split."""
    warm_tests = warm_tests or {}
    groups = _groups(runs)
    lines: list[str] = []
    order = {est: i for i, est in enumerate(NAMES)}
    for env in sorted({env for env, _ in groups}):
        rs = [r for (e, _), group in sorted(groups.items()) if e == env for r in group]
        names = list(
            dict.fromkeys(
                [n for r in rs for n in ((r.final or {}).get("splits") or {})] + list(warm_tests.get(env, {}))
            )
        )
        if not names:
            continue
        ests = sorted({r.estimator for r in rs}, key=lambda e: (order.get(e, len(order)), e))
        lines += [
            f"### {env}",
            "",
            "| test split | environment split | tasks | warm start | "
            + " | ".join(f"{NAMES.get(e, e)} after RL" for e in ests)
            + " |",
            "|---|---|---|---|" + "---|" * len(ests),
        ]
        notes: list[str] = []
        for name in names:
            kept = [((r.final or {}).get("splits") or {}).get(name) for r in rs]
            warm = warm_tests.get(env, {}).get(name)
            before = next((k["before"] for k in kept if k), None) or warm
            split = next((k["split"] for k in kept if k), None) or (warm or {}).get("split", "?")
            tasks = int((before or {}).get("episodes") or 0)
            cells = []
            for est in ests:
                measured = [
                    (r.seed, k["after"]["success"])
                    for r, k in zip(rs, kept, strict=True)
                    if r.estimator == est and k and k.get("after")
                ]
                seeds = sum(r.estimator == est for r in rs)
                cell = _cell([v for _, v in measured])
                if not measured:
                    cell = "not measured (no checkpoint kept)"
                elif len(measured) < seeds:
                    which = ", ".join(str(s) for s, _ in measured)
                    cell += f" (seed{'s' * (len(measured) > 1)} {which} of {seeds}: the others kept no checkpoint)"
                cells.append(cell)
            lines.append(
                f"| {name} | `{split}` | {tasks} | {_cell([before['success']]) if before else '–'} | "
                + " | ".join(cells)
                + " |"
            )
            starts = {str(r.final.get("warm_start")) for r in rs if r.final and r.final.get("warm_start")}
            model = (warm or {}).get("model")
            if warm and model and model not in starts:
                notes.append(f"`{name}`: {Path(model).name}")
        if notes:
            recorded = [r.held_before for r in rs if r.final and not r.final.get("splits")]
            same = warm_tests.get(env, {}).get(
                next(
                    (
                        n
                        for n in names
                        if warm_tests.get(env, {}).get(n, {}).get("split") == _final_split(rs[0])
                    ),
                    "",
                )
            )
            compare = (
                f" On the records' split `{_final_split(rs[0])}` the rebuild scores {same['success']:.1%} and the "
                f"recorded warm start {recorded[0]['success']:.1%} (the same tasks and seeded decoding: equal weights give "
                "equal figures)."
                if same and recorded
                else ""
            )
            lines += [
                "",
                "Warm-start figures measured on a rebuild of the runs' warm start (its recipe and SFT budget; "
                "the original was not on the machine that measured them): "
                + "; ".join(notes)
                + "."
                + compare,
            ]
        lines.append("")
    return "\n".join(lines)


def _curve(run: Run) -> list[tuple[int, float]]:
    return [(step, float(record["success"])) for step, record in run.evals]


def _at(run: Run, step: int) -> float:
    record = dict(run.evals).get(step)
    return float(record["success"]) if record else float("nan")


def efficiency_table(runs: Sequence[Run]) -> str:
    """Per environment and estimator: in-run held-out success at steps 0, 5, 10 and the last, and the
    area under the in-run curve (its mean success over the steps it spans), mean ± std over seeds."""
    lines: list[str] = []
    groups = _groups(runs)
    for env in sorted({env for env, _ in groups}):
        rows = [(est, rs) for (e, est), rs in sorted(groups.items()) if e == env]
        steps = sorted({s for _, rs in rows for r in rs for s, _ in r.evals})
        shown = sorted({0, 5, 10, steps[-1]})
        lines += [
            f"### {env}",
            "",
            "| estimator | seeds | in-run tasks | split | "
            + " | ".join(f"step {s}" for s in shown)
            + f" | **area under the curve** (steps {steps[0]}–{steps[-1]}) |",
            "|---|---|---|---|" + "---|" * (len(shown) + 1),
        ]
        for est, rs in rows:
            episodes = " / ".join(str(n) for n in sorted({int(r.after.get("episodes") or 0) for r in rs}))
            lines.append(
                f"| {NAMES.get(est, est)} | {len(rs)} | {episodes} | {_joined([_eval_split(r) for r in rs])} | "
                + " | ".join(_cell([_at(r, s) for r in rs]) for s in shown)
                + f" | **{_cell([curve_auc(_curve(r)) for r in rs])}** |"
            )
        lines.append("")
    return "\n".join(lines)


def _outcomes(record: dict[str, Any] | None) -> dict[str, float] | None:
    """An evaluation's per-task outcomes (``per_task``: task id → success), where it kept them."""
    per_task = (record or {}).get("per_task")
    return {str(k): float(v) for k, v in per_task.items()} if isinstance(per_task, dict) else None


def _tables(a: list[dict[str, Any] | None], b: list[dict[str, Any] | None]) -> tuple[list[list[float]], ...]:
    """Seeds x tasks tables of two sides' evaluations (paired by position): per-task outcomes on the
    tasks every evaluation kept, else each evaluation's success rate as one number."""
    kept = [_outcomes(r) for r in a + b]
    if all(kept):
        tasks = sorted(set.intersection(*(set(k) for k in kept if k)))
        if tasks:
            return tuple(
                [[k[t] for t in tasks] for k in side if k] for side in (kept[: len(a)], kept[len(a) :])
            )
    return tuple([[float((r or {}).get("success", float("nan")))] for r in side] for side in (a, b))


def _diff_row(pair: str, figure: str, split: str, a: list[list[float]], b: list[list[float]]) -> str:
    if any(v != v for row in a + b for v in row):
        return f"| {pair} | {figure} | {split} | {len(a)} | – | – | – | – |"
    d = paired_bootstrap(a, b)
    level = "seeds" if d.tasks == 1 else f"seeds × {d.tasks} tasks"
    # one seed and no tasks to resample: nothing varies, and a zero-width interval would claim certainty
    interval = "–" if d.tasks == 1 and len(a) < 2 else f"[{d.low * 100:+.1f}, {d.high * 100:+.1f}]"
    return (
        f"| {pair} | {figure} | {split} | {len(a)} | **{d.mean * 100:+.1f}** | "
        + " / ".join(f"{x * 100:+.1f}" for x in d.per_seed)
        + f" | {interval} | {level} |"
    )


def differences_table(runs: Sequence[Run]) -> str:
    """Per environment, each pair of its estimators (each against GRPO first): the difference A − B in
    held-out success after RL, in the area under the in-run curve and at steps 5 and 10, paired by seed
    (and by task where the evaluations kept per-task outcomes), with a 95 % bootstrap interval."""
    lines: list[str] = []
    groups = _groups(runs)
    order = {est: i for i, est in enumerate(NAMES)}  # GRPO first: the baseline of every other estimator
    for env in sorted({env for env, _ in groups}):
        ests = sorted(
            (est for e, est in groups if e == env), key=lambda est: (order.get(est, len(order)), est)
        )
        pairs = [(x, y) for j, y in enumerate(ests) for x in ests[j + 1 :]]
        if not pairs:
            continue
        lines += [
            f"### {env}",
            "",
            "| A − B | figure | split | seeds paired | Δ (points) | per seed | 95 % interval | resampled over |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for x, y in sorted(pairs, key=lambda p: (p[1] != "grpo", order.get(p[1], 0), order.get(p[0], 0))):
            by_seed = {r.seed: r for r in groups[(env, y)]}
            both = [
                (r, by_seed[r.seed])
                for r in sorted(groups[(env, x)], key=lambda r: r.seed)
                if r.seed in by_seed
            ]
            if not both:
                continue
            pair = f"{NAMES.get(x, x)} − {NAMES.get(y, y)}"
            split = _joined([_eval_split(r) for side in both for r in side])
            held = both[0][0]
            finals = all(r.final for side in both for r in side)
            after = (
                f"after RL ({held.held_tasks} tasks, final evaluation)"
                if finals
                else f"after RL ({held.held_tasks} tasks, step {held.evals[-1][0]})"
            )
            lines.append(
                _diff_row(
                    pair,
                    after,
                    _joined([_final_split(r) for side in both for r in side]) if finals else split,
                    *_tables([r.held_after for r, _ in both], [s.held_after for _, s in both]),
                )
            )
            in_run = int(held.after.get("episodes") or 0)
            steps = sorted({s for side in both for r in side for s, _ in r.evals})
            lines.append(
                _diff_row(
                    pair,
                    f"area under the in-run curve (steps {steps[0]}–{steps[-1]}, {in_run} tasks)",
                    split,
                    [[curve_auc(_curve(r))] for r, _ in both],
                    [[curve_auc(_curve(s))] for _, s in both],
                )
            )
            for step in (5, 10):
                records = [(dict(r.evals).get(step), dict(s.evals).get(step)) for r, s in both]
                lines.append(
                    _diff_row(
                        pair,
                        f"step {step} ({in_run} tasks)",
                        split,
                        *_tables([ra for ra, _ in records], [rb for _, rb in records]),
                    )
                )
        lines.append("")
    return "\n".join(lines)


def plot(runs: Sequence[Run], path: Path) -> None:
    """Held-out success vs RL step, one line per estimator (mean over seeds, shaded min–max),
    one panel per environment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(runs)
    envs = sorted({env for env, _ in groups}) or ["(no runs)"]
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
    colours = {"grpo": "#1f77b4", "gigpo": "#d62728", "arpo": "#2ca02c", "graphgpo": "#9467bd"}
    for ax, env in zip(axes[0], envs, strict=True):
        for (e, est), rs in sorted(groups.items()):
            if e != env:
                continue
            steps = sorted({s for r in rs for s, _ in r.evals})
            curves = [[dict(r.evals).get(s, {}).get("success", float("nan")) for s in steps] for r in rs]
            mean = [
                statistics.mean(v for v in col if v == v) if any(v == v for v in col) else float("nan")
                for col in zip(*curves, strict=True)
            ]
            lo = [min((v for v in col if v == v), default=float("nan")) for col in zip(*curves, strict=True)]
            hi = [max((v for v in col if v == v), default=float("nan")) for col in zip(*curves, strict=True)]
            colour = colours.get(est, None)
            ax.plot(
                steps,
                mean,
                "o-",
                color=colour,
                label=f"{NAMES.get(est, est)} ({len(rs)} seed{'s' if len(rs) > 1 else ''})",
            )
            if len(rs) > 1:
                ax.fill_between(steps, lo, hi, color=colour, alpha=0.2)
        ax.set_title(env)
        ax.set_xlabel("RL step")
        ax.set_ylabel(
            f"success on {' / '.join(dict.fromkeys(_eval_split(r) for _, rs in groups.items() for r in rs if r.env == env))}"
        )
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def warm_start_lines(infos: dict[str, dict[str, Any]]) -> list[str]:
    """One line per warm start (its ``warmstart.json``): recipe, data, SFT steps, validation."""
    lines = []
    for name, info in sorted(infos.items()):
        r = info["recipe"]
        checks = info.get("validation") or [[0, 0.0]]
        data_split = (r.get("env_kwargs") or {}).get("split", "train")
        val_split = {**(r.get("env_kwargs") or {}), **(r.get("val_env_kwargs") or {})}.get("split", "train")
        where = (
            # ALFWorld's and math-python's validation split is train's tasks from this seed on
            "`validation`-split (train's tasks from seed 900,000)"
            if val_split == "train" and r.get("val_seed") == VALIDATION_SEED and r["env"] in SEED_CARVED
            else f"{val_split}-split"
            if val_split == data_split
            else f"`{val_split}`-split (unseen by the `{data_split}`-split data)"
        )
        device = info.get("device", "cpu")
        built = f" Built on {device} in {info['seconds'] / 60:.0f} min." if "seconds" in info else ""
        lines.append(
            f"- `{name}`: {r['episodes']} scripted episodes of `{r['env']}` with mistake rate {r['mistake_rate']} "
            f"({info['scripted_success']:.0%} of them succeeded; {info['rows']} training rows), tiny model "
            f"{r['hidden_size']} wide × {r['num_layers']} layers, {r.get('vocab_size', 1024)}-word vocabulary, "
            f"{info['sft_steps']} SFT steps{_recipe_extras(r)}; {_decoding(r.get('sft_val_temperature', 0.0))} success on "
            f"{r['sft_val_tasks']} {where} validation tasks at the end: {checks[-1][1]:.0%}"
            + (f" (target {r['sft_target']:.0%})" if r.get("sft_target") is not None else "")
            + f".{built}"
        )
    return lines


def _decoding(temperature: float) -> str:
    return "greedy" if not temperature else f"sampled (T = {temperature:g})"


def _recipe_extras(r: dict[str, Any]) -> str:
    """The recipe options of docs/notes/warmstart.md that are on, for the warm-start line."""
    on = [name for name in ("think_hint", "think_plan", "expert_only", "spaced_digits") if r.get(name)]
    on += [f"{name} {r[name]}" for name in ("invalid_rate", "sft_balance") if r.get(name)]
    if r.get("sft_decay_steps"):
        on.append(f"the rate annealed over the last {r['sft_decay_steps']}")
    return f" ({', '.join(on)})" if on else ""


def write_results(
    runs: Sequence[Run],
    *,
    docs: Path,
    png: Path,
    speed: dict[str, Any] | None,
    reproduce: str,
    partial_note: str = "",
    note: str = "",
    warm_starts: dict[str, dict[str, Any]] | None = None,
    protocol: str = "",
    about: str = "",
    warm_tests: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Write ``docs`` (markdown) and ``png`` from ``runs`` and the speed measurement; ``partial_note`` says what
    the table lacks, ``note`` what a reader needs to know about a complete one (recipes, devices, timings).
    ``protocol`` (what was run, on what, when, and how to rerun it) opens the page; ``about`` (markdown) follows
    the findings; both are kept by hand beside the page's records (``protocol.md``, ``about.md``)."""
    plot(runs, png)
    tests = test_table(runs, warm_tests)
    parts = [
        "# Local training results: GRPO vs GiGPO (and ARPO vs GRPO) at laptop scale",
        "",
    ]
    if protocol:
        parts += ["## Protocol", "", protocol.strip(), ""]
    parts += [
        "Written by `bench/learning_table.py` from the runs' `metrics.jsonl` files"
        + (
            ' (the protocol and "About these runs" from `protocol.md` and `about.md` beside the records)'
            if protocol or about
            else ""
        )
        + "; do not edit by hand.",
        "",
    ]
    if partial_note:
        parts += [f"> **Partial.** {partial_note}", ""]
    if note:
        parts += [f"> **Note.** {note}", ""]
    if warm_starts:
        parts += ["## Warm starts (`toolgym warmstart`)", "", *warm_start_lines(warm_starts), ""]
    if speed:
        parts += ["## Speed: one RL step on built-in ALFWorld", "", speed_table(speed), ""]
    parts += [
        "## Held-out success (%) before and after RL",
        "",
        "Before: the warm start; after: the last checkpoint; both on the same held-out tasks with the config's held-out decoding "
        "(ALFWorld and WebShop: sampling at temperature 0.4, seeded, as verl-agent evaluates). Where the held-out tasks are "
        "more than the in-run evaluation's, the figures come from a final evaluation after training "
        "(`--final-eval-tasks`, on the config's first test split); the curves show the in-run evaluations. Cells: mean ± std "
        "over seeds. Each environment's table names its split.",
        "",
        "Splits (from each run's `run.json` and `final_eval.json`; train: what training draws from, validation: what "
        "choices may look at, test: only reported):",
        "",
        *split_lines(runs),
        "",
        table(runs),
        f"![learning curves]({_relative(png, docs.parent)})",
        "",
        *(
            [
                "## Test splits",
                "",
                "Success (%) on each test split of the config (`toolgym.test`), from the final evaluation "
                "(`--final-eval-tasks`): the warm start, and each estimator's last checkpoint (mean ± std over seeds).",
                "",
                tests,
            ]
            if tests
            else []
        ),
        *comparison_sections(runs),
        "## What came out",
        "",
        findings(runs),
        "",
        *(["## About these runs", "", about.strip(), ""] if about else []),
        "## Commands",
        "",
        "Reproduce this page:",
        "",
        "```bash",
        reproduce,
        "```",
        "",
        "The full table with the benchmark's defaults (3 seeds, 20 RL steps of 16 tasks × 8, 96 validation tasks during "
        "training and 480 of each test split at the end, ALFWorld's out-of-distribution split included; hours on 2 cores; "
        "finished runs are reused when it is restarted):",
        "",
        "```bash",
        "toolgym warmstart --env alfworld && toolgym warmstart --env webshop && toolgym warmstart --env math_python",
        "nice -n 10 .venv/bin/python bench/learning_table.py --envs alfworld webshop --final-eval-tasks 480",
        "nice -n 10 .venv/bin/python bench/learning_table.py --envs math_python --steps 20 --tasks 4 --eval-tasks 64 "
        "--final-eval-tasks 64",
        "```",
        "",
        "Each run (exactly as the benchmark started it):",
        "",
        "```bash",
    ]
    parts += [r.command for r in runs]
    parts += ["```", ""]
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text("\n".join(parts))


def comparison_sections(runs: Sequence[Run]) -> list[str]:
    """The page's sample-efficiency table and, where an environment has two estimators or more, its
    paired differences with the method that made their intervals."""
    parts = [
        "## Sample efficiency: the in-run held-out curves",
        "",
        "Held-out success (%) of the in-run evaluations (the curves above), and the area under each run's curve: "
        "its mean success over the steps it spans (trapezoid rule, step 0 included). Cells: mean ± std over seeds.",
        "",
        efficiency_table(runs),
    ]
    diffs = differences_table(runs)
    if not diffs:
        return parts
    seeds_only = "| seeds |" in diffs
    parts += [
        "## Differences between estimators (paired, 95 % interval)",
        "",
        "A − B in held-out success (points), paired by seed: both sides trained from the same seed (the same "
        "training tasks in the same order) and evaluated on the same held-out tasks; Δ is the mean of the per-seed "
        f"differences. Interval: 2.5th–97.5th percentile of {RESAMPLES:,} paired bootstrap resamples (seed "
        f"{BOOTSTRAP_SEED}; one draw of seeds, and of tasks within each seed where the evaluations kept per-task "
        "outcomes, serves both sides)."
        + (
            " The records keep each evaluation's success rate (ALFWorld's also per task type), not per-task "
            "outcomes, so the rows resampled over *seeds* only do not resample tasks: with this few seeds such an "
            "interval is about the range of the per-seed differences and understates the uncertainty about a new "
            "seed. Evaluations that record per-task outcomes (`per_task`: task id → success) are resampled over "
            "tasks too, paired by task."
            if seeds_only
            else ""
        ),
        "",
        diffs,
    ]
    return parts


def speed_table(speed: dict[str, Any]) -> str:
    s = speed
    return "\n".join(
        [
            f"{s['tasks']} tasks × group {s['group']} = {s['episodes']} episodes, model `{s['model']}`, {s['threads']} torch threads, "
            f"load average {s['load']:.1f} on {s['cpus']} CPUs during the run.",
            "",
            "| what | value |",
            "|---|---|",
            f"| RL step wall time (target ≤ 60 s) | **{s['step_s']:.1f} s** (rollouts {s['sample_s']:.1f} s, update {s['update_s']:.1f} s) |",
            f"| rollouts: sampled tokens/s, episodes/s | {s['tokens_per_s']:,.0f} tok/s, {s['episodes_per_s']:.2f} ep/s ({s['tokens']} tokens, {s['turns']} model calls) |",
            f"| one turn of {s['bench_prompts']} prompts, KV-cached batched sampler | {s['sampler_tokens_per_s']:,.0f} tok/s ({s['sampler_s']:.2f} s) |",
            f"| the same prompts, plain Hugging Face `generate` (baseline) | {s['hf_tokens_per_s']:,.0f} tok/s ({s['hf_s']:.2f} s) |",
        ]
    )


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)
