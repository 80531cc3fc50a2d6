"""``toolgym train --trainer local``: the same config file as the verl trainer, run in one process.

The file and its overrides are composed exactly as for verl (:mod:`toolgym.training.config_file`:
OmegaConf dotlist overrides, ``${...}`` resolved, the same errors), and the ``toolgym`` section is
validated as for verl (``ToolgymSettings``). From the ``verl`` section the local trainer reads only
these keys (the rest are verl's business and are ignored):

| verl key | local setting |
|---|---|
| ``actor_rollout_ref.model.path`` | model: ``tiny``, ``tiny-<family>`` (docs/model_families.md), ``tiny-vl`` or a local Hugging Face directory (a vision-language one with its ``preprocessor_config.json``) |
| ``actor_rollout_ref.actor.optim.lr`` | AdamW learning rate |
| ``actor_rollout_ref.actor.optim.weight_decay`` / ``betas`` | AdamW's decoupled weight decay (default 0.0 here, 0.01 in verl) and betas |
| ``actor_rollout_ref.actor.clip_ratio_low`` / ``_high`` (or ``clip_ratio``) | PPO clip bounds |
| ``actor_rollout_ref.actor.loss_agg_mode`` | ``token-mean``, ``seq-mean-token-mean`` or (local only) ``episode-mean-token-mean`` |
| ``actor_rollout_ref.actor.use_kl_loss``, ``kl_loss_coef``, ``kl_loss_type`` | KL to the starting weights (``low_var_kl`` → k3, ``kl`` → k1) |
| ``actor_rollout_ref.actor.ppo_mini_batch_size`` | tasks per optimiser step (× ``group_size`` rows, as in verl) |
| ``actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu`` / ``ppo_epochs`` | rows per forward pass / passes over a batch |
| ``actor_rollout_ref.actor.grad_clip`` | global gradient-norm clip |
| ``actor_rollout_ref.actor.freeze_vision_tower`` | a vision-language model's tower keeps its weights (the text model trains) |
| ``actor_rollout_ref.rollout.temperature`` | sampling temperature (logprobs recomputed at it) |
| ``actor_rollout_ref.rollout.val_kwargs.temperature`` / ``do_sample`` | held-out sampling (seeded, so repeatable); greedy without ``do_sample`` |
| ``data.train_batch_size`` | tasks per RL step |
| ``trainer.total_training_steps`` | RL steps |
| ``trainer.test_freq`` / ``save_freq`` / ``default_local_dir`` / ``device`` | evaluation and checkpoint cadence, output directory, ``cpu`` or ``cuda`` |
| ``trainer.val_before_train`` | the held-out evaluation before the first RL step (default true, as in verl) |
| ``actor_rollout_ref.actor.optim.lr_warmup_steps`` | linear learning-rate warm-up (optimiser steps) |
| ``actor_rollout_ref.rollout.max_num_seqs`` | rows the sampler decodes together |
| ``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` / ``target_modules`` / ``exclude_modules`` | LoRA adapter (``lora.py``; rank 0: full fine-tuning), verl's defaults (16, ``all-linear``) |
| ``trainer.logger`` / ``project_name`` / ``experiment_name`` | experiment tracking through verl's own ``Tracking`` (``tensorboard``, ``wandb``, ``file``, ...; ``console`` is this trainer's progress line) |

``toolgym.tis_cap`` (truncated importance sampling, off by default) becomes ``ppo.tis_cap``, as it
becomes verl's ``algorithm.rollout_correction`` for the verl trainer.

``model.path`` may also be ``warmstart:NAME`` (``alfworld``, ``webshop``): the warm start that
``toolgym warmstart --env NAME`` builds (:mod:`.warmstart`), built here first when it is not cached.
An optional ``warm_start:`` section (``recipe: NAME`` plus recipe fields) changes that recipe.

A vision-language model (``tiny-vl``, or a Qwen2-VL-family directory with its image processor) is
loaded as one: the sampler renders each screenshot as the processor's image tokens, the episodes'
screenshots are kept in ``trajectories/images/``, and every update's rows carry them, so the loss
runs over the same pixels the sampler saw and the vision tower trains with the text model;
checkpoints hold the image processor and reload as a VLM (config ``miniwob_screenshot_grpo``).

Bad input fails before anything is written, with one line: an unknown top-level section, an
unknown key in ``toolgym:`` or ``warm_start:``, a ``verl.*`` override naming a key that neither
the file has nor this trainer reads (prefix it with ``+`` to add it anyway), an environment whose
tools need a sandbox when no sandbox backend works, a model directory without a tokenizer, a text
model on screenshot-only observations, a VLM directory without its image processor, a LoRA adapter
on a VLM. Resuming from a checkpoint of another model type (a VLM's with a text model, or the
reverse) fails in one line too.

A run writes under ``trainer.default_local_dir``: ``metrics.jsonl`` (one record per RL step,
and the held-out evaluation before training as step 0), ``trajectories/`` (every rollout),
``step-NNNNN/`` checkpoints (written atomically). Started again with the same directory, it
resumes from the newest checkpoint and drops the metrics of later steps, so a killed run ends
with the same results as an uninterrupted one. With no checkpoint to resume from, the earlier
run's ``metrics.jsonl`` is kept as ``metrics-<its last write>.jsonl`` (said on the console) and
the run starts a new one.

``trainer.logger`` (a name or a list, as for verl) sends every step's record and every held-out
evaluation to verl's ``verl.utils.tracking.Tracking`` as well, under ``trainer.project_name``
(default ``toolgym_local``) and ``trainer.experiment_name`` (default: the output directory's
name): TensorBoard under ``$TENSORBOARD_DIR`` or verl's ``tensorboard_log/PROJECT/EXPERIMENT``,
W&B (``WANDB_MODE=offline`` without an account), verl's ``file`` logger, and the rest verl
supports. ``console`` needs none of it (the progress lines are always printed); any other name
needs verl (``pip install toolgym[verl]``), imported only then.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from pydantic import ValidationError

from toolgym.core.errors import ConfigError
from toolgym.core.llm.resolve import TINY
from toolgym.training.config_file import LOCAL_EXAMPLES as EXAMPLES
from toolgym.training.config_file import compose_file
from toolgym.training.local.config import EvalConfig, LoraConfig, OptimConfig, PPOConfig, RLConfig

KL_TYPES = {"low_var_kl": "k3", "k3": "k3", "kl": "k1", "k1": "k1"}
LOCAL_VERL_KEYS = frozenset(
    {
        "actor_rollout_ref.model.path",
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.optim.weight_decay",
        "actor_rollout_ref.actor.optim.betas",
        "actor_rollout_ref.actor.optim.lr_warmup_steps",
        "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.clip_ratio_low",
        "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.loss_agg_mode",
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.actor.kl_loss_type",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.ppo_epochs",
        "actor_rollout_ref.actor.grad_clip",
        "actor_rollout_ref.actor.freeze_vision_tower",
        "actor_rollout_ref.rollout.temperature",
        "actor_rollout_ref.rollout.max_num_seqs",
        "actor_rollout_ref.rollout.val_kwargs.temperature",
        "actor_rollout_ref.rollout.val_kwargs.do_sample",
        "data.train_batch_size",
        "trainer.total_training_steps",
        "trainer.test_freq",
        "trainer.val_before_train",
        "trainer.save_freq",
        "trainer.default_local_dir",
        "trainer.device",
        "actor_rollout_ref.model.lora_rank",
        "actor_rollout_ref.model.lora_alpha",
        "actor_rollout_ref.model.target_modules",
        "actor_rollout_ref.model.exclude_modules",
        "trainer.logger",
        "trainer.project_name",
        "trainer.experiment_name",
    }
)
"""The ``verl.*`` keys this trainer reads (the table above)."""


def load_config(name: str, overrides: list[str]) -> dict[str, Any]:
    """The file as a plain dict, composed as for verl (:func:`~toolgym.training.config_file.compose_file`:
    OmegaConf dotlist overrides, ``${...}`` resolved), after this trainer's own check: a plain
    ``verl.*`` override must name a key the file has or this trainer reads (``+verl.KEY=VALUE`` adds one)."""
    composed = compose_file(name, overrides, examples=EXAMPLES)
    for item in overrides:
        key = item.partition("=")[0]
        if item.startswith("+") or not key.startswith("verl."):
            continue
        dotted = key.removeprefix("verl.")
        if (
            dotted not in LOCAL_VERL_KEYS
            and OmegaConf.select(composed.written, key, throw_on_resolution_failure=False) is None
        ):
            close = difflib.get_close_matches(dotted, sorted(LOCAL_VERL_KEYS), n=1)
            hint = (
                f" (did you mean verl.{close[0]}?)"
                if close
                else " (write +verl.KEY=VALUE to add a key for verl anyway)"
            )
            raise ConfigError(
                f"unknown key verl.{dotted}: neither the file has it nor does the local trainer read it{hint}"
            )
    return composed.to_dict()


def _get(tree: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def build(data: dict[str, Any]) -> tuple[RLConfig, dict[str, Any]]:
    """(RL settings, run settings: model, device, output directory, cadences)."""
    try:
        return _build(data)
    except (
        ValidationError
    ) as e:  # a value of the verl section the local settings refuse: one line, no traceback
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or e.title
        raise ConfigError(
            f"local trainer setting {where}: {first['msg']} (got {first.get('input')!r})"
        ) from None


def _build(data: dict[str, Any]) -> tuple[RLConfig, dict[str, Any]]:
    tg = toolgym_settings(data["toolgym"])
    for name in ("train_files", "val_files"):
        if getattr(tg, name, None):
            raise ConfigError(
                f"toolgym.{name} (task files) is read by the verl trainer only; the local trainer samples "
                "the toolgym.train / toolgym.val ranges: remove it or use --trainer verl"
            )
    verl = data.get("verl") or {}
    actor = _get(verl, "actor_rollout_ref.actor", {}) or {}
    clip = actor.get("clip_ratio", 0.2)
    betas = _get(actor, "optim.betas", (0.9, 0.999))
    if not isinstance(betas, (list, tuple)) or len(betas) != 2:
        raise ConfigError(
            f"actor_rollout_ref.actor.optim.betas must be two numbers, like [0.9, 0.999] (got {betas!r})"
        )
    kl_type = str(actor.get("kl_loss_type", "low_var_kl"))
    if kl_type not in KL_TYPES:
        raise ConfigError(
            f"kl_loss_type {kl_type!r} is not supported by the local trainer; use one of {', '.join(KL_TYPES)}"
        )
    ppo = PPOConfig(
        clip_low=actor.get("clip_ratio_low", clip),
        clip_high=actor.get("clip_ratio_high", clip),
        loss_agg=actor.get("loss_agg_mode", "token-mean"),
        kl_coef=float(actor.get("kl_loss_coef", 0.0)) if actor.get("use_kl_loss", False) else 0.0,
        kl_estimator=KL_TYPES[kl_type],  # type: ignore[arg-type]
        # verl counts mini-batches in prompts (tasks) and multiplies by rollout.n; rows here
        epochs=int(actor.get("ppo_epochs", 1)),
        mini_batch_size=int(actor.get("ppo_mini_batch_size", 8)) * tg.group_size,
        micro_batch_size=int(actor.get("ppo_micro_batch_size_per_gpu") or 16),
        temperature=float(_get(verl, "actor_rollout_ref.rollout.temperature", 1.0)),
        tis_cap=tg.tis_cap,
    )
    trainer = verl.get("trainer") or {}
    engine = dict(tg.engine)
    group_size = tg.group_size
    if tg.arpo is not None:  # the engine branches: N rollouts start, forks fill the group up to M
        engine["arpo"] = tg.arpo.engine_arpo().model_dump()
        group_size = tg.arpo.initial_rollouts
    rl = RLConfig(
        env=tg.env,
        env_kwargs=tg.env_kwargs,
        estimator=tg.advantage.estimator,
        estimator_options=tg.advantage.options,
        group_size=group_size,
        tasks_per_step=int(_get(verl, "data.train_batch_size", 16)),
        steps=int(trainer.get("total_training_steps") or 10),
        seed=tg.train.seed,
        first_task=tg.train.first_task,
        engine=engine,
        optim=OptimConfig(
            lr=float(_get(actor, "optim.lr", 1e-5)),
            weight_decay=float(_get(actor, "optim.weight_decay", 0.0)),
            beta1=float(betas[0]),
            beta2=float(betas[1]),
            max_grad_norm=float(actor.get("grad_clip", 1.0)),
        ),
        ppo=ppo,
        eval=EvalConfig(
            num_tasks=tg.val.num_tasks,
            first_task=tg.val.first_task,
            seed=tg.val.seed,
            env_kwargs=tg.val.env_kwargs,
            every=max(0, int(trainer.get("test_freq", 5) or 0)),
            temperature=_val_temperature(verl),
        ),
        save_every=max(0, int(trainer.get("save_freq", 0) or 0)),
        warmup_steps=int(_get(actor, "optim.lr_warmup_steps", 0) or 0),
        max_batch_size=int(_get(verl, "actor_rollout_ref.rollout.max_num_seqs", 128) or 128),
        filters=tg.filters,
        lora=lora_config(verl),
        freeze_vision_tower=bool(actor.get("freeze_vision_tower", False)),
    )
    if rl.eval.every < 0:
        raise ConfigError("verl.trainer.test_freq must be 0 or more")
    out = str(trainer.get("default_local_dir") or "checkpoints/toolgym_local")
    run = {
        "val_before_train": bool(trainer.get("val_before_train", True)),
        "model": str(_get(verl, "actor_rollout_ref.model.path", "tiny")),
        "device": str(trainer.get("device", "cpu")),
        "out": out,
        "sandbox_backend": tg.sandbox_backend,
        "unsafe_in_process_sandbox": tg.unsafe_in_process_sandbox,
        "warm_start": warm_start_section(data.get("warm_start")),
        "tracking": tracking_settings(trainer, out),
    }
    return rl, run


TRACKING_PACKAGES = {
    "wandb": "wandb",
    "tracking": "wandb",
    "vemlp_wandb": "volcengine_ml_platform",
    "tensorboard": "tensorboard",
    "mlflow": "mlflow",
    "swanlab": "swanlab",
    "clearml": "clearml",
    "trackio": "trackio",
    "rl_insight": "rl_insight",
}
"""The package each of verl's tracking backends imports when it starts (``file`` needs none)."""


