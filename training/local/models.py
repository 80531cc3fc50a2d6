"""The demo's model: a tiny Qwen2-style model whose tokenizer and chat format fit the task.

- Tokenizer: the tiny model's byte-level BPE, trained (once, cached) on its generic corpus plus
  what the environment offers through ``tokenizer_corpus()`` and a few scripted episodes rendered
  through the chat template, so the prompt, tool calls and results take few tokens (CPU time
  grows with tokens, and a tiny model learns faster from short contexts).
- Chat format: ``templates/compact_qwen.jinja``, Qwen's markup and Hermes tool calls with a
  one-line-per-tool block instead of Qwen's paragraph of instructions: about 40 prompt tokens
  instead of about 180. The template is saved with the tokenizer, so every consumer (engine,
  ``toolgym collect --tokenizer DIR``, ``toolgym verify``) renders the same way.
- Weights: drawn afresh from the run's seed, so seeds are different initialisations.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from toolgym.core.env.spec import EnvSpec
from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.tiny import Family, TinySpec, ensure_tiny_model

FAMILY: Family = "qwen"
TEMPLATE = "compact_qwen.jinja"
TRANSCRIPT_REPEATS = 200
"""How often each rendered episode enters the tokenizer corpus: enough for whole-word merges."""


def chat_template() -> str:
    return resources.files("toolgym.training.local").joinpath("templates", TEMPLATE).read_text()


def scripted_transcripts(spec: EnvSpec, registry: Any, *, episodes: int = 8) -> list[str]:
    """``episodes`` episodes of the environment's scripted solver, rendered with the demo template."""
    from toolgym.core.tokens.chat import compile_template

    template = compile_template(chat_template())

    async def play(seed: int, sandboxes: Any) -> str:
        env = spec.make()
        ctx = None
        if getattr(
            env, "tool_names", ()
        ):  # named tools (math-python's python) bind to the episode's sandboxes
            from toolgym.core.env.context import EpisodeContext

            ctx = EpisodeContext(episode_id=f"corpus-{seed}", registry=registry, sandbox_backend=sandboxes)
            env.bind(ctx)
        messages, _ = await env.reset(seed=seed)
        tools = {t.name: t for t in env.tools}
        parser = registry.parser(env.parser)
        for _ in range(env.max_turns):
            text = await env.scripted_action()
            if text is None:
                break
            messages.append({"role": "assistant", "content": text})
            result = await env.step(parser.parse(text, tools))
            if result.terminated or result.truncated or isinstance(result.observation, str):
                break
            messages.extend(result.observation)
        await env.close()
        if ctx is not None:
            await ctx.aclose()
        schemas = [t.schema for t in env.tools] or None
        return str(template.render(messages=messages, tools=schemas, add_generation_prompt=False))

    async def all_episodes() -> list[str]:
        from toolgym.core.sandbox import LazySandboxBackend

        sandboxes = LazySandboxBackend(registry, "auto")  # opened only by envs with sandboxed tools
        try:
            return [await play(seed, sandboxes) for seed in range(episodes)]
        finally:
            await sandboxes.aclose()

    with ThreadPoolExecutor(1) as pool:  # its own event loop, whether or not the caller runs one
        return pool.submit(asyncio.run, all_episodes()).result()


def _factory(spec: EnvSpec) -> Any:
    from toolgym.core.env.spec import load_object

    return load_object(spec.entry) if isinstance(spec.entry, str) else spec.entry


def env_corpus(spec: EnvSpec, registry: Any) -> list[str]:
    """The environment's tokenizer text plus rendered scripted episodes."""
    extra = list(getattr(_factory(spec), "tokenizer_corpus", lambda: [])())
    return extra + scripted_transcripts(spec, registry) * TRANSCRIPT_REPEATS


def whole_names(spec: EnvSpec) -> tuple[str, ...]:
    """The names an environment wants as single tokens (its factory's ``whole_token_names()``; none if it has none)."""
    return tuple(getattr(_factory(spec), "whole_token_names", lambda: ())())


def demo_spec(
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    context: int = 1024,
    vocab_size: int = 1024,
) -> TinySpec:
    if hidden_size % num_heads or hidden_size < 16:
        raise ConfigError(
            f"hidden_size must be a multiple of num_heads and at least 16, got {hidden_size} and {num_heads}"
        )
    if vocab_size < 512:
        raise ConfigError(
            f"vocab_size must be at least 512 (the byte alphabet and the chat markup), got {vocab_size}"
        )
    return TinySpec(
        family=FAMILY,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 3,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_heads,
        max_position_embeddings=context,
        corpus_docs=1500,
    )


ACTION_TAGS = ("<action>", "</action>")
"""verl-agent's action markup. Learnt by BPE from the corpus, ``<action>`` fuses with what follows
(``<action>go to cabinet 3`` → ``<action`` ``>go`` …), so the action's first word is another id
than the same word in the admissible list (``'go to cabinet 3'`` → ``'`` ``go`` …), and a tiny
model cannot learn the action as a copy of a listed one. As whole tokens the tags leave the action
tokenized exactly as the list shows it."""

THINK_TAGS = ("<think>", "</think>")
"""The reasoning markup, whole for the same reason as :data:`ACTION_TAGS`."""

SPACED_DIGITS = tuple(f" {d}" for d in "0123456789")
"""A space and a digit as one token. Qwen's pre-tokenizer isolates every digit, so ``cellphone 2``
is `` cellphone`` `` `` ``2``, and copying the number that follows a name out of the observation
takes a match over two tokens; with these whole tokens it is the one-token copy that a two-layer
model learns first (`` cellphone`` `` 2``). Numbers of two digits become `` 1`` ``3``."""


def demo_model_dir(
    spec: EnvSpec,
    registry: Any,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    whole_tokens: tuple[str, ...] = (),
    context: int = 1024,
    vocab_size: int = 1024,
) -> Path:
    """Build (once; cached) the demo model directory for environment ``spec``: the tiny model with
    the environment's tokenizer corpus and the compact chat template; ``whole_tokens`` (e.g.
    :data:`ACTION_TAGS`) are added to the tokenizer as single tokens, and the embeddings grown to fit."""
    tiny = demo_spec(
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        context=context,
        vocab_size=vocab_size,
    )
    base = ensure_tiny_model(FAMILY, spec=tiny, extra_corpus=env_corpus(spec, registry))
    suffix = "-compact" + (
        "-" + hashlib.sha256("\x00".join(whole_tokens).encode()).hexdigest()[:8] if whole_tokens else ""
    )
    out = base.with_name(base.name + suffix)
    if (out / "READY").exists():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=base.parent))
    try:
        for item in base.iterdir():
            if item.is_file() and item.name != "READY":
                shutil.copy2(item, tmp / item.name)
        tokenizer = AutoTokenizer.from_pretrained(str(base))
        tokenizer.chat_template = chat_template()
        if whole_tokens:
            tokenizer.add_tokens(list(whole_tokens), special_tokens=False)
            model = AutoModelForCausalLM.from_pretrained(str(base))
            model.resize_token_embeddings(len(tokenizer))
            model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / "READY").write_text("ok\n")
        try:
            os.replace(tmp, out)
        except OSError:  # another process built it first
            if not (out / "READY").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def fresh_model(model_dir: Path, *, seed: int, init_std: float | None = None) -> Any:
    """The architecture of ``model_dir`` with weights drawn from ``seed`` (float32, eval mode);
    ``init_std`` overrides the configuration's ``initializer_range``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir))
    if init_std is not None:
        config.initializer_range = float(init_std)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    return model.float().eval()
