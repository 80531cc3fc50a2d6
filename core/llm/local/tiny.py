"""A tiny model built on this machine: nothing is downloaded.

A byte-level BPE tokenizer is trained on the fly on a generated corpus (English-like text,
numbers and arithmetic, Python, JSON tool calls, the chat format's own markup), paired with a real
chat template (Qwen-style or Llama-3-style), and a small Qwen2 or Llama configuration with random
weights. The result is an ordinary Hugging Face model directory, cached under
``$TOOLGYM_CACHE`` (default ``~/.cache/toolgym``) and rebuilt only when its recipe changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from .tiny_vl import RECIPE as VL_RECIPE
from .tiny_vl import RECIPE3 as VL3_RECIPE

Family = Literal[
    "qwen",
    "llama",
    "qwen3",
    "qwen3-coder",
    "mistral",
    "llama4",
    "deepseek-v3.1",
    "kimi-k2",
    "gpt-oss",
    "glm-4.5",
    "qwen2.5-vl",
    "qwen3-vl",
]

RECIPE_VERSION = 2

# How each family splits text before byte-level BPE: the published tokenizers' patterns. The
# Qwen pattern splits every digit; Llama 3's groups up to three. transformers re-creates Qwen2's
# normalizer and pre-tokenizer when it loads a qwen2 model, so the tokenizer must be trained with
# exactly these for tokenizer.json and transformers to tokenize alike.
QWEN_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

FAMILIES: dict[str, dict[str, Any]] = {
    "qwen": {
        "template": "qwen.jinja",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "added": [
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        ],
        "bos": None,
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "architecture": "qwen2",
    },
    "llama": {
        "template": "llama3.jinja",
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
        "added": [],
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "pad": "<|end_of_text|>",
        "architecture": "llama",
    },
    # the families below: see docs/model_families.md (templates, parsers, reasoning handling)
    "qwen3-coder": {
        "template": "qwen3_coder.jinja",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "added": ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        "bos": None,
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "architecture": "qwen2",
        "calls": "qwen3_coder",
    },
    "mistral": {
        "template": "mistral.jinja",
        # the tekken (v3/v7) control tokens; no [ARGS]: that token marks v11+ tokenizers, whose calls
        # are NAME[ARGS]{json} (vLLM tells the two apart by it)
        "special": [
            "<unk>",
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
            "[TOOL_CALLS]",
            "[SYSTEM_PROMPT]",
            "[/SYSTEM_PROMPT]",
        ],
        "added": [],
        "bos": "<s>",
        "eos": "</s>",
        "pad": "<unk>",
        "architecture": "llama",
        "calls": "mistral",
    },
    "llama4": {
        "template": "llama4.jinja",
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|header_start|>",
            "<|header_end|>",
            "<|eot|>",
            "<|eom|>",
            "<|python_start|>",
            "<|python_end|>",
        ],
        "added": [],
        "bos": "<|begin_of_text|>",
        "eos": "<|eot|>",
        "pad": "<|end_of_text|>",
        "architecture": "llama",
        "calls": "pythonic",
    },
    "deepseek-v3.1": {
        "template": "deepseek_v31.jinja",
        "special": [
            "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            "<｜▁pad▁｜>",
            "<｜User｜>",
            "<｜Assistant｜>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>",
            "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>",
        ],
        "added": ["<think>", "</think>"],
        "bos": "<｜begin▁of▁sentence｜>",
        "eos": "<｜end▁of▁sentence｜>",
        "pad": "<｜▁pad▁｜>",
        "architecture": "llama",
        "calls": "deepseek_v31",
    },
    "kimi-k2": {
        "template": "kimi_k2.jinja",
        "special": [
            "[BOS]",
            "[EOS]",
            "[PAD]",
            "<|im_end|>",
            "<|im_user|>",
            "<|im_assistant|>",
            "<|im_system|>",
            "<|im_middle|>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
        ],
        "added": [],
        "bos": "[BOS]",
        "eos": "<|im_end|>",
        "pad": "[PAD]",
        "architecture": "llama",
        "calls": "kimi_k2",
    },
    "gpt-oss": {
        "template": "gpt_oss.jinja",
        "special": [
            "<|startoftext|>",
            "<|endoftext|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|channel|>",
            "<|constrain|>",
            "<|return|>",
            "<|call|>",
        ],
        "added": [],
        "bos": "<|startoftext|>",
        "eos": "<|return|>",
        "pad": "<|endoftext|>",
        "architecture": "llama",
        "calls": "harmony",
    },
    "glm-4.5": {
        "template": "glm45.jinja",
        "special": [
            "<|endoftext|>",
            "[gMASK]",
            "<sop>",
            "<eop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
        ],
        "added": [
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "<tool_response>",
            "</tool_response>",
        ],
        "bos": None,
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "architecture": "llama",
        "calls": "glm45",
    },
}
FAMILIES["qwen2.5-vl"] = {
    **FAMILIES["qwen"],
    "template": "qwen2_5_vl.jinja",
    "special": [
        *FAMILIES["qwen"]["special"],
        "<|vision_start|>",
        "<|vision_end|>",
        "<|image_pad|>",
        "<|video_pad|>",
    ],
    "architecture": "qwen2_5_vl",
    "calls": "hermes",
    "vision": VL_RECIPE,
}  # a vision-language model: Qwen2.5's tokens and tool calls, a vision tower (tiny_vl.py)
FAMILIES["qwen3-vl"] = {
    **FAMILIES["qwen2.5-vl"],
    "architecture": "qwen3_vl",
    "vision": VL3_RECIPE,
}  # Qwen3-VL's tower (learned absolute positions) and text model; the same tokens and chat format
FAMILIES["qwen3"] = {
    **FAMILIES["qwen"],
    "template": "qwen3.jinja",
    "calls": "hermes",
}  # Qwen2.5's tokens, its own template
VISION_FAMILIES = frozenset(name for name, fam in FAMILIES.items() if "vision" in fam)
"""The families with a vision tower (their ``--model`` names take screenshots)."""


@dataclass(frozen=True)
class TinySpec:
    """The recipe of a tiny model; its hash names the cache directory."""

    family: str = "qwen"
    vocab_size: int = 2048
    hidden_size: int = 64
    intermediate_size: int = 176
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0
    corpus_docs: int = 6000
    extra_corpus_digest: str = ""

    def key(self) -> str:
        recipe: dict[str, Any] = {**asdict(self), "recipe": RECIPE_VERSION}
        fam = FAMILIES.get(self.family, {})
        if "calls" in fam:  # the newer families: their vocabulary and template are part of the recipe
            recipe["family"] = {**fam, "template_source": template_source(self.family)}
        blob = json.dumps(recipe, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def cache_root() -> Path:
    return Path(os.environ.get("TOOLGYM_CACHE") or Path.home() / ".cache" / "toolgym")


def template_source(family: str) -> str:
    name = FAMILIES[family]["template"]
    return resources.files("toolgym.core.llm.local").joinpath("templates", name).read_text()


def ensure_tiny_model(
    family: Family = "qwen",
    *,
    spec: TinySpec | None = None,
    extra_corpus: Iterable[str] | None = None,
    cache_dir: Path | None = None,
    with_weights: bool = True,
) -> Path:
    """Build (once) and return the directory of a tiny model of ``family``.

    ``extra_corpus`` adds text the tokenizer should encode compactly (a task's vocabulary).
    ``with_weights=False`` builds only the tokenizer (no torch needed).
    """
    extra = list(extra_corpus or [])
    spec = spec or TinySpec(family=family)
    if extra:
        spec = TinySpec(
            **{
                **asdict(spec),
                "extra_corpus_digest": hashlib.sha256("\x00".join(extra).encode()).hexdigest()[:12],
            }
        )
    root = cache_dir or cache_root() / "models"
    out = root / f"tiny-{spec.family}-{spec.key()}"
    marker = out / ("READY" if with_weights else "TOKENIZER_READY")
    if marker.exists():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with build_lock(root / f".{out.name}.lock"):  # one build per model at a time, across processes
        if marker.exists():  # built by another process while this one waited
            return out
        return _build(spec, extra, with_weights, out, marker)


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing), held across processes until the block
    ends: a second process building the same model waits, then finds it built, instead of
    replacing the directory under a reader of the first one's copy."""
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(spec: TinySpec, extra: list[str], with_weights: bool, out: Path, marker: Path) -> Path:
    root = out.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=root))
    try:
        if (out / "TOKENIZER_READY").exists():
            for item in out.iterdir():
                if item.is_file():
                    shutil.copy2(item, tmp / item.name)
        else:
            _build_tokenizer(spec, extra, tmp)
            (tmp / "TOKENIZER_READY").write_text("ok\n")
        if with_weights:
            _build_weights(spec, tmp)
            (tmp / "READY").write_text("ok\n")
        (tmp / "toolgym_tiny.json").write_text(json.dumps(asdict(spec), indent=2))
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(tmp, out)
        except OSError:  # another process won the race; its copy is as good as ours
            if not marker.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _build_tokenizer(spec: TinySpec, extra: list[str], out: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    fam = FAMILIES[spec.family]
    tok = Tokenizer(models.BPE())
    qwen_like = fam["architecture"] in ("qwen2", "qwen2_5_vl", "qwen3_vl")
    split = QWEN_SPLIT if qwen_like else LLAMA3_SPLIT
    if qwen_like:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = fam["special"]
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size - len(fam["added"]),
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [*generate_corpus(spec.corpus_docs, seed=spec.seed, family=spec.family), *extra]
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=fam["bos"],
        eos_token=fam["eos"],
        pad_token=fam["pad"],
        unk_token=None,
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    if fam["added"]:
        fast.add_tokens(fam["added"], special_tokens=False)
    fast.chat_template = template_source(spec.family)
    fast.save_pretrained(str(out))


def _build_weights(spec: TinySpec, out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    fam = FAMILIES[spec.family]
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    model: Any
    if fam["architecture"] == "qwen2_5_vl":
        from .tiny_vl import build_vl_weights

        build_vl_weights(spec, tokenizer, common, out)
        return
    if fam["architecture"] == "qwen3_vl":
        from .tiny_vl import build_qwen3_vl_weights

        build_qwen3_vl_weights(spec, tokenizer, common, out)
        return
    if fam["architecture"] == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out), safe_serialization=True)