def tracking_settings(trainer: dict[str, Any], out: str) -> dict[str, Any]:
    """``trainer.logger`` / ``project_name`` / ``experiment_name``: the backends verl's ``Tracking``
    starts (``console`` is left out: the trainer prints its own progress lines), checked here so that
    a bad name or a missing package fails before anything is written."""
    import importlib.util

    raw = trainer.get("logger")
    raw = ["console"] if raw is None else raw
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f"verl.trainer.logger must be a backend name or a list of them, such as [console, tensorboard] (got {raw!r})"
        )
    backends = [n for n in dict.fromkeys(names) if n != "console"]
    if backends:
        supported = [*verl_tracking().supported_backend, "tracking"]
        unknown = [n for n in backends if n not in supported]
        if unknown:
            raise ConfigError(
                f"unknown backend {unknown[0]!r} in verl.trainer.logger; verl's Tracking supports "
                f"{', '.join(n for n in supported if n != 'tracking')}"
            )
        for name in backends:
            package = TRACKING_PACKAGES.get(name)
            if package and importlib.util.find_spec(package) is None:
                raise ConfigError(
                    f"the {name} backend in verl.trainer.logger needs the {package} package: pip install {package}"
                )
    return {
        "backends": backends,
        "project_name": str(trainer.get("project_name") or "toolgym_local"),
        "experiment_name": str(trainer.get("experiment_name") or Path(out).name or "run"),
    }


