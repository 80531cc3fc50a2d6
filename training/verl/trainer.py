"""verl's synchronous V1 trainer with toolgym's advantage step, registered as ``toolgym``
(``trainer.use_v1=true``, ``trainer.v1.trainer_mode=toolgym``).

Everything but the advantage step is verl's ``PPOTrainerSync``. The advantage step reads each
row's ``extra_fields`` (where the agent loop put the trajectory, step and anchor metadata) and the
TransferQueue tags (which mark verl's synthetic padding rows) and binds them for toolgym's
registered estimators (:mod:`.estimators`) around verl's own advantage step. With a verl
estimator (``grpo``, ``gae``, ...) the step is verl's, untouched.
"""

from __future__ import annotations

import logging
from typing import Any

import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from toolgym.core.errors import ConfigError

from .advantage import ESTIMATORS
from .estimators import advantage_context, metas_from_extra_fields
from .rows import RowMeta
from .settings import load_settings

TRAINER_MODE = "toolgym"
logger = logging.getLogger(__name__)


def advantage_metrics(metas: list[RowMeta | None]) -> dict[str, float]:
    """Batch figures logged under ``toolgym/``: rows, trajectories, steps, truncation, ARPO forks."""
    live = [m for m in metas if m is not None]
    trajectories = {m.trajectory_id for m in live}
    steps = sum(len(m.steps) for m in live)
    return {
        "toolgym/rows": float(len(live)),
        "toolgym/trajectories": float(len(trajectories)),
        "toolgym/steps_per_trajectory": steps / max(len(trajectories), 1),
        "toolgym/truncated_rows": float(sum(1 for m in live if m.truncated_tokens)),
        "toolgym/forked_trajectories": float(len({m.trajectory_id for m in live if m.parent_id is not None})),
    }


def truncation_warning(metas: list[RowMeta | None], max_response_length: int) -> str | None:
    """The line to log when rows lost tokens to ``data.max_response_length``; None when none did."""
    cut = [m for m in metas if m is not None and m.truncated_tokens]
    if not cut:
        return None
    return (
        f"{len(cut)} of {sum(m is not None for m in metas)} rows of this step were cut at "
        f"data.max_response_length={max_response_length} (up to {max(m.truncated_tokens for m in cut)} tokens): "
        "their last turns, often the answer that carries the reward, do not train; raise "
        "verl.data.max_response_length toward toolgym.engine.max_tokens_per_trajectory "
        "(logged once; toolgym/truncated_rows counts them every step)"
    )


def logprob_sync_metrics(data: Any) -> dict[str, float]:
    """How far the rollout's logprobs of the sampled tokens are from the actor's recomputed
    ``old_log_probs`` (``toolgym/rollout_logprob_diff_max`` / ``_mean``, nats, response tokens only).

    verl's own ``training/rollout_probs_diff_*`` compare probabilities; this compares logprobs, the
    figure that shows a weight sync that did not happen (the rollout serving the previous step's
    weights) even where probabilities are small. Both sides see the same weights after a sync, so on
    one CPU process group in float32 the maximum stays below 1e-4 (about 1e-6 measured); a stale rollout
    shows the step's update (0.27 measured on the tiny model)."""
    mask = data["response_mask"].bool()
    actor, rollout = data["old_log_probs"], data["rollout_log_probs"]
    width = min(actor.shape[-1], rollout.shape[-1], mask.shape[-1])
    mask = mask[:, :width]
    if not bool(mask.any()):
        return {}
    diff = (actor[:, :width].float() - rollout[:, :width].float()).abs()[mask]
    return {
        "toolgym/rollout_logprob_diff_max": float(diff.max()),
        "toolgym/rollout_logprob_diff_mean": float(diff.mean()),
    }


@register_trainer(TRAINER_MODE)
class ToolgymPPOTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` whose advantage step feeds toolgym's estimators their row metadata."""

    _warned_truncation = False

    def _warn_truncation(self, metas: list[RowMeta | None]) -> None:
        if self._warned_truncation:
            return
        line = truncation_warning(metas, int(self.config.data.max_response_length))
        if line is not None:
            self._warned_truncation = True
            logger.warning(line)

    def __init__(self, config: Any) -> None:
        estimator = str(config.algorithm.adv_estimator)
        if estimator in ESTIMATORS:
            if config.algorithm.use_kl_in_reward:
                raise ConfigError(
                    f"{estimator} takes episode and step rewards from the environment, so algorithm.use_kl_in_reward "
                    "would be ignored; use the actor's KL loss (actor_rollout_ref.actor.use_kl_loss=true) instead"
                )
            self.toolgym = load_settings(config.get("toolgym"))
            if self.toolgym.advantage.verl_name != estimator:
                raise ConfigError(
                    f"algorithm.adv_estimator is {estimator!r} but toolgym.advantage.estimator is "
                    f"{self.toolgym.advantage.estimator!r}; make them agree (toolgym train sets both)"
                )
        super().__init__(config)

    def _build_replay_buffer(self) -> Any:
        # verl keys its sync/async behaviour on the mode name; ``toolgym`` is the sync trainer.
        self.trainer_mode = "sync"
        self.parameter_sync_step = 1
        return super()._build_replay_buffer()

    def _compute_old_log_prob(self, batch: Any, metrics: dict) -> Any:
        out = super()._compute_old_log_prob(batch, metrics)
        rollout = self.config.actor_rollout_ref.rollout
        corr = self.config.algorithm.get("rollout_correction", None)
        if rollout.calculate_log_probs and not (corr and corr.get("bypass_mode", False)):
            data = tq.kv_batch_get(
                keys=out.keys,
                partition_id=out.partition_id,
                select_fields=["old_log_probs", "rollout_log_probs", "response_mask"],
            )
            metrics.update(logprob_sync_metrics(data.to_padded_tensor()))
        return out

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        estimator = str(self.config.algorithm.adv_estimator)
        if estimator not in ESTIMATORS:
            return super()._compute_advantage(batch, metrics)
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        extra = data["extra_fields"]
        # NonTensorStack, tensordict's LinkedList or an array, depending on the storage backend
        metas = metas_from_extra_fields(extra.tolist() if hasattr(extra, "tolist") else list(extra), padding)
        metrics.update(advantage_metrics(metas))
        self._warn_truncation(metas)
        with advantage_context(metas, self.toolgym.advantage.options, self.toolgym.filters) as ctx:
            out = super()._compute_advantage(batch, metrics)
        metrics.update({f"toolgym/{k}": v for k, v in ctx.counts.items()})
        return out
