"""The on-policy loop of the local trainer, and held-out evaluation.

Each RL step samples ``tasks_per_step`` task instances × ``group_size`` episodes with the rollout
engine from a ``TransformersBackend`` that shares its model object with the trainer, computes
token advantages with toolgym's estimators (GiGPO by default), takes the PPO update (generation
paused, weight version bumped per optimiser step) and goes on with fresh tasks. Everything is
seeded: task ``i`` uses environment seed ``seed + i`` and its sampling seeds derive from
``(seed, i, sample, turn)``, so a run is repeatable on one machine and resumable from a
checkpoint. Rollouts are appended to a trajectory store as they finish.

A vision-language model's episodes (screenshot observations) need ``artifacts_dir``: the engines
store each screenshot by hash in the dataset directory that holds it (``<artifacts_dir>/..``, the
trajectory store's folder), the sampler reads them from there, and the update's rows carry them
again (:func:`~toolgym.training.local.batch.trajectory_rows` with ``images_root``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.core.errors import ToolgymError
from toolgym.core.registry import Registry
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.trajectory import Trajectory
from toolgym.training.advantages import compute_token_advantages
from toolgym.training.filters import apply_filters

from .batch import Row, trajectory_rows
from .config import EvalConfig, RLConfig
from .stats import step_group_stats
from .tool_use import SUCCESS_REWARD, tool_use_stats
from .trainer import PolicyTrainer


@dataclass
class EvalResult:
    """Held-out results: ``success`` is the share of episodes with the full reward."""

    success: float
    mean_reward: float
    episodes: int
    failed: int
    seconds: float
    weight_version: str | None = None
    mean_score: float = 0.0
    """Mean of the environment's normalised score (the last step's ``task_score`` when the environment reports one, as WebShop does, else the reward)."""
    by_type: dict[str, float] = field(default_factory=dict)
    """Success per task type (``env_info.task_type``), when the environment reports types."""
    per_task: dict[str, float] = field(default_factory=dict)
    """Success (1.0 or 0.0) of each held-out task, by task index: the same tasks in every evaluation
    of a config, so two runs' evaluations pair task by task (the results pages' bootstrap)."""
    tool_use: dict[str, float] = field(default_factory=dict)
    """Tool calls per episode and per solved episode (:func:`toolgym.training.local.tool_use.tool_use_stats`)."""


@dataclass
class StepLog:
    """What one RL step did; ``seconds`` split into sampling and updating."""

    step: int
    mean_reward: float
    success: float
    episodes: int
    trainable: int
    rows: int
    sample_s: float
    update_s: float
    metrics: dict[str, float] = field(default_factory=dict)
    eval: EvalResult | None = None
    tokens: int = 0
    """Tokens the policy sampled in this step's rollouts."""
    stats: dict[str, float] = field(default_factory=dict)
    """Step-group statistics of the rollouts (see :func:`toolgym.training.local.stats.step_group_stats`)."""
    filters: dict[str, float] = field(default_factory=dict)
    """What the episode filters did (``filter/<class>``, ``filter/masked``, ... see :mod:`toolgym.training.filters`)."""
    image_rows: int = 0
    """Of ``rows``, those that carry images (a VLM's screenshots): their pixels are in the update's forward passes."""


async def run_episodes(
    engine: RolloutEngine, requests: Sequence[Any], on_trajectory: Callable[[Trajectory], Any] | None = None
) -> list[Trajectory]:
    """Run ``requests`` with ``engine``; returns every trajectory it made, grouped in request order
    and by sample index within a group. Under ARPO that includes the forks and the fresh rollouts that
    fill a group to its budget, which no request names: they are half of each group's trajectories
    and must reach the update (the order, not the finishing time, keeps a run repeatable)."""
    got: dict[str, Trajectory] = {}

    def keep(traj: Trajectory) -> None:
        got[traj.trajectory_id] = traj
        if on_trajectory is not None:
            on_trajectory(traj)

    previous = engine.on_trajectory
    engine.on_trajectory = keep
    try:
        await engine.run(requests)
    finally:
        engine.on_trajectory = previous
    rank: dict[str, int] = {}
    for r in requests:
        rank.setdefault(r.group_id, len(rank))
    return sorted(got.values(), key=lambda t: (rank.get(t.group_id, len(rank)), t.sample_index))


def eval_engine(
    config: RLConfig,
    policy: ModelPolicy,
    registry: Registry,
    ev: EvalConfig,
    *,
    sandbox_backend: Any = None,
    artifacts_dir: str | None = None,
) -> RolloutEngine:
    """An engine for held-out (or validation) episodes: one sample per task at ``ev.temperature``, never
    branching (ARPO's forks would be sampled and thrown away: 15 times the work for the same figure)."""
    from toolgym.core.rollout.arpo import ArpoConfig

    cfg = config.engine_config(temperature=ev.temperature, seed=ev.seed).model_copy(
        update={"arpo": ArpoConfig()}
    )
    return RolloutEngine(
        registry=registry,
        policy=policy,
        config=cfg,
        env_kwargs={**config.env_kwargs, **ev.env_kwargs},
        sandbox_backend=sandbox_backend,
        artifacts_dir=artifacts_dir,
    )