def verl_tracking() -> Any:
    """verl's ``verl.utils.tracking.Tracking`` class, imported quietly (verl warns about every engine
    it lacks on import), or a one-line :class:`ConfigError` when verl is not installed."""
    import importlib.util
    import logging
    import warnings

    if importlib.util.find_spec("verl") is None:
        raise ConfigError(
            "verl.trainer.logger names backends other than console, which log through verl's Tracking, "
            "but verl is not installed: pip install toolgym[verl]"
        )
    was = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from verl.utils.tracking import Tracking
    finally:
        logging.disable(was)
    return Tracking


def open_tracker(tracking: dict[str, Any], data: dict[str, Any]) -> Any:
    """verl's ``Tracking`` for the backends of ``tracking`` (None when there are none), given the
    config file as verl's own trainer gives it its config (the ``verl`` section, plus ``toolgym``)."""
    if not tracking["backends"]:
        return None
    config = {**(data.get("verl") or {}), "toolgym": data.get("toolgym")}
    config["trainer"] = dict(config.get("trainer") or {})
    try:
        return verl_tracking()(
            project_name=tracking["project_name"],
            experiment_name=tracking["experiment_name"],
            default_backend=tracking["backends"],
            config=config,
        )
    except ConfigError:
        raise
    except Exception as exc:
        why = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"verl.trainer.logger: starting {', '.join(tracking['backends'])} failed ({type(exc).__name__}: {why}); "
            "W&B without an account needs WANDB_MODE=offline"
        ) from None


