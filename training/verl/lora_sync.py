"""LoRA weight syncs for a rollout that runs a Hugging Face model in process (the ``toolgym_cpu`` replica).

With ``actor_rollout_ref.model.lora_rank > 0`` and ``model.lora.merge: false`` (verl's default),
verl's actor sends the rollout two kinds of ``update_weights`` calls (``verl/workers/engine_workers.py``,
``verl/utils/fsdp_utils.py``: ``collect_lora_params``, ``replace_lora_wrapper``):

1. once, ``base_sync_done=False``: the base weights, under the names an adapted model gives them
   (``model.layers.0.self_attn.q_proj.base_layer.weight`` for an adapted layer), with ``peft_config``;
2. after every update, ``base_sync_done=True``: the adapter only, as ``peft.get_peft_model_state_dict``
   names it (``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``), with ``peft_config``.

:class:`RolloutLora` takes both: on the first call that carries a ``peft_config`` it injects the same
adapter into the rollout's model (in place, :func:`toolgym.training.local.lora.attach_lora`), then
loads base weights by name and adapter weights through peft. The rollout then runs base + adapter
unmerged in float32, as the local trainer's sampler does, instead of merged weights (verl's
``lora.merge: true`` path casts sharded tensors to bfloat16 before sending them). Without a
``peft_config`` (no LoRA, or ``lora.merge: true``) the tensors are full weights and are loaded as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from toolgym.core.errors import ConfigError
from toolgym.training.local.config import LoraConfig

ADAPTER_MARKERS = (".lora_A.", ".lora_B.")


def lora_config_of(peft_config: Mapping[str, Any]) -> LoraConfig:
    """The local trainer's settings for verl's ``peft_config`` dict (``LoraConfig.to_dict()``)."""
    if str(peft_config.get("peft_type", "LORA")).upper().removeprefix("PEFTTYPE.") != "LORA":
        raise ConfigError(
            f"the rollout takes LoRA adapters only, got peft_type {peft_config.get('peft_type')!r}"
        )
    targets = peft_config.get("target_modules") or "all-linear"
    excludes = peft_config.get("exclude_modules")
    return LoraConfig(
        rank=int(peft_config["r"]),
        alpha=float(peft_config["lora_alpha"]),
        target_modules=targets if isinstance(targets, str) else sorted(targets),
        exclude_modules=excludes if excludes is None or isinstance(excludes, str) else sorted(excludes),
    )


class RolloutLora:
    """The adapter state of one rollout model; see the module docstring."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.adapter: Any = None
        """The ``PeftModel`` around ``model`` once a sync carried a ``peft_config``."""

    def param_names(self) -> set[str]:
        """Names a full-weight or base sync may use (the model's own, ``base_layer`` ones once adapted)."""
        return set(self.model.state_dict())  # tied weights under both names

    def load(self, state: Mapping[str, torch.Tensor], peft_config: Mapping[str, Any] | None = None) -> int:
        """Load one verl sync into the model (call it with generation paused); returns the tensors loaded."""
        if peft_config is not None and self.adapter is None:
            from toolgym.training.local.lora import attach_lora

            self.adapter = attach_lora(self.model, lora_config_of(peft_config))
        adapter = {k: v for k, v in state.items() if any(m in k for m in ADAPTER_MARKERS)}
        base = {k: v for k, v in state.items() if k not in adapter}
        if adapter and self.adapter is None:
            raise ConfigError(
                "the actor sent LoRA adapter weights without a peft_config; "
                "the rollout cannot tell the adapter's rank and targets"
            )
        names = self.param_names()
        base = {_resolve(k, names): v for k, v in base.items()}
        unknown = sorted(set(base) - names)
        if unknown:
            raise ConfigError(
                f"the actor sent weights the rollout model does not have ({unknown[:3]}...): "
                "actor and rollout must load the same model with the same LoRA settings"
            )
        with torch.no_grad():
            if base:
                self.model.load_state_dict(dict(base), strict=False)  # tied weights may come under one name
            if adapter:
                from peft import set_peft_model_state_dict

                expected = set(_adapter_keys(self.adapter))
                if set(adapter) != expected:
                    raise ConfigError(
                        "the actor's LoRA adapter does not fit the rollout's (other target modules?): "
                        f"{sorted(set(adapter) ^ expected)[:3]}"
                    )
                set_peft_model_state_dict(self.adapter, dict(adapter))  # copied into the rollout's dtype
        return len(state)


def _resolve(name: str, names: set[str]) -> str:
    """The rollout's name for a base tensor: verl writes ``.base_layer`` for every q/k/v/o/gate/up/down
    projection (vLLM adapts them all), while peft has it only on the adapted ones."""
    if name in names:
        return name
    stripped = name.replace(".base_layer.", ".")
    if stripped in names:
        return stripped
    module, _, leaf = name.rpartition(".")
    wrapped = f"{module}.base_layer.{leaf}"
    return wrapped if wrapped in names else name


def _adapter_keys(adapter: Any) -> list[str]:
    from peft import get_peft_model_state_dict

    return list(get_peft_model_state_dict(adapter))