async def evaluate(
    engine: RolloutEngine, env: str, ev: EvalConfig, on_trajectory: Callable[[Trajectory], Any] | None = None
) -> EvalResult:
    """Success on the ``ev.num_tasks`` tasks of ``ev`` (the same ones every call)."""
    started = time.perf_counter()
    requests = plan_episodes(
        env, num_tasks=ev.num_tasks, group_size=1, seed=ev.seed, first_task=ev.first_task
    )
    trajs = await run_episodes(engine, requests, on_trajectory)
    raise_if_all_failed(trajs, "the evaluation")
    success, mean = summarize(trajs)
    failed = sum(t.status.value == "error" for t in trajs)
    version = getattr(getattr(engine.policy, "backend", None), "weight_version", None)
    return EvalResult(
        success,
        mean,
        len(trajs),
        failed,
        time.perf_counter() - started,
        version,
        mean_score=mean_score(trajs),
        by_type=success_by_type(trajs),
        per_task=success_by_task(trajs),
        tool_use=tool_use_stats(trajs),
    )


def raise_if_all_failed(trajectories: Sequence[Trajectory], what: str) -> None:
    """Stop with the first episode's reason when every episode of ``what`` ended in an error (a
    crashed model backend, a GPU out of memory): otherwise a run would go on "training" on nothing
    and report 0 % success as if it were a result."""
    if trajectories and all(t.status.value == "error" for t in trajectories):
        reasons = sorted({t.status_reason or "no reason given" for t in trajectories})
        raise ToolgymError(
            f"every one of the {len(trajectories)} episodes of {what} failed; first reason: {reasons[0]}"
            + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else "")
        )


def _env_info(traj: Trajectory) -> dict[str, Any]:
    info = traj.metadata.get("env_info")
    return info if isinstance(info, dict) else {}


