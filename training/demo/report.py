"""The demo's outputs: a learning-curve PNG (matplotlib, Agg), ``report.md`` and ``metrics.json``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolgym.training.demo.result import DemoResult
    from toolgym.training.local.loop import EvalResult


def plot_learning_curve(result: DemoResult, path: Any) -> None:
    """Training success per RL step, held-out success at each evaluation (with the warm start
    at step 0), and the SFT loss, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_sft) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2.2, 1]})
    steps = [h["step"] + 1 for h in result.history]
    ax.plot(
        steps,
        [h["success"] for h in result.history],
        color="#9ecae1",
        lw=1.2,
        label=f"training rollouts (T={result.config['temperature']})",
    )
    evals = [(0, result.before)] + [
        (h["step"] + 1, h["eval"]["success"]) for h in result.history if h.get("eval")
    ]
    ax.plot(
        [s for s, _ in evals], [v for _, v in evals], "o-", color="#08519c", lw=2, label="held-out (greedy)"
    )
    ax.axhline(result.before, color="#999999", ls="--", lw=1, label=f"warm start {result.before:.0%}")
    ax.set_xlabel("RL step (GiGPO)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"keychain, seed {result.seed}: held-out {result.before:.0%} → {result.after:.0%}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax_sft.plot(range(1, len(result.sft_losses) + 1), result.sft_losses, color="#6a51a3")
    ax_sft.set_yscale("log")
    ax_sft.set_xlabel("SFT step")
    ax_sft.set_ylabel("cross-entropy (nats/token)", color="#6a51a3")
    if result.sft_checks:
        ax_val = ax_sft.twinx()
        ax_val.plot(
            [s for s, _ in result.sft_checks], [v for _, v in result.sft_checks], ".-", color="#31a354", ms=3
        )
        ax_val.set_ylim(-0.02, 1.02)
        ax_val.set_ylabel("validation success (train split)", color="#31a354")
    ax_sft.set_title("warm start")
    ax_sft.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: DemoResult, *, before_eval: EvalResult, after_eval: EvalResult) -> None:
    out = result.out
    plot_learning_curve(result, out / "learning_curve.png")
    cfg = result.config
    metrics = {
        "heldout_success_before_rl": result.before,
        "heldout_success_after_rl": result.after,
        "seed": result.seed,
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "phases_s": result.phases,
        "sft_losses": result.sft_losses,
        "sft_checks": result.sft_checks,
        "history": result.history,
        "scripted_dataset_verified": result.verify_ok,
        "config": cfg,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    rl_rollouts = sum(h["episodes"] for h in result.history)
    phase_rows = "\n".join(f"| {name} | {secs:.1f} |" for name, secs in result.phases.items())
    text = f"""# toolgym demo report

Task `{cfg["env"]}` ({json.dumps(cfg["env_kwargs"])}): follow a chain of keys with the `get` tool, then
reply with the value. Tiny Qwen2-style model ({cfg["hidden_size"]} hidden, {cfg["num_layers"]} layers, {cfg["num_heads"]} heads), weights drawn
from seed {result.seed}; scripted warm start, then GiGPO.

## Held-out success ({after_eval.episodes} test-split tasks, greedy, environment seeds {cfg["eval_seed"]}..{cfg["eval_seed"] + cfg["eval_tasks"] - 1})

| policy | success | mean reward |
|---|---|---|
| warm start (SFT, {len(result.sft_losses)} steps on {cfg["sft_episodes"]} scripted episodes) | **{before_eval.success:.1%}** | {before_eval.mean_reward:.3f} |
| after RL (GiGPO, {len(result.history)} steps, {rl_rollouts} rollouts) | **{after_eval.success:.1%}** | {after_eval.mean_reward:.3f} |

Change: {100 * (result.after - result.before):+.1f} points. Learning curve: `learning_curve.png`.

The warm start is deliberately partial: SFT stops once greedy success on {cfg["sft_val_tasks"]} validation tasks of the
*training* split reaches {cfg["sft_target"]:.0%} (checked every {cfg["sft_check_every"]} steps, more often once it passes a quarter
of the target); here it stopped after
{len(result.sft_losses)} steps at {result.sft_checks[-1][1] if result.sft_checks else 0:.0%}. Held-out tasks are only used for the two numbers above
and the curve. RL rollouts sample at temperature {cfg["temperature"]} (group size {cfg["group_size"]}, {cfg["tasks_per_step"]} tasks per step).

## Time

Wall {result.wall_s:.1f} s, CPU {result.cpu_s:.1f} s (user + system), {cfg["threads_effective"]} torch thread(s), {cfg["cpu_count"]} CPU(s) visible.

| phase | wall s |
|---|---|
{phase_rows}

## Outputs

- `sft-data/`: the scripted dataset (token-faithfulness verified: {"yes" if result.verify_ok else "NO"})
- `trajectories/`: every RL rollout; `heldout-before/`, `heldout-after/`: the evaluation episodes
- `warm-start/`: the SFT model (a Hugging Face directory; `toolgym train --trainer local` can start from it)
- `checkpoint/`: the final weights and trainer state
- `metrics.json`: every number here, per-step metrics and the full configuration

## Configuration

```json
{json.dumps(cfg, indent=2, default=str)}
```
"""
    (out / "report.md").write_text(text)