def lora_config(verl: dict[str, Any]) -> LoraConfig:
    """verl's ``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` / ``target_modules`` / ``exclude_modules``, verl's defaults."""
    model = _get(verl, "actor_rollout_ref.model", {}) or {}
    if model.get("lora_adapter_path") is not None:
        raise ConfigError(
            "actor_rollout_ref.model.lora_adapter_path is read by the verl trainer only; the local trainer "
            "starts a fresh adapter (or resumes its own checkpoint): remove it or use --trainer verl"
        )
    return LoraConfig(
        rank=int(model.get("lora_rank", 0) or 0),
        alpha=float(model.get("lora_alpha", 16)),
        target_modules=model.get("target_modules") or "all-linear",
        exclude_modules=model.get("exclude_modules"),
    )


def _val_temperature(verl: dict[str, Any]) -> float:
    """verl's ``rollout.val_kwargs``: sampling at ``temperature`` when ``do_sample``, else greedy."""
    kwargs = _get(verl, "actor_rollout_ref.rollout.val_kwargs", {}) or {}
    return float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample", False) else 0.0


def toolgym_settings(section: Any) -> Any:
    """The ``toolgym`` section, validated as for verl (the same one-line errors)."""
    from toolgym.training.verl.settings import load_settings

    return load_settings(section)


