"""The report's plots, drawn with matplotlib's Agg backend into PNG files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .stats import LATENCY_BINS, DatasetStats, Tally

if TYPE_CHECKING:
    from matplotlib.axes import Axes

PLOTS = {
    "reward_distribution": "Reward distribution",
    "success_by_env": "Success by environment",
    "success_by_turns": "Success by turn count",
    "tool_latency": "Tool latency",
}
"""File stem → title of every plot the report draws."""

_BLUE, _GREEN, _GREY = "#3b6ea8", "#3a9a5b", "#888888"


def draw_all(stats: DatasetStats, out: Path) -> dict[str, str]:
    """Draw every plot of ``PLOTS`` into ``out``; returns stem → file name."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for stem, draw in (
        ("reward_distribution", _rewards),
        ("success_by_env", _by_env),
        ("success_by_turns", _by_turns),
        ("tool_latency", _latency),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        try:
            draw(ax, stats)
            ax.set_title(PLOTS[stem], fontsize=11)
            fig.tight_layout()
            fig.savefig(out / f"{stem}.png")
        finally:
            plt.close(fig)
        files[stem] = f"{stem}.png"
    return files


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", color=_GREY, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _rewards(ax: Axes, stats: DatasetStats) -> None:
    rewards = stats.rewards
    if not rewards:
        _empty(ax, "no finished episodes")
        return
    distinct = sorted(set(rewards)) if len(rewards) <= 1_000_000 else []
    if distinct and len(distinct) <= 12:
        counts = {v: 0 for v in distinct}
        for r in rewards:
            counts[r] += 1
        labels = [f"{v:g}" for v in distinct]
        ax.bar(labels, list(counts.values()), color=_BLUE)
        ax.set_xlabel("episode reward")
    else:
        ax.hist(rewards, bins=30, color=_BLUE)
        ax.set_xlabel("episode reward")
    ax.set_ylabel("episodes")


def _rate_bars(ax: Axes, labels: list[str], tallies: list[Tally], xlabel: str) -> None:
    rates = [100 * t.success_rate for t in tallies]
    bars = ax.bar(labels, rates, color=_GREEN)
    for bar, t in zip(bars, tallies, strict=True):
        ax.annotate(
            f"n={t.n}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=7,
            color=_GREY,
        )
    ax.set_ylim(0, 110)
    ax.set_ylabel("success rate (%)")
    ax.set_xlabel(xlabel)


def _by_env(ax: Axes, stats: DatasetStats) -> None:
    if not stats.by_env:
        _empty(ax, "no finished episodes")
        return
    names = sorted(stats.by_env)[:30]
    _rate_bars(ax, names, [stats.by_env[n] for n in names], "environment")
    if len(names) > 4:
        ax.tick_params(axis="x", labelrotation=30)


def _by_turns(ax: Axes, stats: DatasetStats) -> None:
    if not stats.by_turns:
        _empty(ax, "no finished episodes")
        return
    turns = sorted(stats.by_turns)[:40]
    _rate_bars(ax, [str(t) for t in turns], [stats.by_turns[t] for t in turns], "turns in the episode")


def _latency(ax: Axes, stats: DatasetStats) -> None:
    counts = stats.all_tools.counts
    if not stats.all_tools.calls:
        _empty(ax, "no tool calls in this dataset")
        return
    edges = [LATENCY_BINS[0] / 10**0.1, *LATENCY_BINS, LATENCY_BINS[-1] * 10**0.1]
    lo = next(i for i, c in enumerate(counts) if c)
    hi = max(i for i, c in enumerate(counts) if c) + 1
    lefts = edges[lo:hi]
    widths = [edges[i + 1] - edges[i] for i in range(lo, hi)]
    ax.bar(lefts, counts[lo:hi], width=widths, align="edge", color=_BLUE)
    ax.set_xscale("log")
    ax.set_xlabel("seconds per tool call")
    ax.set_ylabel("calls")