def success_by_type(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate per ``env_info.task_type`` (empty when the environment reports none)."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        kind = _env_info(t).get("task_type")
        if kind is not None:
            groups.setdefault(str(kind), []).append(t)
    return {k: summarize(v)[0] for k, v in sorted(groups.items())}


def mean_score(trajectories: Sequence[Trajectory]) -> float:
    """Mean normalised score: the last step's ``info.task_score`` when present (WebShop), else the reward."""
    if not trajectories:
        return 0.0
    scores = []
    for t in trajectories:
        last = t.steps[-1].info if t.steps else {}
        score = last.get("task_score") if isinstance(last, dict) else None
        scores.append(
            float(score)
            if isinstance(score, (int, float))
            else (t.reward if t.status.value != "error" else 0.0)
        )
    return sum(scores) / len(scores)


def success_by_task(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success of each task (the mean over its samples; one sample each in an evaluation), by task index."""
    groups: dict[int, list[float]] = {}
    for t in trajectories:
        reward = t.reward if t.status.value != "error" else 0.0
        groups.setdefault(t.task_index, []).append(float(reward >= SUCCESS_REWARD))
    return {str(i): sum(v) / len(v) for i, v in sorted(groups.items())}


def summarize(trajectories: Sequence[Trajectory]) -> tuple[float, float]:
    """(success rate, mean reward) over ``trajectories``; failed episodes count as reward 0."""
    if not trajectories:
        return 0.0, 0.0
    rewards = [t.reward if t.status.value != "error" else 0.0 for t in trajectories]
    return sum(r >= SUCCESS_REWARD for r in rewards) / len(rewards), sum(rewards) / len(rewards)


class RLLoop:
    """Samples, scores and updates; see the module docstring. ``backend`` must sample from
    ``trainer.model`` (the same object), which is how updated weights reach the sampler."""

    def __init__(
        self,
        config: RLConfig,
        *,
        trainer: PolicyTrainer,
        backend: Any,
        registry: Registry,
        on_trajectory: Callable[[Trajectory], Any] | None = None,
        sandbox_backend: Any = None,
        artifacts_dir: str | Path | None = None,
    ) -> None:
        """``artifacts_dir``: where episodes write files; its parent holds the stored screenshots
        (``images/``), which a VLM's update reads back. Needed by screenshot observations."""
        if backend.model is not trainer.model:
            raise ValueError(
                "the backend must sample from the trainer's model object (pass model=trainer.model to it)"
            )
        self.config = config
        self.trainer = trainer
        self.backend = backend
        self.registry = registry
        self.on_trajectory = on_trajectory
        artifacts = str(artifacts_dir) if artifacts_dir is not None else None
        self.images_root = Path(artifacts).parent if artifacts else None
        """The dataset directory whose ``images/`` holds the episodes' screenshots (None: no artifacts)."""
        engine_cfg = config.engine_config()
        self.policy = ModelPolicy(backend, engine_cfg)
        self.train_engine = RolloutEngine(
            registry=registry,
            policy=self.policy,
            config=engine_cfg,
            env_kwargs=config.env_kwargs,
            sandbox_backend=sandbox_backend,
            artifacts_dir=artifacts,
        )
        self.eval_engine = eval_engine(
            config,
            self.policy,
            registry,
            config.eval,
            sandbox_backend=sandbox_backend,
            artifacts_dir=artifacts,
        )
        self.history: list[StepLog] = []
        self.next_step = 0
        self.base_lr = config.optim.lr

    # -- evaluation ------------------------------------------------------------------------------

    async def evaluate(self, on_trajectory: Callable[[Trajectory], Any] | None = None) -> EvalResult:
        """Held-out success on the same ``eval.num_tasks`` tasks every time."""
        return await evaluate(self.eval_engine, self.config.env, self.config.eval, on_trajectory)

    # -- training --------------------------------------------------------------------------------

    async def step(self) -> StepLog:
        """One RL step: rollouts on fresh tasks, advantages, PPO update."""
        cfg, k = self.config, self.next_step
        if cfg.warmup_steps:
            self.trainer.set_lr(self.base_lr * min(1.0, (k + 1) / cfg.warmup_steps))
        first = cfg.first_task + k * cfg.tasks_per_step
        requests = plan_episodes(
            cfg.env, num_tasks=cfg.tasks_per_step, group_size=cfg.group_size, seed=cfg.seed, first_task=first
        )
        t0 = time.perf_counter()
        trajs = await run_episodes(self.train_engine, requests, self.on_trajectory)
        raise_if_all_failed(trajs, f"RL step {k + 1}")
        sample_s = time.perf_counter() - t0
        success, mean = summarize(trajs)
        tokens = sum(sum(seg.loss_mask) for t in trajs for seg in t.segments)
        filtered = apply_filters(trajs, cfg.filters)
        part, masked = filtered.select(
            trajs
        )  # masked rollouts count in their group's baseline, train nothing
        trainable = [t for t, m in zip(part, masked, strict=True) if not m]
        rows: list[Row] = []
        metrics: dict[str, float] = {}
        t1 = time.perf_counter()
        if trainable:
            advantages = compute_token_advantages(part, cfg.estimator, **cfg.estimator_options)
            for traj, adv, mask in zip(part, advantages, masked, strict=True):
                if not mask:
                    rows.extend(trajectory_rows(traj, adv, images_root=self.images_root))
            if any(r.advantages.any() for r in rows):  # all-equal groups carry no signal: skip the step
                metrics = self.trainer.ppo_update(rows, seed=cfg.seed * 1_000_003 + k)
        log = StepLog(
            k,
            mean,
            success,
            len(trajs),
            len(trainable),
            len(rows),
            sample_s,
            time.perf_counter() - t1,
            metrics,
            tokens=tokens,
            stats={**step_group_stats(trajs), **tool_use_stats(trajs)},
            filters=filtered.counts,
            image_rows=sum(bool(r.images) for r in rows),
        )
        self.next_step = k + 1
        self.history.append(log)
        return log

    async def train(
        self,
        *,
        on_step: Callable[[StepLog], Any] | None = None,
        checkpoint_dir: Path | None = None,
        tokenizer: Any = None,
        final_eval_sink: Callable[[Trajectory], Any] | None = None,
    ) -> list[StepLog]:
        """Run the remaining RL steps, evaluating every ``eval.every`` steps (and after the last,
        whose held-out trajectories go to ``final_eval_sink``) and saving checkpoints every
        ``save_every`` steps (and at the end) under ``checkpoint_dir``. ``on_step`` runs before the
        step's checkpoint is written, so whatever it records is there when a resumed run starts."""
        cfg = self.config
        while self.next_step < cfg.steps:
            log = await self.step()
            done = self.next_step
            if done == cfg.steps:
                log.eval = await self.evaluate(final_eval_sink)
            elif cfg.eval.every and done % cfg.eval.every == 0:
                log.eval = await self.evaluate()
            if on_step is not None:
                on_step(log)
            if checkpoint_dir is not None and (
                (cfg.save_every and done % cfg.save_every == 0) or done == cfg.steps
            ):
                self.save(checkpoint_dir / f"step-{done:05d}", tokenizer=tokenizer)
        return self.history

    def save(self, directory: Path, *, tokenizer: Any = None) -> Path:
        """Write a checkpoint to ``directory`` atomically: it is written beside it under a
        ``.partial`` name and renamed, so a run killed while saving leaves no half checkpoint."""
        extra = {"next_step": self.next_step, "history": [_log_dict(h) for h in self.history]}
        directory = Path(directory)
        partial = directory.with_name(directory.name + ".partial")
        if partial.exists():
            shutil.rmtree(partial)
        self.trainer.save(partial, extra=extra, tokenizer=tokenizer)
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(partial, directory)
        return directory

    def resume(self, directory: Path) -> None:
        """Continue from a checkpoint written by :meth:`save` (weights, optimiser, RNG, step)."""
        extra = self.trainer.load(directory)
        self.next_step = int(extra.get("next_step", 0))


def _log_dict(log: StepLog) -> dict[str, Any]:
    out = {k: v for k, v in log.__dict__.items() if k != "eval"}
    if log.eval is not None:
        out["eval"] = dict(log.eval.__dict__)
    return out