def warm_start_section(section: Any) -> dict[str, Any] | None:
    """The optional ``warm_start:`` section: ``recipe`` (a shipped recipe's name) and recipe fields."""
    if section is None:
        return None
    if not isinstance(section, dict) or "recipe" not in section:
        raise ConfigError(
            "the `warm_start:` section needs `recipe: NAME` (alfworld, webshop or math_python) and optional recipe fields"
        )
    from toolgym.training.warmstart.recipe import recipe

    changes = {k: v for k, v in section.items() if k != "recipe"}
    recipe(str(section["recipe"]), **changes)  # unknown fields fail here, with the list of known ones
    return dict(section)


def run(config: str, overrides: list[str], *, dry_run: bool = False) -> None:
    """Entry point of ``toolgym train --trainer local``: check everything, then train."""
    from rich.console import Console

    data = load_config(config, overrides)
    rl, settings = build(data)
    console = Console(stderr=True, soft_wrap=True)  # one line per record, also in log files
    arpo = rl.engine.get("arpo") or {}
    lora = f" + LoRA adapter (rank {rl.lora.rank}, alpha {rl.lora.alpha:g})" if rl.lora.enabled else ""
    samples = (
        f"{rl.group_size} initial samples (ARPO: up to {arpo['budget']})"
        if arpo.get("enabled")
        else f"{rl.group_size} samples"
    )
    console.print(
        f"[bold]local trainer[/]: {rl.estimator} on {rl.env}, {rl.steps} steps × {rl.tasks_per_step} tasks × {samples}, "
        f"model {settings['model']}{lora} on {settings['device']}, output {settings['out']}"
    )
    if dry_run:
        print(json.dumps({"rl": rl.model_dump(), "run": settings}, indent=2))
        return
    check_environment(
        rl, settings["sandbox_backend"], unsafe_in_process=settings.get("unsafe_in_process_sandbox", False)
    )
    # fail before anything is written
    path = model_dir(settings["model"], settings.get("warm_start"), console)
    check_modality(rl, settings["model"], vlm=vision_processor(path) is not None)
    settings["model_dir"] = str(path)
    latest = latest_checkpoint(Path(settings["out"]))
    settings["resume"] = str(latest) if latest else None
    tracking = settings["tracking"]
    tracker = open_tracker(tracking, data)
    if tracker is not None:
        console.print(
            f"tracking: {', '.join(tracking['backends'])} through verl's Tracking, "
            f"project {tracking['project_name']}, experiment {tracking['experiment_name']}"
        )
    failed = True
    try:
        Path(settings["out"]).mkdir(parents=True, exist_ok=True)
        asyncio.run(_train(rl, settings, console, tracker))
        failed = False
    finally:
        if tracker is not None:
            tracker.finish(exit_code=int(failed))


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint under ``out`` (``step-NNNNN`` with its trainer state)."""
    done = [p for p in out.glob("step-[0-9][0-9][0-9][0-9][0-9]") if (p / "trainer_state.pt").is_file()]
    return max(done, key=lambda p: p.name) if done else None


def check_environment(rl: RLConfig, sandbox_backend: str, *, unsafe_in_process: bool = False) -> None:
    """The environment exists, accepts its options, and has the sandboxes its tools need; a
    backend that isolates nothing (``memory``) only with ``toolgym.unsafe_in_process_sandbox``."""
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import require_isolation

    registry = get_registry()
    if not unsafe_in_process:
        require_isolation(registry, sandbox_backend, allow="toolgym.unsafe_in_process_sandbox=true")
    spec = registry.env(rl.env)
    kinds: set[str] = set()
    for name, extra in (("train", {}), ("held-out", rl.eval.env_kwargs)):
        try:
            env = spec.make(**{**rl.env_kwargs, **extra})
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"environment {rl.env!r} rejects its {name} options: {type(exc).__name__}: {exc}"
            ) from None
        tools = [
            *env.tools,
            *(registry.tool(n) for n in getattr(env, "tool_names", ()) or ()),
        ]  # named tools bind at reset
        kinds |= {t.sandbox for t in tools if t.sandbox}
    if not kinds:
        return
    needs = ", ".join(sorted(kinds))
    if sandbox_backend == "none":
        raise ConfigError(
            f"environment {rl.env!r} runs its tools in {needs} sandboxes but toolgym.sandbox_backend is none; "
            "set it to auto, docker or local"
        )
    specs = registry.sandbox_backends
    if sandbox_backend != "auto" and sandbox_backend not in specs:
        raise ConfigError(
            f"unknown sandbox backend {sandbox_backend!r}; use auto, none or one of {', '.join(sorted(specs))}"
        )
    candidates = (
        [s for s in specs.values() if s.isolates] if sandbox_backend == "auto" else [specs[sandbox_backend]]
    )
    # a backend that does not isolate says it is unavailable only to stay out of `auto`: named (and let through above), it works
    if not any(s.available() or not s.isolates for s in candidates):
        which = (
            "no sandbox backend works on this host"
            if sandbox_backend == "auto"
            else f"the {sandbox_backend} sandbox backend does not work on this host"
        )
        raise ConfigError(
            f"environment {rl.env!r} runs its tools in {needs} sandboxes but {which}: "
            "start Docker (scripts/ensure-docker.sh) or install bubblewrap"
        )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")

SCREENSHOT_OBSERVATIONS = ("screenshot",)
"""``observation=`` values that show a model nothing but pixels (``both`` keeps the text, which a
text model can still read; its image parts become placeholders, with the one warning the engine gives)."""


def vision_processor(model_path: Path) -> Any:
    """The image processor of a vision-language model directory, or None for a text model; a
    directory with a vision config but no ``preprocessor_config.json`` fails in one line."""
    from toolgym.core.tokens.vision import load_image_processor

    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if "vision_config" not in config:
        return None
    processor = load_image_processor(model_path)
    if processor is None:
        raise ConfigError(
            f"model {model_path} is a vision-language model but has no image processor (preprocessor_config.json); "
            "save it beside the weights (image_processor.save_pretrained(DIR))"
        )
    return processor


def check_modality(rl: RLConfig, model: str | Path, *, vlm: bool) -> None:
    """A text model is not trained on screenshot-only observations (it would see placeholders only)."""
    shown = str({**rl.env_kwargs, **rl.eval.env_kwargs}.get("observation", "axtree"))
    if not vlm and shown in SCREENSHOT_OBSERVATIONS:
        raise ConfigError(
            f"environment {rl.env!r} shows only screenshots (observation={shown}) but model {str(model)!r} is "
            "text-only; use a vision-language model (actor_rollout_ref.model.path=tiny-vl) or observation=axtree|both"
        )


def model_dir(name: str, warm_start: dict[str, Any] | None = None, console: Any = None) -> Path:
    """The model directory a ``model.path`` names (tiny models and warm starts are built, cached)."""
    if name in TINY:
        from toolgym.core.llm.local.tiny import ensure_tiny_model

        return ensure_tiny_model(TINY[name])  # type: ignore[arg-type]
    if name == "warmstart" or name.startswith("warmstart:"):
        return _warm_start(name.partition(":")[2], warm_start, console)
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"model {name!r} is not a local Hugging Face directory; the local trainer downloads nothing: "
            "give a directory (e.g. OUT/warm-start from `toolgym demo`), `tiny`, `tiny-<family>` or `warmstart:alfworld`"
        )
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError(
            f"model directory {path} has no tokenizer ({' / '.join(TOKENIZER_FILES)}); "
            "save the tokenizer beside the weights (tokenizer.save_pretrained(DIR)) or give a directory that has one"
        )
    return path


DEMO_WARM_START = "keychain"
"""``warmstart:keychain``: the demo's warm start (its scripted data and SFT, no RL), built once."""


