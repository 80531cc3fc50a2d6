"""HTML of the report: one index page and one page per sampled episode, rendered from the jinja2
templates in ``templates/`` (self-contained pages: inline CSS and a little JavaScript, no network).

Autoescape is on for every template, so every value (prompts, model output, tool results,
environment text, file names) is escaped by the template engine; this module only prepares the
data. Model-written text is only ever rendered as data, never compiled as a template.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

import jinja2

from toolgym.core.trajectory import Trajectory

from .stats import DatasetStats

MAX_CHARS = 20_000
"""Longest text shown for one field (action, observation, tool output); the middle is cut."""
MAX_TOKENS = 20_000
"""Most tokens shown one by one on an episode page."""
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg")


def clip(text: str, limit: int = MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


@cache
def environment() -> jinja2.Environment:
    """The templates' environment: loaded from the package, autoescaped, strict about undefined names."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(clip=clip, num="{:,}".format, arguments=_arguments)
    env.tests["image"] = lambda path: path.lower().endswith(IMAGE_SUFFIXES)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def index_page(
    stats: DatasetStats,
    manifest: dict[str, Any],
    plots: dict[str, str],
    episodes: list[dict[str, Any]],
    *,
    source: str,
) -> str:
    """The report's front page: summary, plots, per-environment and per-tool tables, and the
    sampled episodes (filterable, sortable)."""
    ok = stats.overall
    fp = manifest.get("fingerprint") or {}
    cards = [
        ("trajectories", f"{stats.n:,}"),
        ("success rate", _pct(ok.success_rate) if ok.n else "-"),
        ("mean reward", f"{ok.mean_reward:.3f}" if ok.n else "-"),
        ("turns / episode", f"{stats.turns / stats.n:.2f}" if stats.n else "-"),
        ("failed", f"{stats.status.get('error', 0):,}"),
        ("untrainable", f"{stats.status.get('untrainable', 0):,}"),
        ("token-faithful", _pct(stats.token_faithful / stats.n) if stats.n else "-"),
        ("tokens (sampled)", f"{stats.tokens:,} ({stats.sampled_tokens:,})"),
        ("tool calls", f"{stats.all_tools.calls:,}"),
    ]
    by_env = [[e, t.n, _pct(t.success_rate), f"{t.mean_reward:.3f}"] for e, t in sorted(stats.by_env.items())]
    tools = [
        [n, t.calls, t.errors, _ms(t.seconds / t.calls), _ms(t.quantile(0.5)), _ms(t.quantile(0.95))]
        for n, t in sorted(stats.tools.items())
    ]
    return render(
        "index.html.jinja",
        title="toolgym dataset report",
        home=None,
        source=source,
        stats=stats,
        manifest=manifest,
        model=manifest.get("model_name") or fp.get("model", "?"),
        sampling=json.dumps(manifest.get("sampling") or fp.get("sampling") or {}),
        cards=cards,
        plots=plots,
        by_env=by_env,
        tools=tools,
        episodes=episodes,
        statuses=sorted({e["status"] for e in episodes}),
    )


def token_items(traj: Trajectory, tokenizer: Any = None) -> dict[str, Any] | None:
    """What the token view shows: one item per token with a tokenizer (hover: id and logprob), else
    one per segment (hover: role, tokens, mean logprob), with a marker where a new sequence
    (context window) starts; None without token ids."""
    if not traj.segments:
        return None
    items: list[dict[str, Any]] = []
    shown, last_seq = 0, 0
    for seg in traj.segments:
        if seg.sequence != last_seq:
            items.append({"kind": "sequence", "sequence": seg.sequence})
            last_seq = seg.sequence
        if tokenizer is not None and shown < MAX_TOKENS:
            for k, tid in enumerate(seg.token_ids[: MAX_TOKENS - shown]):
                items.append(
                    {
                        "kind": "token",
                        "id": tid,
                        "mask": seg.loss_mask[k],
                        "logprob": seg.logprobs[k] if seg.logprobs is not None else None,
                        "text": tokenizer.decode([tid]),
                    }
                )
            shown += len(seg.token_ids)
        else:
            items.append(
                {
                    "kind": "segment",
                    "role": seg.role,
                    "mask": 1 if any(seg.loss_mask) else 0,
                    "tokens": len(seg.token_ids),
                    "logprob": sum(seg.logprobs) / len(seg.logprobs) if seg.logprobs else None,
                    "text": seg.text,
                }
            )
    more = shown - MAX_TOKENS if tokenizer is not None and shown > MAX_TOKENS else 0
    return {"spans": items, "more": more}


def episode_page(traj: Trajectory, files: dict[str, str], *, tokenizer: Any = None) -> str:
    """One episode: header, prompt, each step (action, tool calls with outputs, latencies and
    screenshots, observation, reward), then the tokens coloured by loss mask."""
    t = traj.timings
    status = traj.status.value + (f" ({traj.status_reason})" if traj.status_reason else "")
    end = (
        "terminated"
        if traj.terminated
        else (f"truncated: {traj.truncation_reason}" if traj.truncated else "-")
    )
    fields: list[list[Any]] = [
        ["trajectory", traj.trajectory_id],
        ["group", traj.group_id],
        ["environment", f"{traj.env or traj.task} #{traj.task_index} (seed {traj.seed})"],
        ["sample", traj.sample_index],
        ["model", traj.model],
        ["reward", f"{traj.reward:.4g}"],
        ["status", status],
        ["end", end],
        ["token-faithful", "yes" if traj.token_faithful else "no (text API)"],
        [
            "time",
            f"{t.total_s:.2f}s (llm {t.llm_s:.2f}s, env {t.env_s:.2f}s, tools {t.tool_s:.2f}s, sandbox {t.sandbox_s:.2f}s)",
        ],
    ]
    if traj.parent_id:
        fields.append(["parent", f"{traj.parent_id} at token {traj.branch_point}"])
    return render(
        "episode.html.jinja",
        title=f"episode {traj.trajectory_id}",
        home="../index.html",
        traj=traj,
        fields=fields,
        files=files,
        tokens=token_items(traj, tokenizer),
    )
