"""The hand-off of LoRA to verl's trainer: a local checkpoint is what verl's ``lora_adapter_path``
loads, and a rollout model fed verl's own LoRA weight syncs (``training/verl/lora_sync.py``)
computes what the actor does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from local_helpers import tiny_model

from tests.required import need_module
from toolgym.core.errors import ConfigError
from toolgym.training.local.config import LoraConfig, OptimConfig
from toolgym.training.local.lora import attach_lora
from toolgym.training.local.trainer import PolicyTrainer
from toolgym.training.verl.lora_sync import RolloutLora, lora_config_of

need_module("peft")
IDS = torch.tensor([[1, 5, 9, 2, 7, 30, 11, 4]])


def _trained_actor(lora: LoraConfig) -> tuple[Any, Any]:
    """A tiny model with an adapter whose B is no longer zero (as after some updates)."""
    model = tiny_model(seed=0)
    adapter = attach_lora(model, lora, seed=0)
    torch.manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)
    return model, adapter


def _logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def test_a_local_checkpoint_is_what_verls_lora_adapter_path_loads(tmp_path: Path) -> None:
    from peft import PeftModel

    model, adapter = _trained_actor(LoraConfig(rank=4, alpha=8.0))
    PolicyTrainer(model, optim=OptimConfig(), adapter=adapter).save(tmp_path / "ckpt")
    # what verl's FSDP engine does with actor_rollout_ref.model.lora_adapter_path (engine/fsdp/transformer_impl.py)
    loaded = PeftModel.from_pretrained(tiny_model(seed=0), str(tmp_path / "ckpt"), is_trainable=True)
    torch.testing.assert_close(_logits(loaded), _logits(model), rtol=0, atol=0)
    assert {n for n, p in loaded.named_parameters() if p.requires_grad} == {
        n for n, p in adapter.named_parameters() if p.requires_grad
    }


def test_a_rollout_fed_verls_lora_syncs_computes_what_the_actor_does() -> None:
    need_module("verl")
    from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

    lora = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "up_proj"])
    actor, adapter = _trained_actor(lora)
    peft_config = adapter.peft_config["default"]
    rollout = tiny_model(seed=1)  # other base weights: the base sync must overwrite them
    sync = RolloutLora(rollout)
    # verl's first sync (base_sync_done=False): base weights under base_layer names, then the adapter after each update
    base = {
        replace_lora_wrapper(k, peft_config): v
        for k, v in collect_lora_params(adapter, layered_summon=False, base_sync_done=False).items()
    }
    assert any(".base_layer." in k for k in base)
    sync.load(base, peft_config.to_dict())
    sync.load(collect_lora_params(adapter, layered_summon=False, base_sync_done=True), peft_config.to_dict())
    torch.testing.assert_close(_logits(rollout), _logits(actor), rtol=0, atol=1e-6)
    assert lora_config_of(peft_config.to_dict()) == lora.model_copy(
        update={"target_modules": sorted(lora.target_modules)}
    )

    with torch.no_grad():  # an update: only the adapter travels
        for name, p in actor.named_parameters():
            if "lora_A" in name:
                p.add_(0.1)
    sync.load(collect_lora_params(adapter, layered_summon=False, base_sync_done=True), peft_config.to_dict())
    torch.testing.assert_close(_logits(rollout), _logits(actor), rtol=0, atol=1e-6)


def test_full_weight_syncs_still_load_and_foreign_names_are_refused() -> None:
    actor, rollout = tiny_model(seed=0), tiny_model(seed=1)
    sync = RolloutLora(rollout)
    sync.load(dict(actor.state_dict()))  # no LoRA, or lora.merge: true
    torch.testing.assert_close(_logits(rollout), _logits(actor), rtol=0, atol=0)
    with pytest.raises(ConfigError, match="does not have"):
        sync.load({"model.layers.9.mlp.up_proj.weight": torch.zeros(1)})
    with pytest.raises(ConfigError, match="without a peft_config"):
        sync.load({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 16)})
