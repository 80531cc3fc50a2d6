"""Compose a verl training config from a ``toolgym train`` config file, and run verl's trainer.

The file and its overrides are composed as for the local trainer
(:mod:`toolgym.training.config_file`: OmegaConf dotlist overrides, ``${...}`` resolved, the same
errors). Its ``toolgym`` section is :class:`~.settings.ToolgymSettings`; its ``verl`` section is
merged over verl's own ``ppo_trainer`` defaults (composed with Hydra from the installed verl, so
every verl default stays verl's). Keys verl does not declare are refused, as verl's own command
line refuses them; prefix an override with ``+`` to add one on purpose
(``+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4``). A ``warm_start`` section is
the local trainer's and is refused here.

toolgym then sets what makes the run a toolgym run, whatever the file says:
``rollout.agent.default_agent_loop=toolgym_agent``, ``rollout.n=toolgym.group_size``,
``algorithm.adv_estimator=toolgym_<estimator>``, ``trainer.use_v1=true``,
``trainer.v1.trainer_mode=toolgym``, and the task files as ``data.train_files`` / ``val_files``.
With ``toolgym.tis_cap`` = C, it also sets verl's token-level truncated importance sampling (see
:func:`apply_tis`).
"""

from __future__ import annotations

import copy
import functools
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError

from toolgym.core.errors import ConfigError
from toolgym.training.config_file import VERL_EXAMPLES, compose_file

from . import cpu_config
from .advantage import LOCAL_ONLY
from .agent_loop import AGENT_NAME
from .cpu_rollout import check_replica_name
from .dataset import write_task_files
from .settings import ToolgymSettings, load_settings
from .trainer import TRAINER_MODE

EXAMPLES = VERL_EXAMPLES
"""The example configs shipped with the verl bridge (``alfworld_gigpo.yaml``, ...)."""


def verl_defaults() -> DictConfig:
    """verl's ``ppo_trainer`` config as its own entry point composes it (no overrides); a copy."""
    return copy.deepcopy(_verl_defaults())


@functools.cache
def _verl_defaults() -> DictConfig:
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return compose(config_name="ppo_trainer")
    finally:
        GlobalHydra.instance().clear()


