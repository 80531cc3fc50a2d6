"""The built-in model backends, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from toolgym.core.hookspecs import hookimpl
from toolgym.core.llm.base import LLMBackendSpec
from toolgym.core.llm.resolve import BUILTIN_BACKENDS


@hookimpl
def toolgym_llm_backends() -> list[LLMBackendSpec]:
    about = {
        "transformers": "In-process Hugging Face model (CPU or one GPU), continuous batching.",
        "sglang": "SGLang server, native /generate: token ids in and out.",
        "openai": "vLLM/SGLang /v1/completions with token ids in and out.",
        "openai-chat": "Any chat-completions API (text only, not token-faithful).",
    }
    return [LLMBackendSpec(name, factory, about[name]) for name, factory in BUILTIN_BACKENDS.items()]
