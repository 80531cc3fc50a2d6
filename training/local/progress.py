"""What the local trainer shows and records per RL step: one progress line and one ``metrics.jsonl``
record (the same figures), so a log file reads like the terminal."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from .loop import EvalResult, StepLog


def eval_record(ev: EvalResult) -> dict[str, Any]:
    return {
        "success": ev.success,
        "mean_reward": ev.mean_reward,
        "score": ev.mean_score,
        "episodes": ev.episodes,
        "failed": ev.failed,
        "seconds": ev.seconds,
        "by_type": ev.by_type,
        "per_task": ev.per_task,
        "tool_use": ev.tool_use,
    }


def step_record(log: StepLog, *, wall_s: float, kl_coef: float) -> dict[str, Any]:
    """The ``metrics.jsonl`` record of one RL step (``step`` counts steps done, from 1)."""
    m = log.metrics
    rec: dict[str, Any] = {
        "step": log.step + 1,
        "train_success": log.success,
        "mean_reward": log.mean_reward,
        "episodes": log.episodes,
        "trainable": log.trainable,
        "rows": log.rows,
        "policy_loss": m.get("loss"),
        "kl": m.get("kl_ref") if kl_coef > 0 else m.get("approx_kl"),
        "kl_kind": "ref" if kl_coef > 0 else "old",
        "entropy": m.get("entropy"),
        "clip_frac": m.get("clip_frac"),
        "grad_norm": m.get("grad_norm"),
        "tokens": log.tokens,
        "sample_s": log.sample_s,
        "update_s": log.update_s,
        "wall_s": wall_s,
        "tokens_per_s": log.tokens / log.sample_s if log.sample_s > 0 else 0.0,
        "episodes_per_s": log.episodes / log.sample_s if log.sample_s > 0 else 0.0,
        "step_groups": log.stats,
        "filters": log.filters,
    }
    if log.image_rows:  # a VLM's step: the rows whose screenshots went through the update
        rec["image_rows"] = log.image_rows
    if log.eval is not None:
        rec["heldout"] = eval_record(log.eval)
    return rec


def eval_start_line(num_tasks: int, *, when: str) -> str:
    """``held-out evaluation before RL: 128 tasks …``, printed as a held-out evaluation starts (the
    one before RL takes tens of seconds and says nothing else until it ends)."""
    return f"held-out evaluation {when}: {num_tasks} tasks …"


def eval_end_line(ev: EvalResult, *, when: str) -> str:
    """``held-out success before RL: 28.1% (128 tasks, 41 s)``, printed as it ends."""
    return f"held-out success {when}: {ev.success:.1%} ({ev.episodes} tasks, {ev.seconds:.0f} s)"


def tracking_metrics(rec: dict[str, Any]) -> dict[str, float]:
    """A ``metrics.jsonl`` record as the flat scalars verl's ``Tracking`` logs: ``train/success``,
    ``train/policy_loss``, ``train/kl_old`` (or ``train/kl_ref``), ... , ``heldout/success``,
    ``heldout/by_type/<type>``, ``step_groups/<statistic>`` and the filters' ``filter/<reason>``."""
    out: dict[str, float] = {}
    for key, value in rec.items():
        if key in ("step", "kl_kind"):
            continue
        if key == "kl":
            _flatten(f"train/kl_{rec.get('kl_kind', 'old')}", value, out)
        elif key == "heldout":  # per-task outcomes stay in metrics.jsonl: one scalar per task is no chart
            _flatten(key, {k: v for k, v in value.items() if k != "per_task"}, out)
        elif key == "step_groups":
            _flatten(key, value, out)
        elif key == "filters":  # already named filter/<reason>
            for name, count in (value or {}).items():
                _flatten(str(name), count, out)
        else:
            _flatten(f"train/{key.removeprefix('train_')}", value, out)
    return out


def _flatten(name: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{name}/{key}", inner, out)
    elif isinstance(value, (bool, int, float)) and not (isinstance(value, float) and math.isnan(value)):
        out[name] = float(value)


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "–"


def format_eta(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def progress_line(rec: dict[str, Any], *, total: int, eta_s: float) -> str:
    """``step 3/40 · train 31% · held-out 28% · reward 0.312 · loss -0.012 · KL 0.0012 · entropy
    0.85 · 1,234 tok/s · 3.2 ep/s · 41 s/step · ETA 25m10s``."""
    parts = [f"step {rec['step']}/{total}", f"train {rec['train_success']:.0%}"]
    if "heldout" in rec:
        parts.append(f"held-out {rec['heldout']['success']:.0%}")
    parts += [
        f"reward {rec['mean_reward']:.3f}",
        f"loss {_num(rec['policy_loss'], '.4f')}",
        f"KL({rec['kl_kind']}) {_num(rec['kl'], '.4f')}",
        f"entropy {_num(rec['entropy'], '.3f')}",
        *_filtered(rec.get("filters") or {}),
        f"{rec['tokens_per_s']:,.0f} tok/s",
        f"{rec['episodes_per_s']:.2f} ep/s",
        f"{rec['wall_s']:.0f} s/step",
        f"ETA {format_eta(eta_s)}",
    ]
    return " · ".join(parts)


def _filtered(counts: dict[str, float]) -> list[str]:
    """``filtered 3 masked/2 dropped (overlong 2, timeout 1, 1 equal group)``, or nothing when none was."""
    masked, dropped = int(counts.get("filter/masked", 0)), int(counts.get("filter/dropped", 0))
    if not masked and not dropped:
        return []
    why = [
        f"{k.removeprefix('filter/')} {int(v)}"
        for k, v in counts.items()
        if v and k not in ("filter/masked", "filter/dropped", "filter/kept", "filter/equal_reward_groups")
    ]
    groups = int(counts.get("filter/equal_reward_groups", 0))
    if groups:
        why.append(f"{groups} equal group{'s' if groups > 1 else ''}")
    return [f"filtered {masked} masked/{dropped} dropped ({', '.join(why)})"]


def set_aside(path: Path) -> Path | None:
    """Rename ``metrics.jsonl`` of an earlier run that left no checkpoint to resume from to
    ``metrics-<its last write, YYYYmmdd-HHMMSS>.jsonl`` (``-2``, ``-3`` ... if taken), so a rerun
    into the same directory replaces nothing; the new name, or None when there were no records."""
    if not path.exists():
        return None
    if not path.read_text().strip():  # a run killed before its first record: nothing to keep
        path.unlink()
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
    target, n = path.with_name(f"{path.stem}-{stamp}{path.suffix}"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.stem}-{stamp}-{n}{path.suffix}")
    path.rename(target)
    return target


class MetricsFile:
    """``metrics.jsonl``: one JSON record per line, flushed and synced per record. On resume, the
    records of steps after the checkpoint (written by the killed run) are dropped first."""

    def __init__(self, path: Path, *, keep_through_step: int | None = None) -> None:
        self.path = path
        if keep_through_step is not None and path.exists():
            kept = [
                ln for ln in path.read_text().splitlines() if ln.strip() and _step_of(ln) <= keep_through_step
            ]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(f"{ln}\n" for ln in kept))
            os.replace(tmp, path)

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(ln) for ln in self.path.read_text().splitlines() if ln.strip()]

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, default=float) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):
        return 10**9