def compose_config(
    path: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> tuple[DictConfig, ToolgymSettings]:
    """verl's full config for the file (and overrides), with the task files written.

    ``data_dir`` (default: ``toolgym.data_dir``, else ``<trainer.default_local_dir>/toolgym_tasks``)
    receives ``train.parquet`` and ``val.parquet``.
    """
    composed = compose_file(path, overrides, examples=EXAMPLES)
    file_cfg, added, merged = composed.config, composed.additions, composed.merged()
    if "warm_start" in merged:
        raise ConfigError(
            "the `warm_start:` section is read by the local trainer only (verl starts from "
            "verl.actor_rollout_ref.model.path); remove it or use `toolgym train --trainer local`"
        )
    settings = load_settings(merged.get("toolgym"))
    if settings.advantage.estimator in LOCAL_ONLY:
        raise ConfigError(
            f"toolgym.advantage.estimator {settings.advantage.estimator!r} is computed by the local trainer only "
            "(the verl bridge does not carry each trajectory's success yet); use `toolgym train --trainer local`"
        )
    agg = OmegaConf.select(merged, "verl.actor_rollout_ref.actor.loss_agg_mode")
    if agg == "episode-mean-token-mean":
        raise ConfigError(
            "loss_agg_mode 'episode-mean-token-mean' is toolgym's and the local trainer's only "
            "(verl's modes are token-mean, seq-mean-token-mean, seq-mean-token-sum); use `toolgym train --trainer local`"
        )
    cfg = verl_defaults()
    try:
        cfg = _dict(OmegaConf.merge(cfg, file_cfg.get("verl") or {}))
    except ConfigKeyError as exc:
        raise ConfigError(
            f"verl has no setting {exc.full_key!r} (from the `verl` section); check the spelling against verl's "
            "ppo_trainer config, or add it on purpose with a `+verl.<key>=<value>` override"
        ) from None
    if "verl" in added:
        with open_dict(cfg):
            cfg = _dict(OmegaConf.merge(cfg, added.verl))
    # the CPU path (trainer.device=cpu or rollout.name=toolgym_cpu) sets its keys before the checks see them
    if cpu_config.wants_cpu(cfg):
        cpu_config.apply_cpu(cfg)
    cpu_config.resolve_tiny(cfg)
    if cpu_config.wants_cpu(cfg):
        cpu_config.check_cpu_budget(str(cfg.actor_rollout_ref.model.path))
    rollout = cfg.actor_rollout_ref.rollout
    if OmegaConf.is_missing(rollout, "name"):
        raise ConfigError(
            "set verl.actor_rollout_ref.rollout.name to the inference engine of the rollout servers: "
            "vllm or sglang (or toolgym_cpu, with verl.trainer.device=cpu, to train on this machine's CPU)"
        )
    # an unknown rollout.name fails here, in one sentence, not in a Ray worker; registering first: when
    # toolgym's modules imported verl, verl's plugin loader found them half-imported and skipped their hooks
    from .plugin import register_all

    register_all()
    check_replica_name(str(rollout.name))
    # ARPO: one agent-loop call runs the task's whole group (initial rollouts and their forks)
    samples_per_call = 1 if settings.arpo is not None else settings.group_size
    if OmegaConf.select(file_cfg, "verl.actor_rollout_ref.rollout.n") not in (None, samples_per_call):
        raise ConfigError(
            f"verl.actor_rollout_ref.rollout.n ({rollout.n}) differs from what toolgym.group_size implies ({samples_per_call}); set only toolgym.group_size"
        )
    rollout.n = samples_per_call
    if settings.arpo is not None and not rollout.calculate_log_probs:
        raise ConfigError(
            "toolgym.arpo branches on the entropy of the sampled tokens' logprobs, but "
            "verl.actor_rollout_ref.rollout.calculate_log_probs is false, so ARPO would never branch; set it to true"
        )
    mode = str(rollout.get("logprobs_mode") or "processed_logprobs")
    if (
        rollout.name == "vllm"
        and mode != "processed_logprobs"
        and float(rollout.temperature) not in (0.0, 1.0)
    ):
        raise ConfigError(
            f"verl.actor_rollout_ref.rollout.logprobs_mode is {mode!r}: at temperature {rollout.temperature} vLLM would return "
            "logprobs of another distribution than the one it samples from; use processed_logprobs (verl's default)"
        )
    apply_tis(cfg, settings.tis_cap)
    if cfg.critic.enable:
        # toolgym's estimators are critic-free; verl would also resolve (and download) the critic's model here
        raise ConfigError(
            f"verl.critic.enable is true but {settings.advantage.verl_name} uses no critic; remove it (or set it to false)"
        )
    rollout.agent.default_agent_loop = AGENT_NAME
    cfg.algorithm.adv_estimator = settings.advantage.verl_name
    cfg.trainer.use_v1 = True
    cfg.trainer.v1.trainer_mode = TRAINER_MODE
    cfg.data.return_raw_chat = True
    directory = Path(
        data_dir or settings.data_dir or Path(str(cfg.trainer.default_local_dir)) / "toolgym_tasks"
    )
    train_file, val_file = write_task_files(settings, directory)
    for given in (settings.train_files, settings.val_files):
        if given is not None and not Path(given).exists():
            raise ConfigError(
                f"task file {given} does not exist; write one with `toolgym export verl DIR -o FILE`"
            )
    cfg.data.train_files = settings.train_files or str(train_file)
    cfg.data.val_files = settings.val_files or str(val_file)
    with open_dict(cfg):
        cfg.toolgym = OmegaConf.create(settings.model_dump(mode="json"))
    return cfg, settings


def apply_tis(cfg: DictConfig, cap: float | None) -> None:
    """Map ``toolgym.tis_cap`` onto verl's own rollout correction, which does what the local
    trainer's ``ppo.tis_cap`` does: the actor recomputes ``old_log_probs`` (decoupled mode,
    ``bypass_mode: false``), the advantage step computes per-token weights
    ``min(exp(old_log_probs − rollout_log_probs), C)`` (``rollout_is: token``,
    ``rollout_is_threshold: C``) and the actor multiplies each token's policy loss by them, logging
    ``rollout_corr/rollout_is_mean``, ``_max`` and the fraction above the cap. verl skips all of it
    when the servers return no logprobs, so ``rollout.calculate_log_probs=false`` is refused here.
    None leaves verl's settings as the file gave them (verl's default: no weights)."""
    if cap is None:
        return
    corr = cfg.algorithm.rollout_correction
    given = OmegaConf.select(cfg, "algorithm.rollout_correction.rollout_is")
    if given not in (None, "token") or (given == "token" and float(corr.rollout_is_threshold) != cap):
        raise ConfigError(
            f"toolgym.tis_cap={cap} and verl.algorithm.rollout_correction (rollout_is={given}, "
            f"rollout_is_threshold={corr.rollout_is_threshold}) disagree; set only one of them"
        )
    if corr.get("bypass_mode", False):
        raise ConfigError(
            "toolgym.tis_cap needs the trainer's own old logprobs, but "
            "verl.algorithm.rollout_correction.bypass_mode is true; set it to false"
        )
    if not cfg.actor_rollout_ref.rollout.calculate_log_probs:
        raise ConfigError(
            "toolgym.tis_cap weighs tokens by π_train/π_rollout, but verl.actor_rollout_ref.rollout."
            "calculate_log_probs is false, so there are no rollout logprobs and verl would skip it; set it to true"
        )
    corr.rollout_is = "token"
    corr.rollout_is_threshold = float(cap)
    corr.bypass_mode = False


def check_config(cfg: DictConfig) -> None:
    """verl's own checks of a composed config (batch arithmetic, micro-batch settings); CPU-safe."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with warnings.catch_warnings():  # "Disabled critic as adv_estimator != gae": expected here
            warnings.simplefilter("ignore", UserWarning)
            validate_config(
                config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
            )
    except (AssertionError, ValueError) as exc:
        raise ConfigError(f"verl rejects the config: {exc}") from None


def check_environment(settings: ToolgymSettings, registry: Any = None) -> None:
    """The environment exists and accepts its options for both splits (it is built, not reset); a
    sandbox backend that isolates nothing (``memory``) only with ``toolgym.unsafe_in_process_sandbox``."""
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import require_isolation

    registry = registry or get_registry()
    if not settings.unsafe_in_process_sandbox:
        require_isolation(registry, settings.sandbox_backend, allow="toolgym.unsafe_in_process_sandbox=true")
    spec = registry.env(settings.env)
    for name, split in (("train", settings.train), ("val", settings.val)):
        try:
            env = spec.make(**{**settings.env_kwargs, **split.env_kwargs})
        except Exception as exc:
            raise ConfigError(
                f"environment {settings.env!r} rejects the {name} options: {type(exc).__name__}: {exc}"
            ) from None
        del env


def run_training(cfg: DictConfig) -> None:
    """Run verl's trainer (V1, trainer mode ``toolgym``) on a composed config; needs GPUs and
    vLLM or SGLang where the rollout servers run, or ``trainer.device=cpu`` (:func:`run_on_cpu`)."""
    from .plugin import register_all

    failures = register_all()
    if failures:
        details = "; ".join(f"{k}: {v}" for k, v in failures.items())
        raise ConfigError(f"toolgym could not register itself with verl ({details}); install toolgym[verl]")
    engine = str(cfg.actor_rollout_ref.rollout.name)
    if engine in ("vllm", "sglang") and _missing(engine):
        raise ConfigError(
            f"rollout.name is {engine!r} but {engine} is not installed here; install it on the GPU machine "
            f"(pip install {engine}), or train on this machine's CPU with the override verl.trainer.device=cpu"
        )
    if cpu_config.wants_cpu(cfg):
        run_on_cpu(cfg)
        return
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    check_config(cfg)
    run_ppo(cfg, task_runner_class=TaskRunnerV1)


def run_on_cpu(cfg: DictConfig, extra_env: dict[str, str] | None = None) -> None:
    """verl's V1 trainer on the CPU platform (a composed config that :func:`cpu_config.wants_cpu`),
    starting a local Ray with :func:`cpu_config.ray_init_kwargs` unless one is running (then its
    workers must already have ``VERL_PLATFORM=cpu``)."""
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    from .cpu_platform import use_cpu_platform

    use_cpu_platform()
    check_config(cfg)
    started = not ray.is_initialized()
    if started:
        ray.init(**cpu_config.ray_init_kwargs(extra_env))
    before = set(ray.util.placement_group_table())
    try:
        run_ppo(cfg, task_runner_class=TaskRunnerV1)
    finally:
        if started:
            ray.shutdown()
        else:  # verl names its placement groups the same in every run: free this run's for the next one
            _remove_placement_groups(set(ray.util.placement_group_table()) - before)


def _remove_placement_groups(ids: set[str]) -> None:
    import ray
    from ray.util.placement_group import PlacementGroup

    for pg_id in ids:
        ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))


def _dict(cfg: Any) -> DictConfig:
    assert isinstance(cfg, DictConfig)
    return cfg


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def to_yaml(cfg: DictConfig) -> str:
    """The composed config as YAML (interpolations kept), for ``--dry-run``."""
    return OmegaConf.to_yaml(cfg)


def summary(cfg: DictConfig, settings: ToolgymSettings) -> dict[str, Any]:
    """The settings that matter at a glance, for the command line."""
    rollout = cfg.actor_rollout_ref.rollout
    return {
        "env": settings.env,
        "estimator": cfg.algorithm.adv_estimator,
        "options": dict(settings.advantage.options),
        "layout": settings.layout,
        "group_size": rollout.n,
        "model": cfg.actor_rollout_ref.model.path,
        "rollout": rollout.name,
        "train_batch_size": cfg.data.train_batch_size,
        "prompt/response length": f"{cfg.data.max_prompt_length}/{cfg.data.max_response_length}",
        "train_files": cfg.data.train_files,
        "val_files": cfg.data.val_files,
    }
