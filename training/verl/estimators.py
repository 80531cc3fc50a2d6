"""toolgym's estimators registered in verl's advantage registry: ``toolgym_grpo``,
``toolgym_gigpo``, ``toolgym_arpo``.

verl calls a registered estimator with ``token_level_rewards``, ``response_mask``, ``config`` and
the group keys ``index`` (the prompt ``uid``) only. GiGPO and ARPO need more: each row's
trajectory, steps, anchors and step rewards, which the agent loop put in ``extra_fields``. The
toolgym trainer (:class:`~toolgym.training.verl.trainer.ToolgymPPOTrainer`) fetches them and binds
them with :func:`advantage_context` around verl's own advantage step, so verl's code path
(rewards, KL, rollout correction, write-back) runs unchanged and our estimator finds the rows'
metadata here. Called without that context, an estimator raises a ``ConfigError`` saying how to
run it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from toolgym.core.errors import ConfigError
from toolgym.training.filters import EpisodeFilters

from .advantage import ESTIMATORS, filter_rows, row_advantages
from .rows import META_KEY, RowMeta


@dataclass
class AdvantageContext:
    """Per-row metadata of the batch being processed, aligned with its rows, and the options."""

    metas: list[RowMeta | None]
    """One per batch row, in row order; None for verl's synthetic padding rows."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the estimator in use."""
    filters: EpisodeFilters = field(default_factory=EpisodeFilters)
    """Episode filters applied to the batch before the advantages (:mod:`toolgym.training.filters`)."""
    counts: dict[str, float] = field(default_factory=dict)
    """What the filters did to the batch, set by the estimator (``filter/...``)."""


_current: ContextVar[AdvantageContext | None] = ContextVar("toolgym_advantage_context", default=None)


@contextmanager
def advantage_context(
    metas: Sequence[RowMeta | None],
    options: dict[str, Any] | None = None,
    filters: EpisodeFilters | None = None,
) -> Iterator[AdvantageContext]:
    """Make ``metas``, ``options`` and ``filters`` visible to toolgym's registered estimators inside the block."""
    ctx = AdvantageContext(list(metas), dict(options or {}), filters or EpisodeFilters())
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


def metas_from_extra_fields(
    extra_fields: Sequence[Any], padding: Sequence[bool] | None = None
) -> list[RowMeta | None]:
    """Parse each row's ``extra_fields["toolgym"]``; padding rows give None.

    Raises ``ConfigError`` for a real row without toolgym metadata: mixing toolgym's agent loop
    with other agent loops in one batch under a toolgym estimator is not supported.
    """
    out: list[RowMeta | None] = []
    for k, extra in enumerate(extra_fields):
        if padding is not None and padding[k]:
            out.append(None)
            continue
        if not isinstance(extra, dict) or META_KEY not in extra:
            raise ConfigError(
                f"batch row {k} has no toolgym metadata in extra_fields; toolgym estimators need every row "
                "to come from the toolgym_agent loop (set data rows' agent_name or rollout.agent.default_agent_loop)"
            )
        out.append(RowMeta.from_dict(extra[META_KEY]))
    return out


def _estimator(name: str) -> Any:
    kind = ESTIMATORS[name]

    def estimate(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx = _current.get()
        if ctx is None:
            raise ConfigError(
                f"advantage estimator {name!r} needs each row's toolgym metadata, which only the toolgym "
                "trainer passes: set trainer.use_v1=true and trainer.v1.trainer_mode=toolgym (toolgym train does)"
            )
        if index is None:
            raise ConfigError(
                f"advantage estimator {name!r} needs the batch's group keys (non_tensor_batch['uid'])"
            )
        if len(ctx.metas) != response_mask.shape[0]:
            raise ConfigError(
                f"the batch has {response_mask.shape[0]} rows but metadata for {len(ctx.metas)} was bound; bind one per row"
            )
        groups = np.asarray(index, dtype=object).tolist()
        metas, masked, ctx.counts = filter_rows(ctx.metas, groups, ctx.filters)
        adv = row_advantages(kind, metas, groups, response_mask.detach().cpu().numpy(), **ctx.options)
        adv[np.asarray(masked, dtype=bool)] = 0.0  # masked rollouts set their group's baseline only
        advantages = torch.from_numpy(adv).to(device=response_mask.device, dtype=torch.float32)
        return advantages, advantages.clone()

    estimate.__name__ = f"compute_{name}_advantage"
    estimate.__doc__ = f"toolgym's {kind} estimator on a verl batch (see toolgym.training.verl.estimators)."
    return estimate


def register_estimators() -> list[str]:
    """Register the three estimators with verl (idempotent); return their names."""
    for name in ESTIMATORS:
        if name not in ADV_ESTIMATOR_REGISTRY:
            register_adv_est(name)(_estimator(name))
    return list(ESTIMATORS)
