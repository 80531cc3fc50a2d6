"""Warm starts of a vision-language model (a recipe with ``model: tiny-qwen3-vl`` or ``tiny-vl``): the tiny VLM fine-tuned on
scripted screenshot episodes, for the RL configs that train from pixels (``miniwob_screenshot_*``).

What differs from the text recipes of :mod:`.build`:

1. **model**: the tiny model family named by ``model`` (``tiny-vl``: Qwen2.5-VL-shaped, or ``tiny-qwen3-vl``; its own
   tokenizer, chat template and image processor, random weights; :mod:`toolgym.core.llm.local.tiny_vl`),
   not a tokenizer and model trained from the environment's text, so ``hidden_size``, ``num_layers``,
   ``num_heads``, ``context``, ``vocab_size``, ``init_std`` and the whole-token options do not apply.
2. **data**: the environment's scripted solver plays ``episodes`` tasks through the rollout engine
   with the VLM's chat format (``make_policy("scripted", tokenizer=model)``, as ``toolgym collect
   --model scripted --tokenizer tiny-vl`` does), which renders each screenshot into the prompt as the
   image processor expands it and stores the images by hash in the build's scratch folder; the SFT
   rows carry those images (:func:`toolgym.training.local.sft.sft_rows` with ``images_root``). The solver writes tool
   calls, not ``<action>`` lines, so no mistakes are injected (``mistake_rate`` and ``invalid_rate``
   must be 0): the SFT budget alone keeps the warm start short of mastery.
3. **SFT**: the same fixed budget and validation checks as the text recipes, through the VLM's forward
   pass (its vision tower trains with the text model).

The result is a Hugging Face directory (weights, tokenizer, ``preprocessor_config.json`` and
``warmstart.json``) that ``toolgym train`` takes as ``model.path: warmstart:NAME``.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError
from toolgym.training.warmstart.floats import float_provenance
from toolgym.training.warmstart.recipe import WarmStartRecipe

VISION_MODELS = ("tiny-vl", "tiny-qwen3-vl")
"""The model families a vision recipe may start from."""


def check(r: WarmStartRecipe) -> None:
    """Refuse, in one line each, the recipe fields a vision warm start cannot honour."""
    if r.model not in VISION_MODELS:
        raise ConfigError(f"warm-start model must be one of {', '.join(VISION_MODELS)}, got {r.model!r}")
    if r.mistake_rate or r.invalid_rate or r.think_hint or r.expert_only:
        raise ConfigError(
            f"the {r.name} recipe starts from {r.model}, whose scripted data are the solver's tool calls: "
            "set mistake_rate=0 and invalid_rate=0, and leave think_hint and expert_only off"
        )


async def build_vision(r: WarmStartRecipe, progress: Any, threads: int, device: str) -> dict[str, Any]:
    """SFT of ``r.model`` on scripted screenshot episodes; returns ``model``, ``tokenizer``,
    ``processor`` (the image processor, saved beside the weights) and ``info`` (``warmstart.json``)."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.llm.resolve import TINY
    from toolgym.core.registry import get_registry
    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
    from toolgym.core.rollout.policies import make_policy
    from toolgym.core.sandbox import lazy_sandbox_backend
    from toolgym.core.tokens.vision import load_image_processor
    from toolgym.training.local.config import OptimConfig, PPOConfig
    from toolgym.training.local.loop import run_episodes
    from toolgym.training.local.sft import sft_rows
    from toolgym.training.local.stops import StopAtBackend, action_stops
    from toolgym.training.local.trainer import PolicyTrainer
    from toolgym.training.warmstart.sft import sft_with_checks, validation_engine

    check(r)
    started = time.perf_counter()
    registry = get_registry()
    progress("model", 0, 1, f"{r.model} (built once, cached)")
    model_dir = ensure_tiny_model(TINY[r.model])  # type: ignore[arg-type,index]
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    processor = load_image_processor(model_dir)
    progress("model", 1, 1, str(model_dir.name))

    engine_cfg = EngineConfig(
        max_turns=r.max_turns, max_tokens_per_turn=r.max_tokens_per_turn, seed=r.seed, max_live_episodes=16
    )
    with tempfile.TemporaryDirectory(prefix=f"warmstart-{r.name}-") as scratch:
        data = Path(scratch) / "scripted"
        data_sandboxes = lazy_sandbox_backend(registry, "auto")
        done = {"n": 0}

        def counted(_: Any) -> None:
            done["n"] += 1
            progress("data", done["n"], r.episodes, "")

        # the solver's own task options first (MiniWoB++: tasks=solvable), as a scripted collection takes them
        env_kwargs = {**registry.env(r.env).scripted_kwargs, **r.env_kwargs}
        data_cfg = engine_cfg.model_copy(update={"seed": r.data_seed})
        scripted = RolloutEngine(
            registry=registry,
            policy=make_policy("scripted", backend=None, tokenizer=r.model, config=data_cfg),
            config=data_cfg,
            env_kwargs=env_kwargs,
            sandbox_backend=data_sandboxes,
            artifacts_dir=str(data / "artifacts"),
        )
        requests = plan_episodes(r.env, num_tasks=r.episodes, group_size=1, seed=r.data_seed)
        try:
            made = await run_episodes(scripted, requests, counted)
        finally:
            if data_sandboxes is not None:
                await data_sandboxes.aclose()
        failed = sum(t.status.value == "error" for t in made)
        # in seed order, not the order the browsers finished in: SFT's batches are then a function of the recipe
        trajs = sorted(made, key=lambda t: (t.seed, t.sample_index))
        data_success = sum(t.reward >= 1.0 - 1e-9 for t in trajs) / max(len(trajs), 1)
        rows = sft_rows(trajs, min_reward=1.0 - 1e-9, images_root=data)
        if not rows:
            raise ConfigError(
                f"none of the {len(trajs)} scripted {r.env} episodes succeeded; check the environment options"
            )
        progress(
            "data",
            r.episodes,
            r.episodes,
            f"{len(rows)} rows with their screenshots · scripted success {data_success:.0%}",
        )

        model = AutoModelForImageTextToText.from_pretrained(str(model_dir)).float().to(device)
        if r.sft_freeze_vision:
            from toolgym.core.llm.local.vlm import freeze_vision_tower

            freeze_vision_tower(model)  # before the SFT optimiser is made (see the recipe field)
        backend = TransformersBackend(
            model, tokenizer=tokenizer, device=device, max_batch_size=16, image_processor=processor
        )
        stops = action_stops(registry, r.env, r.env_kwargs)
        sampler = StopAtBackend(backend, stops) if stops else backend
        sft = PolicyTrainer(
            model,
            optim=OptimConfig(lr=r.sft_lr, weight_decay=r.sft_weight_decay),
            ppo=PPOConfig(micro_batch_size=min(r.sft_batch_size, 16)),
            pad_token_id=tokenizer.pad_token_id,
            device=device,
            image_processor=processor,
        )
        sandboxes = lazy_sandbox_backend(registry, "auto")
        val_engine = validation_engine(
            r,
            registry,
            sampler,
            engine_cfg,
            sandboxes,
            artifacts_dir=str(Path(scratch) / "validation" / "artifacts"),
        )
        try:
            losses, checks = await sft_with_checks(r, sft, rows, val_engine, progress)
        finally:
            await backend.aclose()
            if sandboxes is not None:
                await sandboxes.aclose()
    info = {
        "recipe": asdict(r),
        "model_dir": str(model_dir),
        "rows": len(rows),
        "scripted_success": data_success,
        "scripted_errors": failed,
        "sft_steps": len(losses),
        "sft_losses": losses,
        "validation": checks,
        "seconds": time.perf_counter() - started,
        "device": device,
        "floats": float_provenance(threads, device),
    }
    return {"model": model, "tokenizer": tokenizer, "processor": processor, "info": info}
