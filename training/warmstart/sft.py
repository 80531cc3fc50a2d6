"""The SFT stage every warm-start build shares (:mod:`.build` for the text recipes, :mod:`.vision`
for a vision-language model): the recipe's learning-rate schedule, the engine of its validation
checks, and the fixed budget of SFT steps with a check every ``sft_check_every`` steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from toolgym.core.errors import ConfigError
from toolgym.training.warmstart.recipe import WarmStartRecipe

if TYPE_CHECKING:
    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.engine import RolloutEngine
    from toolgym.training.local.trainer import PolicyTrainer

Progress = Callable[[str, int, int, str], None]
"""``progress(phase, done, total, note)``: the build's progress lines."""


def validation_engine(
    r: WarmStartRecipe,
    registry: Any,
    sampler: Any,
    engine_cfg: EngineConfig,
    sandboxes: Any,
    artifacts_dir: str | None = None,
) -> RolloutEngine:
    """The engine of the warm start's validation checks: the recipe's validation tasks and sampling."""
    from toolgym.core.rollout.config import SamplingConfig
    from toolgym.core.rollout.engine import RolloutEngine
    from toolgym.core.rollout.policy import ModelPolicy

    greedy = engine_cfg.model_copy(
        update={"sampling": SamplingConfig(temperature=r.sft_val_temperature), "seed": r.val_seed}
    )
    return RolloutEngine(
        registry=registry,
        policy=ModelPolicy(sampler, greedy),
        config=greedy,
        env_kwargs={**r.env_kwargs, **r.val_env_kwargs},
        sandbox_backend=sandboxes,
        artifacts_dir=artifacts_dir,
    )


async def sft_with_checks(
    r: WarmStartRecipe,
    sft: PolicyTrainer,
    rows: list[Any],
    val_engine: RolloutEngine,
    progress: Progress,
    *,
    weights: Sequence[float] | None = None,
    context_weight: float = 0.0,
) -> tuple[list[float], list[tuple[int, float]]]:
    """The recipe's SFT steps (learning rate by :func:`sft_lr_at`), a validation check every
    ``sft_check_every`` steps (none when ``sft_val_tasks`` is 0), and the early stop at
    ``sft_target``: each step's loss, and ``(step, success)`` for each check."""
    from toolgym.training.local.config import EvalConfig
    from toolgym.training.local.loop import evaluate
    from toolgym.training.local.sft import run_sft

    # sft_val_tasks 0: no checks (the config is never used)
    val = EvalConfig(num_tasks=max(r.sft_val_tasks, 1), seed=r.val_seed, temperature=r.sft_val_temperature)
    losses: list[float] = []
    checks: list[tuple[int, float]] = []
    sft.set_lr(sft_lr_at(r, 0))
    while len(losses) < r.sft_max_steps:
        n = min(r.sft_check_every, r.sft_max_steps - len(losses))
        base = len(losses)
        note = (
            f" · last validation {checks[-1][1]:.0%}" if checks else ""
        )  # a check's own line says " · validation"

        def report(i: int, metrics: dict[str, Any], base: int = base, note: str = note) -> None:
            sft.set_lr(sft_lr_at(r, base + i + 1))  # the rate of the next step
            progress("sft", base + i + 1, r.sft_max_steps, f"loss {metrics['loss']:.3f}{note}")

        losses += run_sft(
            sft,
            rows,
            steps=n,
            batch_size=r.sft_batch_size,
            seed=r.seed * 1_000 + base,
            on_step=report,
            weights=weights,
            context_weight=context_weight,
        )
        if r.sft_val_tasks < 1:
            continue
        result = await evaluate(val_engine, r.env, val)
        checks.append((len(losses), result.success))
        progress(
            "sft", len(losses), r.sft_max_steps, f"loss {losses[-1]:.3f} · validation {result.success:.0%}"
        )
        if r.sft_target is not None and result.success >= r.sft_target:
            break
    return losses, checks


def sft_lr_at(r: WarmStartRecipe, step: int) -> float:
    """The SFT learning rate of step ``step`` (0-based): ``sft_lr``, then over the last ``sft_decay_steps``
    (all of them when ``sft_max_steps`` is fewer, e.g. a shortened build) a linear ramp down to
    ``sft_lr / N`` at the final step, N being the steps of the ramp."""
    if r.sft_decay_steps < 0:
        raise ConfigError(f"sft_decay_steps must be 0 (a constant rate) or more, got {r.sft_decay_steps}")
    ramp = min(r.sft_decay_steps, r.sft_max_steps)
    left = r.sft_max_steps - step  # steps left, this one included
    if ramp == 0 or left > ramp:
        return r.sft_lr
    return r.sft_lr * max(left, 1) / ramp
