"""Turn a user's ``--model`` into a backend.

``--model`` is one of:

- ``tiny`` / ``tiny-qwen`` / ``tiny-llama`` / ``tiny-<family>`` (``TINY``): the tiny model built on
  this machine (:mod:`toolgym.core.llm.local.tiny`), run in process by the ``transformers`` backend;
- a local Hugging Face model directory (with ``config.json``): run in process by ``transformers``;
- a server address ``http(s)://host:port``: the ``sglang`` backend by default, or the one named by
  ``backend`` (``openai`` for token-faithful ``/v1/completions``, ``openai-chat`` for black-box
  chat models, or any backend a plugin registers).

Nothing is ever downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .base import ChatBackend, LLMBackend
from .local.hf_tokenizer import (
    load_tokenizer as load_tokenizer,  # re-exported: callers load tokenizers from here
)

TINY = {
    "tiny": "qwen",
    "tiny-qwen": "qwen",
    "tiny-llama": "llama",
    "tiny-qwen3": "qwen3",
    "tiny-qwen3-coder": "qwen3-coder",
    "tiny-mistral": "mistral",
    "tiny-llama4": "llama4",
    "tiny-deepseek-v3.1": "deepseek-v3.1",
    "tiny-kimi-k2": "kimi-k2",
    "tiny-gpt-oss": "gpt-oss",
    "tiny-glm-4.5": "glm-4.5",
    "tiny-vl": "qwen2.5-vl",
    "tiny-qwen3-vl": "qwen3-vl",
}
"""``--model`` names of the tiny models, → their family (docs/model_families.md)."""
IN_PROCESS = "transformers"
DEFAULT_REMOTE = "sglang"
REMOTE_ONLY = frozenset({"sglang", "openai", "openai-chat"})


def is_url(model: str) -> bool:
    return model.startswith(("http://", "https://"))


def resolve_model_dir(model: str | os.PathLike[str]) -> Path | None:
    """The local model directory ``model`` names (building the tiny model if asked), or None."""
    text = str(model)
    if text in TINY:
        from .local.tiny import ensure_tiny_model

        return ensure_tiny_model(TINY[text])  # type: ignore[arg-type]
    path = Path(text).expanduser()
    if (path / "config.json").is_file():
        return path
    return None


def make_backend(
    model: str, backend: str | None = None, /, *, registry: Any = None, **options: Any
) -> LLMBackend | ChatBackend:
    """Build the backend for ``model`` (see the module docstring); ``options`` go to its factory.

    Backends are looked up by name in the plugin registry, so third-party backends work too; the
    built-in ones are used directly when the registry lacks them (an uninstalled checkout).
    """
    model = str(model)
    if is_url(model):
        name = backend or DEFAULT_REMOTE
        target = model
    else:
        directory = resolve_model_dir(model)
        if directory is None:
            raise ConfigError(_not_found(model))
        name = backend or IN_PROCESS
        target = str(directory)
        if name in REMOTE_ONLY:
            raise ConfigError(
                f"backend {name!r} talks to a server, but --model {model!r} is a local model; "
                "drop --backend to run it in process, or start a server with `toolgym serve` and pass its address"
            )
    if registry is None:
        from ..registry import get_registry

        registry = get_registry()
    if name not in registry.llm_backends and name in BUILTIN_BACKENDS:
        return BUILTIN_BACKENDS[name](target, **options)
    made: LLMBackend | ChatBackend = registry.llm_backend(name).factory(target, **options)
    return made


def _not_found(model: str) -> str:
    if Path(model).expanduser().exists():
        return f"--model {model!r} is not a Hugging Face model directory (it has no config.json); give the folder the model was saved to"
    return (
        f"--model {model!r} is neither 'tiny', 'tiny-llama', a local model directory nor a server address (http://host:port); "
        "nothing is downloaded here, so give a local path or a running server"
    )


def _transformers(model: str, /, **options: Any) -> LLMBackend:
    from .local.transformers_backend import TransformersBackend

    return TransformersBackend(model, **options)


def _sglang(model: str, /, **options: Any) -> LLMBackend:
    from .clients.sglang import SGLangBackend

    return SGLangBackend(model, **options)


def _openai(model: str, /, **options: Any) -> LLMBackend:
    from .clients.openai import OpenAICompletionsBackend

    return OpenAICompletionsBackend(model, **options)


def _openai_chat(model: str, /, **options: Any) -> ChatBackend:
    from .clients.openai import OpenAIChatBackend

    return OpenAIChatBackend(model, **options)


BUILTIN_BACKENDS: dict[str, Callable[..., LLMBackend | ChatBackend]] = {
    "transformers": _transformers,
    "sglang": _sglang,
    "openai": _openai,
    "openai-chat": _openai_chat,
}
"""Factories of the built-in backends, also registered as a plugin by ``toolgym.core.builtin.llm``."""
