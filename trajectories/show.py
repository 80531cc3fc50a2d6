"""Render a trajectory readably in a terminal (``toolgym show``).

Every text that comes from the dataset (the model's, the tools', the environment's, ids and names
too: a dataset may come from anyone) is shown through :func:`toolgym.core.util.terminal.visible` (no
raw control character reaches the terminal) and as a rich ``Text`` (never parsed as markup, so a
``[link=...]`` in it stays text).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from toolgym.core.trajectory import Status, Trajectory
from toolgym.core.util.terminal import visible

_STATUS_STYLE = {Status.OK: "green", Status.ERROR: "red", Status.UNTRAINABLE: "yellow"}


def _t(value: Any, style: str = "") -> Text:
    """Dataset text as a plain (never markup) ``Text``, control characters shown visibly."""
    return Text(visible(str(value)), style=style)


def summary_table(rows: list[dict[str, Any]]) -> Table:
    """One line per trajectory: id, task, sample, turns, reward, status."""
    table = Table("id", "task", "idx", "sample", "turns", "tokens", "reward", "status")
    for r in rows:
        tokens = sum(len(s.get("token_ids", [])) for s in r.get("segments", []))
        status = str(r.get("status", "ok"))
        style = {k.value: v for k, v in _STATUS_STYLE.items()}.get(status, "")
        table.add_row(
            _t(str(r["trajectory_id"])[:12]),
            _t(r.get("task", "")),
            _t(r.get("task_index", "")),
            _t(r.get("sample_index", "")),
            str(len(r.get("steps", []))),
            str(tokens),
            f"{r.get('reward', 0.0):.3g}",
            _t(status, style),
        )
    return table


def render_trajectory(traj: Trajectory, *, tokens: bool = False, max_chars: int = 2000) -> Group:
    """Header, the prompt, then each step: the model's action, its tool calls, the observation."""
    parts: list[Any] = []
    status = Text(traj.status.value, style=_STATUS_STYLE[traj.status])
    if traj.status_reason:
        status.append(visible(f" ({traj.status_reason})"))
    head = Table.grid(padding=(0, 2))
    head.add_row("trajectory", _t(traj.trajectory_id), "group", _t(traj.group_id))
    head.add_row(
        "task", _t(f"{traj.task} #{traj.task_index} (seed {traj.seed})"), "sample", str(traj.sample_index)
    )
    head.add_row("model", _t(traj.model), "reward", f"{traj.reward:.4g}")
    end = (
        "terminated"
        if traj.terminated
        else (f"truncated: {traj.truncation_reason}" if traj.truncated else "-")
    )
    head.add_row("status", status, "end", _t(end))
    t = traj.timings
    head.add_row(
        "time",
        f"{t.total_s:.2f}s (llm {t.llm_s:.2f}s, env {t.env_s:.2f}s, sandbox {t.sandbox_s:.2f}s)",
        "faithful",
        "yes" if traj.token_faithful else "no (text API)",
    )
    parts.append(Panel(head, title="toolgym trajectory", border_style="blue"))
    for m in traj.prompt:
        parts.append(
            Panel(
                _t(_clip(str(m.get("content", "")), max_chars)),
                title=_t(m.get("role", "?")),
                border_style="dim",
            )
        )
    for step in traj.steps:
        title = _t(f"step {step.index} · {step.action_kind}" + ("" if step.valid else " · INVALID"))
        body: list[Any] = [_t(_clip(step.action, max_chars), "cyan")]
        if step.error:
            body.append(_t(f"error: {step.error}", "red"))
        for call in step.tool_calls:
            style = "red" if call.error else "magenta"
            body.append(_t(f"→ {call.name}({call.arguments}) [{call.duration_s * 1000:.0f} ms]", style))
        if step.observation:
            body.append(_t(_clip(step.observation, max_chars), "white"))
        meta = f"reward {step.step_reward:.3g} · anchor {step.anchor[:10]}"
        if step.llm is not None:
            meta += f" · {step.llm.completion_tokens} tok, {step.llm.finish_reason}, {step.llm.latency_s * 1000:.0f} ms"
        body.append(_t(meta, "dim"))
        parts.append(Panel(Group(*body), title=title, border_style="green" if step.valid else "red"))
    if tokens:
        parts.append(Panel(token_view(traj), title="tokens (bold green: loss mask 1)", border_style="dim"))
    return Group(*parts)


def token_view(traj: Trajectory) -> Text:
    """The segments' text, coloured by loss mask; sequence boundaries marked."""
    out = Text()
    last = 0
    for seg in traj.segments:
        if seg.sequence != last:
            out.append(f"\n──── sequence {seg.sequence} ────\n", style="yellow")
            last = seg.sequence
        style = "bold green" if seg.role == "assistant" else "dim"
        out.append(visible(seg.text), style=style)
    return out


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters] …\n{text[-half:]}"
