"""Helpers for the local trainer's tests: a small in-memory Qwen2 model and hand-made rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from toolgym.training.local.batch import Row


def tiny_model(seed: int = 0, vocab: int = 48) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).float().eval()


def make_row(ids: list[int], mask: list[int], *, adv: float = 1.0, old: float = -1.0) -> Row:
    m = np.asarray(mask, dtype=np.int8)
    return Row(
        np.asarray(ids, dtype=np.int64),
        m,
        (np.full(len(ids), old, dtype=np.float32) * m),
        (np.full(len(ids), adv, dtype=np.float32) * m),
    )