# -- corpus ----------------------------------------------------------------------------------------

_WORDS = (
    "the a an of to in and or is are was be with for on at by from as that this it which what who how "
    "when where why not no yes all any each some many more most few other such only own same so than too "
    "very can will just should now use find call run print return answer question result value number "
    "sum product total list file code python search query database table row column select from where "
    "order group count price color size buy click item page next back description features reviews "
    "room desk drawer shelf cabinet fridge microwave sink lamp apple mug plate knife book pen key "
    "take put open close go heat cool clean examine look inventory task goal step tool function "
    "error output input string integer float true false none null test pass fail patch repo bug fix "
    "first second third last please compute calculate solve equation x y z total average"
).split()


def generate_corpus(n_docs: int, *, seed: int = 0, family: str = "qwen") -> Iterator[str]:
    """A deterministic synthetic corpus covering what agents read and write."""
    rng = random.Random(seed)
    fam = FAMILIES[family]
    for i in range(n_docs):
        kind = i % 6
        if kind == 0:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 40))]
            text = " ".join(words).capitalize() + rng.choice([".", "?", "!"])
        elif kind == 1:
            a, b = rng.randint(0, 9999), rng.randint(0, 999)
            op = rng.choice(["+", "-", "*", "/", "**", "%"])
            text = f"What is {a} {op} {b}? print({a} {op} {b}) -> {rng.randint(0, 99999)}; x = {a}\ny = x {op} {b}\n"
        elif kind == 2:
            name = rng.choice(["run_python", "search", "sql_query", "calculator", "bash", "browser_click"])
            arg = rng.choice(["code", "query", "command", "expression", "element_id"])
            val = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 6)))
            call = json.dumps({"name": name, "arguments": {arg: val}})
            text = f"<tool_call>\n{call}\n</tool_call>" if family == "qwen" else call
            if "calls" in fam:
                text = _call_text(fam["calls"], name, {arg: val}, rng)
        elif kind == 3:
            var = rng.choice(["n", "total", "result", "items", "value"])
            text = (
                f"def {rng.choice(_WORDS)}_{rng.choice(_WORDS)}({var}):\n"
                f"    for i in range({rng.randint(1, 100)}):\n        {var} += i * {rng.randint(1, 9)}\n"
                f"    return {var}\n\nprint({rng.choice(_WORDS)}_{var}({rng.randint(0, 50)}))\n"
            )
        elif kind == 4:
            head = [t for t in fam["special"] + fam["added"]]
            text = "".join(
                rng.choice(head) + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 8)))
                for _ in range(3)
            )
        else:
            cmd = rng.choice(["search", "click", "go to", "take", "put", "open"])
            obj = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
            text = f"{cmd}[{obj}]" if cmd in ("search", "click") else f"{cmd} {obj} {rng.randint(1, 5)}"
        yield text


