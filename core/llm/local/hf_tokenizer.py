"""Hugging Face tokenizers by name: the tiny models' (``tiny``, ``tiny-<family>``) or a local directory.

Its own module so that the backends that load a tokenizer (``openai``, ``sglang``) do not import
:mod:`toolgym.core.llm.resolve`, which imports them to build backends.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, get_args

from ...errors import ConfigError
from .tiny import Family


def tiny_family(name: str) -> Family | None:
    """The tiny model family ``name`` stands for (``tiny`` is ``tiny-qwen``), or None."""
    if name == "tiny":
        return "qwen"
    family = name.removeprefix("tiny-")
    if family != name and family in get_args(Family):
        return family  # type: ignore[return-value]
    return None


def load_tokenizer(path_or_name: str | os.PathLike[str]) -> Any:
    """A Hugging Face tokenizer from ``tiny`` / ``tiny-<family>`` or a local directory."""
    from transformers import AutoTokenizer

    text = str(path_or_name)
    family = tiny_family(text)
    if family is not None:
        from .tiny import load_tiny_tokenizer

        return load_tiny_tokenizer(family)
    path = Path(text).expanduser()
    if not path.is_dir() or not any(
        (path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    ):
        raise ConfigError(
            f"no tokenizer in {text!r}: give a local directory holding tokenizer.json (or tokenizer_config.json), or 'tiny'"
        )
    return AutoTokenizer.from_pretrained(str(path))