def demo_warm_start(console: Any = None) -> Path:
    """The demo's warm-started model (``toolgym demo --rl-steps 0``: its scripted data and SFT, seed
    0), cached under ``$TOOLGYM_CACHE/warmstart/keychain-demo``: what the keychain configs start
    from. Built by the demo's own command in a process of its own, once across processes."""
    import fcntl
    import subprocess
    import sys

    from toolgym.core.llm.local.tiny import cache_root

    out = cache_root() / "warmstart" / "keychain-demo"
    model = out / "warm-start"
    if (out / "READY").exists():
        return model
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "keychain-demo.lock", "w") as lock:  # one build when several processes ask at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "READY").exists():
            if console is not None:
                console.print(
                    f"building the keychain warm start (the demo's SFT phase, about 15 s, once; cached in {out})"
                )
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "toolgym",
                    "demo",
                    "--out",
                    str(out),
                    "--seed",
                    "0",
                    "--rl-steps",
                    "0",
                ],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if done.returncode != 0 or not (model / "config.json").is_file():
                raise ConfigError(
                    f"building the keychain warm start failed (exit {done.returncode}): "
                    f"{(done.stderr or done.stdout).strip().splitlines()[-1:] or ['no output']}; "
                    "run `toolgym demo --rl-steps 0` to see why"
                )
            (out / "READY").write_text("1\n")
    return model


