"""Warm starts of a vision-language model (a recipe with ``model: tiny-vl``): the tiny VLM fine-tuned on
scripted screenshot episodes, for the RL configs that train from pixels (``miniwob_screenshot_*``).

What differs from the text recipes of :mod:`.build`:

1. **model**: the tiny model family named by ``model`` (``tiny-vl``: Qwen2.5-VL-shaped, its own
   tokenizer, chat template and image processor, random weights; :mod:`toolgym.core.llm.local.tiny_vl`),
   not a tokenizer and model trained from the environment's text, so ``hidden_size``, ``num_layers``,
   ``num_heads``, ``context``, ``vocab_size``, ``init_std`` and the whole-token options do not apply.
2. **data**: the environment's scripted solver plays ``episodes`` tasks through ``toolgym collect``'s
   machinery, which renders each screenshot into the prompt as the image processor expands it and
   stores the images by hash beside the trajectories (in the build's scratch folder); the SFT rows
   carry those images (:func:`toolgym.training.local.sft.load_sft_rows`). The solver writes tool
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

VISION_MODELS = ("tiny-vl",)
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

    from toolgym.collect.plan import CollectOptions
    from toolgym.collect.run import collect
    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.llm.resolve import TINY
    from toolgym.core.registry import get_registry
    from toolgym.core.rollout.config import EngineConfig, SamplingConfig
    from toolgym.core.rollout.engine import RolloutEngine
    from toolgym.core.rollout.policy import ModelPolicy
    from toolgym.core.sandbox import lazy_sandbox_backend
    from toolgym.core.tokens.vision import load_image_processor
    from toolgym.training.local.config import EvalConfig, OptimConfig, PPOConfig
    from toolgym.training.local.loop import evaluate
    from toolgym.training.local.sft import run_sft, sft_rows
    from toolgym.training.local.stops import StopAtBackend, action_stops
    from toolgym.training.local.trainer import PolicyTrainer
    from toolgym.training.warmstart.build import sft_lr_at
    from toolgym.trajectories.store import iter_trajectories

    check(r)
    started = time.perf_counter()
    registry = get_registry()
    progress("model", 0, 1, f"{r.model} (built once, cached)")
    model_dir = ensure_tiny_model(TINY[r.model])  # type: ignore[arg-type,index]
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    processor = load_image_processor(model_dir)
    progress("model", 1, 1, str(model_dir.name))

    engine_cfg = EngineConfig(
        max_turns=r.max_turns, max_tokens_per_turn=r.max_tokens_per_turn, seed=r.seed, max_live_episodes=8
    )
    with tempfile.TemporaryDirectory(prefix=f"warmstart-{r.name}-") as scratch:
        data = Path(scratch) / "scripted"
        done = {"n": 0}

        def counted(_: Any) -> None:
            done["n"] += 1
            progress("data", done["n"], r.episodes, "")

        result = await collect(
            CollectOptions(
                env=r.env,
                out=data,
                model="scripted",
                tokenizer=r.model,
                episodes=r.episodes,
                engine=engine_cfg.model_copy(update={"seed": r.data_seed}),
                env_kwargs=dict(r.env_kwargs),
                sandbox_backend="auto",
                fail_fast=0,
            ),
            registry=registry,
            on_progress=lambda stats: counted(None) if stats.done > done["n"] else None,
        )
        # in seed order, not the order the browsers finished in: SFT's batches are then a function of the recipe
        trajs = sorted(iter_trajectories(data), key=lambda t: (t.seed, t.sample_index))
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
        val = EvalConfig(
            num_tasks=max(r.sft_val_tasks, 1), seed=r.val_seed, temperature=r.sft_val_temperature
        )
        greedy = engine_cfg.model_copy(
            update={"sampling": SamplingConfig(temperature=r.sft_val_temperature), "seed": r.val_seed}
        )
        sandboxes = lazy_sandbox_backend(registry, "auto")
        val_engine = RolloutEngine(
            registry=registry,
            policy=ModelPolicy(sampler, greedy),
            config=greedy,
            env_kwargs={**r.env_kwargs, **r.val_env_kwargs},
            sandbox_backend=sandboxes,
            artifacts_dir=str(Path(scratch) / "validation" / "artifacts"),
        )
        losses: list[float] = []
        checks: list[tuple[int, float]] = []
        sft.set_lr(sft_lr_at(r, 0))
        try:
            while len(losses) < r.sft_max_steps:
                n = min(r.sft_check_every, r.sft_max_steps - len(losses))
                base = len(losses)
                note = f" · last validation {checks[-1][1]:.0%}" if checks else ""

                def report(i: int, metrics: dict[str, Any], base: int = base, note: str = note) -> None:
                    sft.set_lr(sft_lr_at(r, base + i + 1))
                    progress("sft", base + i + 1, r.sft_max_steps, f"loss {metrics['loss']:.3f}{note}")

                losses += run_sft(
                    sft,
                    rows,
                    steps=n,
                    batch_size=r.sft_batch_size,
                    seed=r.seed * 1_000 + base,
                    on_step=report,
                )
                if r.sft_val_tasks < 1:
                    continue
                checked = await evaluate(val_engine, r.env, val)
                checks.append((len(losses), checked.success))
                progress(
                    "sft",
                    len(losses),
                    r.sft_max_steps,
                    f"loss {losses[-1]:.3f} · validation {checked.success:.0%}",
                )
                if r.sft_target is not None and checked.success >= r.sft_target:
                    break
        finally:
            await backend.aclose()
            if sandboxes is not None:
                await sandboxes.aclose()
    info = {
        "recipe": asdict(r),
        "model_dir": str(model_dir),
        "rows": len(rows),
        "scripted_success": data_success,
        "scripted_errors": result.failed,
        "sft_steps": len(losses),
        "sft_losses": losses,
        "validation": checks,
        "seconds": time.perf_counter() - started,
        "device": device,
        "floats": float_provenance(threads, device),
    }
    return {"model": model, "tokenizer": tokenizer, "processor": processor, "info": info}
