"""LoRA adapters for the local trainer, through ``peft`` (``pip install toolgym[lora]``).

:func:`attach_lora` injects the adapter layers into the Hugging Face model *in place* and returns
the ``PeftModel`` that wraps it. The model object keeps its identity and its forward, so the
trainer and the in-process sampler (``TransformersBackend``) go on sharing it: both run the frozen
base weights plus ``alpha / rank · B A`` through the same layers, and an optimiser step on the
adapter is what the next sampled token sees. The sampler does not serve merged weights: merging
into a copy would cost a second model and a copy per step, and merging in place would change the
base weights by rounding on every unmerge; the unmerged forward is the trainer's own, so the
sampler's logprobs equal the trainer's to float precision (``tests/training/local/test_lora.py``).

On a vision-language model the adapter goes on the language model only: unless ``exclude_modules``
is set, the vision tower (``VISION_TOWER``, Qwen2-VL-family naming) keeps its weights, as the usual
recipes for LoRA on a VLM do, and trains nowhere (its weights are frozen with the rest of the base).

Checkpoints hold the adapter only, in peft's layout (``adapter_config.json``,
``adapter_model.safetensors``), which is also what verl's ``actor_rollout_ref.model.lora_adapter_path``
loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from toolgym.core.errors import ConfigError

from .config import LoraConfig

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
VISION_TOWER = r".*\.visual\..*"
"""The modules a VLM's adapter leaves out by default (peft's regex over module names)."""


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise ConfigError("LoRA (lora_rank > 0) needs peft: pip install 'toolgym[lora]'") from None
    return peft


def attach_lora(model: Any, cfg: LoraConfig, *, seed: int = 0) -> Any:
    """Inject a LoRA adapter into ``model`` (in place; its base weights frozen) and return the
    ``PeftModel`` around it. ``A`` is drawn from ``seed`` (the global RNG is left as it was),
    ``B`` starts at zero, so the adapted model starts out computing what ``model`` did."""
    if not cfg.enabled:
        raise ConfigError("attach_lora needs lora.rank > 0 (verl.actor_rollout_ref.model.lora_rank)")
    peft = _peft()
    from toolgym.core.llm.local.vlm import is_vlm

    exclude = cfg.exclude_modules
    if exclude is None and is_vlm(model):
        exclude = VISION_TOWER
    settings = peft.LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        target_modules=cfg.target_modules,
        exclude_modules=exclude,
        bias="none",
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            adapter = peft.get_peft_model(model, settings)
        except ValueError as exc:  # e.g. target modules that match nothing
            raise ConfigError(f"cannot put a LoRA adapter on this model: {exc}") from None
    if adapter.base_model.model is not model:  # the sampler shares ``model``: the layers must be in it
        raise ConfigError(
            "peft wrapped a copy of the model instead of injecting into it; upgrade peft (>= 0.14)"
        )
    return adapter


def adapter_parameters(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's trainable tensors in ``model`` (name → parameter)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def adapter_state(adapter: Any) -> dict[str, torch.Tensor]:
    """The adapter's weights in peft's naming (what :func:`save_adapter` writes), detached copies."""
    return {k: v.detach().clone() for k, v in _peft().get_peft_model_state_dict(adapter).items()}


def save_adapter(adapter: Any, directory: Path) -> None:
    """``adapter_config.json`` and ``adapter_model.safetensors`` under ``directory``."""
    adapter.save_pretrained(str(directory), safe_serialization=True)


def is_adapter_checkpoint(directory: Path) -> bool:
    return (Path(directory) / ADAPTER_WEIGHTS).is_file()


def load_adapter(adapter: Any, directory: Path) -> None:
    """Copy the adapter weights saved under ``directory`` into ``adapter`` (same rank and targets)."""
    src = Path(directory)
    if not is_adapter_checkpoint(src):
        raise ConfigError(
            f"checkpoint {src} holds full weights, not a LoRA adapter ({ADAPTER_WEIGHTS}); "
            "resume it with lora_rank 0 or start a fresh output directory"
        )
    from safetensors.torch import load_file

    weights = load_file(str(src / ADAPTER_WEIGHTS))
    expected = set(_peft().get_peft_model_state_dict(adapter))
    if set(weights) != expected:
        raise ConfigError(
            f"the LoRA adapter in {src} does not fit this model's adapter (different target modules or model); "
            "use the lora settings it was trained with"
        )
    try:
        _peft().set_peft_model_state_dict(adapter, weights)
    except RuntimeError as exc:  # shape mismatch: another rank
        raise ConfigError(
            f"the LoRA adapter in {src} does not fit this model's adapter (another lora_rank?): "
            f"{str(exc).splitlines()[0]}"
        ) from None