def _warm_start(name: str, section: dict[str, Any] | None, console: Any) -> Path:
    from toolgym.training.warmstart import build as warmstart

    if name == DEMO_WARM_START and not section:
        return demo_warm_start(console)
    section = dict(section or {})
    recipe_name = str(section.pop("recipe", name or ""))
    if not recipe_name:
        raise ConfigError(
            "model.path `warmstart` needs a recipe: write warmstart:alfworld (webshop, math_python), or add a warm_start: section"
        )
    if name and name != recipe_name:
        raise ConfigError(
            f"model.path names warm start {name!r} but the warm_start section's recipe is {recipe_name!r}; make them agree"
        )
    r = warmstart.recipe(recipe_name, **section)
    if warmstart.find_built(r) is None and console is not None:
        console.print(f"building the {recipe_name} warm start (once; cached in {warmstart.cache_dir(r)})")

    def note(phase: str, done: int, total: int, text: str) -> None:
        if console is not None and (done == total or done % max(1, total // 4) == 0) and phase != "data":
            console.print(f"  warm start {phase}: {done}/{total} {text}")

    return warmstart.build(r, progress=note)


def open_loop(
    rl: RLConfig,
    model_path: Path,
    *,
    device: str = "cpu",
    sandbox_backend: str = "none",
    on_trajectory: Any = None,
    artifacts_dir: str | Path | None = None,
) -> tuple[Any, Any, Any]:
    """(RL loop, tokenizer, closer) for ``rl`` with the model in ``model_path``: the KV-cached
    batched sampler shares the trainer's model and stops at the end of an action; ``closer`` is
    an async function that stops the sampler and the sandboxes.

    A vision-language model (a directory with a vision config and its ``preprocessor_config.json``,
    e.g. ``tiny-vl``) is loaded with its image processor, which the sampler renders screenshots with
    and the trainer feeds the same pixels through; ``artifacts_dir`` (whose parent keeps the
    screenshots) is then needed by screenshot observations."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import lazy_sandbox_backend
    from toolgym.training.local.loop import RLLoop
    from toolgym.training.local.lora import attach_lora
    from toolgym.training.local.stops import StopAtBackend, action_stops
    from toolgym.training.local.trainer import PolicyTrainer

    device = device if device != "cuda" or torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    processor = vision_processor(model_path)  # a VLM's image processor; None for a text model
    check_modality(rl, model_path, vlm=processor is not None)
    if processor is not None:
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_pretrained(str(model_path)).float().to(device).eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(model_path)).float().to(device).eval()
    if rl.freeze_vision_tower:
        from toolgym.core.llm.local.vlm import freeze_vision_tower

        freeze_vision_tower(
            model
        )  # before the optimiser is made: it then holds the text model's weights only
    adapter = (
        attach_lora(model, rl.lora, seed=rl.seed) if rl.lora.enabled else None
    )  # in place: the sampler runs it too
    registry = get_registry()
    backend = TransformersBackend(
        model, tokenizer=tokenizer, device=device, max_batch_size=rl.max_batch_size, image_processor=processor
    )
    stops = action_stops(registry, rl.env, rl.env_kwargs)
    sampler = StopAtBackend(backend, stops) if stops else backend
    trainer = PolicyTrainer(
        model,
        optim=rl.optim,
        ppo=rl.ppo,
        pad_token_id=tokenizer.pad_token_id,
        backend=backend,
        device=device,
        adapter=adapter,
        image_processor=processor,
    )
    sandboxes = lazy_sandbox_backend(registry, sandbox_backend)
    loop = RLLoop(
        rl,
        trainer=trainer,
        backend=sampler,
        registry=registry,
        on_trajectory=on_trajectory,
        sandbox_backend=sandboxes,
        artifacts_dir=artifacts_dir,
    )

    async def close() -> None:
        await backend.aclose()
        if sandboxes is not None:
            await sandboxes.aclose()

    return loop, tokenizer, close


async def _train(rl: RLConfig, settings: dict[str, Any], console: Any, tracker: Any = None) -> None:
    from toolgym.training.local.progress import (
        MetricsFile,
        eval_end_line,
        eval_record,
        eval_start_line,
        progress_line,
        set_aside,
        step_record,
        tracking_metrics,
    )
    from toolgym.trajectories.store import TrajectoryWriter

    out = Path(settings["out"])
    writer = TrajectoryWriter(out / "trajectories")
    loop, tokenizer, close = open_loop(
        rl,
        Path(settings["model_dir"]),
        device=settings["device"],
        sandbox_backend=settings["sandbox_backend"],
        on_trajectory=writer.write,
        artifacts_dir=out / "trajectories" / "artifacts",  # screenshots: trajectories/images/
    )
    keep: int | None = None
    if settings.get("resume"):
        loop.resume(Path(settings["resume"]))
        keep = loop.next_step
        console.print(f"resumed from {settings['resume']} (step {loop.next_step})")
    else:  # an earlier run that left no checkpoint: keep its record, start a new one
        kept = set_aside(out / "metrics.jsonl")
        if kept is not None:
            console.print(
                f"{out} has no checkpoint to resume from: the earlier run's metrics.jsonl is kept as {kept.name}, "
                "this run writes a new one"
            )
    metrics = MetricsFile(out / "metrics.jsonl", keep_through_step=keep)
    (out / "run.json").write_text(json.dumps({"rl": rl.model_dump(), "run": settings}, indent=2, default=str))
    walls: list[float] = []
    try:
        if settings["val_before_train"] and not any(r.get("step") == 0 for r in metrics.records()):
            console.print(eval_start_line(rl.eval.num_tasks, when="before RL"), highlight=False)
            before = await loop.evaluate()
            record = {"step": 0, "heldout": eval_record(before)}
            metrics.append(record)
            if tracker is not None:
                tracker.log(tracking_metrics(record), step=0)
            console.print(eval_end_line(before, when="before RL"))
        last = {"t": time.perf_counter()}

        def on_step(log: Any) -> None:
            now = time.perf_counter()
            walls.append(now - last["t"])
            last["t"] = now
            rec = step_record(log, wall_s=walls[-1], kl_coef=rl.ppo.kl_coef)
            metrics.append(rec)
            if tracker is not None:
                tracker.log(tracking_metrics(rec), step=rec["step"])
            eta = sum(walls) / len(walls) * (rl.steps - log.step - 1)
            console.print(progress_line(rec, total=rl.steps, eta_s=eta), highlight=False)

        await loop.train(on_step=on_step, checkpoint_dir=out, tokenizer=tokenizer)
    finally:
        writer.close()
        await close()
    final = loop.history[-1].eval if loop.history and loop.history[-1].eval else None
    if final is not None:
        console.print(
            f"held-out success after RL: {final.success:.1%} · metrics {out / 'metrics.jsonl'} · checkpoints in {out}"
        )