def _call_text(style: str, name: str, args: dict[str, Any], rng: random.Random) -> str:
    """A tool call as the family writes it (for the tokenizer to learn its markup)."""
    if style == "hermes":
        think = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 8)))
        return f"<think>\n{think}\n</think>\n\n<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"
    if style == "qwen3_coder":
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if style == "deepseek_v31":
        return f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{json.dumps(args)}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    if style == "kimi_k2":
        return (
            f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:{rng.randint(0, 3)}<|tool_call_argument_begin|>"
            f"{json.dumps(args)}<|tool_call_end|><|tool_calls_section_end|>"
        )
    if style == "harmony":
        think = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 8)))
        return (
            f"<|channel|>analysis<|message|>{think}<|end|><|start|>assistant<|channel|>commentary to=functions.{name} "
            f"<|constrain|>json<|message|>{json.dumps(args)}<|call|>"
        )
    if style == "glm45":
        pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items())
        return f"<|assistant|>\n<think></think>\n<tool_call>{name}\n{pairs}</tool_call><|observation|>"
    if style == "mistral":
        return "[TOOL_CALLS]" + json.dumps(
            [{"name": name, "arguments": args, "id": f"{rng.getrandbits(36):09x}"}]
        )
    kwargs = ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())
    return f"[{name}({kwargs})]"


def load_tiny_tokenizer(family: Family = "qwen") -> Any:
    """The tiny model's tokenizer (builds it without weights if needed)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_tiny_model(family, with_weights=False)))
