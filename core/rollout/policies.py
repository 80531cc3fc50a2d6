"""Turn a model name into a policy: ``scripted``, ``sim[:LATENCY]``, ``tiny``, a directory, a URL.

What ``toolgym collect --model`` and the Ray workers accept; public as ``toolgym.make_policy``.
"""

from __future__ import annotations

import re
from typing import Any

from toolgym.core.errors import ConfigError
from toolgym.core.llm.base import ChatBackend, LLMBackend
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.policy import ChatPolicy, ModelPolicy, Policy, ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat


def make_policy(
    model: str,
    *,
    backend: str | None,
    tokenizer: str | None,
    config: EngineConfig,
    options: dict[str, Any] | None = None,
) -> Policy:
    """Turn ``--model`` into a policy: ``scripted``, ``sim[:LATENCY]``, ``tiny``, a directory, a URL."""
    options = dict(options or {})
    try:
        return _make_policy(model, backend=backend, tokenizer=tokenizer, config=config, options=options)
    except TypeError as exc:
        key = unexpected_keyword(exc, options)
        if key is None:
            raise
        which = "simulated" if model.startswith("sim") else (backend or "default")
        raise ConfigError(
            f"--backend-arg {key}: the {which} model backend takes no option {key!r}; fix the spelling or drop it"
        ) from None


def _make_policy(
    model: str, *, backend: str | None, tokenizer: str | None, config: EngineConfig, options: dict[str, Any]
) -> Policy:
    if model == "scripted":
        return ScriptedPolicy(ChatFormat(policy_tokenizer(tokenizer), vision=policy_vision(tokenizer)))
    if model == "sim" or model.startswith("sim:"):
        from toolgym.core.llm.testing import SimulatedBackend

        latency = float(model.split(":", 1)[1]) if ":" in model else 0.05
        replay = options.pop("replay", None)
        if replay not in (None, "scripted"):
            raise ConfigError(
                f"--backend-arg replay={replay}: the simulated model replays only the env's scripted solver (replay=scripted)"
            )
        if (
            replay == "scripted"
        ):  # the env's solver turns (SWE: the gold patch through the tools), each after the latency
            chat = ChatFormat(policy_tokenizer(tokenizer), vision=policy_vision(tokenizer))
            return ScriptedPolicy(chat, latency_s=latency)
        return ModelPolicy(
            SimulatedBackend(tokenizer=policy_tokenizer(tokenizer), latency_s=latency, **options), config
        )
    try:
        from toolgym.core.llm.resolve import make_backend
    except ImportError as exc:  # pragma: no cover - only while the backends module is absent
        raise ConfigError(f"model backends are unavailable ({exc})") from None
    made = make_backend(model, backend, tokenizer=tokenizer, **options)
    if isinstance(made, ChatBackend):
        return ChatPolicy(made, config)
    if isinstance(made, LLMBackend):
        return ModelPolicy(made, config)
    raise ConfigError(f"backend for {model!r} is neither a token backend nor a chat backend")


def policy_tokenizer(path: str | None) -> Any:
    """The tokenizer for ``--tokenizer`` (default: the tiny model's), loaded without transformers
    when the directory has a fast tokenizer: scripted and simulated runs start in a fraction of a
    second."""
    from toolgym.core.llm.resolve import TINY
    from toolgym.core.tokens.tokenizer import load_tokenizer

    if path is None or path in TINY:
        from toolgym.core.llm.local.tiny import ensure_tiny_model

        return load_tokenizer(ensure_tiny_model(TINY[path or "tiny"], with_weights=False))  # type: ignore[arg-type]
    return load_tokenizer(path)


def policy_vision(path: str | None) -> Any:
    """The image tokens of a vision-language model's tokenizer (``--tokenizer tiny-vl`` or a
    directory with ``preprocessor_config.json``), so that a scripted run records screenshots as
    that model's expanded image tokens (``metadata.vision``: demonstrations a VLM can be warm-started
    on); None for a text model, whose records hold one placeholder per image."""
    from pathlib import Path

    from toolgym.core.llm.local.tiny import VISION_FAMILIES
    from toolgym.core.llm.resolve import TINY
    from toolgym.core.tokens.vision import VisionInputs, load_image_processor

    if path is None:
        return None
    if path in TINY:
        if TINY[path] not in VISION_FAMILIES:
            return None
        from toolgym.core.llm.local.tiny_vl import image_processor

        return VisionInputs(image_processor())
    processor = load_image_processor(path) if Path(path).is_dir() else None
    return VisionInputs(processor) if processor is not None else None


def unexpected_keyword(exc: TypeError, options: dict[str, Any]) -> str | None:
    """The ``--backend-arg`` key a constructor refused with "unexpected keyword argument", if any."""
    m = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
    return m.group(1) if m and m.group(1) in options else None
