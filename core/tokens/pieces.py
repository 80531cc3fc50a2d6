"""Tokenizing chat renders piece by piece, with the pieces that repeat cached.

A Hugging Face ``tokenizers`` pipeline first cuts the input at its added tokens (``<|im_start|>``,
``<tool_response>``, ...) and only then normalizes, pre-tokenizes and runs the model on each piece
between them. Encoding those pieces one at a time therefore gives exactly the ids of encoding the
whole text. Chat renders are mostly pieces that recur — the system prompt with its tool schemas,
role headers, tool-response framing — so a small cache of piece → ids takes most of the
tokenizer's work off the rollout hot path. Only the pieces that are new (a task's question, a
tool's output) are tokenized.

The equivalence needs the added tokens to match plainly (no ``lstrip``/``rstrip``/``single_word``)
and nothing that treats the first piece of a text differently (a Metaspace
``prepend_scheme="first"``). Tokens marked ``normalized`` are matched by the tokenizer after
normalization, in a second pass: they are split out here only where normalization cannot change
the text (ASCII text, a Unicode normal form as the normalizer, ASCII token contents); elsewhere
the pieces between the other added tokens are tokenized with them inside, as the tokenizer would. :meth:`PieceEncoder.for_tokenizer` checks both and then compares the
two ways on probe texts; where anything differs it returns None and callers encode whole texts.

A piece that is not in the cache (a tool's output, a task's question) goes one level further down
where that is exact: for the byte-level BPE tokenizers of the Qwen 2/3 and Llama 3 lines (and the
families that reuse their split pattern), a piece of printable ASCII (plus newline and tab) is cut
into the tokenizer's own pre-tokens with the same split pattern restated for ASCII (there the
Unicode classes are plain ranges and both regex engines agree), and each pre-token's ids come from
a cache of words, the BPE model tokenizing only the words it has not seen. BPE never merges across
pre-tokens and the normalizers allowed here leave ASCII unchanged, so the ids are the tokenizer's;
:class:`WordEncoder` is built only for a known pattern and model setup, and only after it agreed
with the tokenizer on probe texts. ``encode(text, words=False)`` skips this level (the reference).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

CACHE_ENTRIES = 1024
"""Distinct pieces kept (least recently used are dropped)."""
CACHE_MAX_CHARS = 8192
"""Longer pieces are tokenized every time: they are rarely repeated and would crowd the cache."""

_UNICODE_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})
_PROBE_TEXTS = (
    "",
    "x",
    " hello",
    "hello ",
    "\n",
    "\n\n",
    "  two  spaces ",
    "é e\u0301",
    "1234",
    "<",
    ">",
    "|",
    "a\tb",
    "日本語",
    "\u212a",
    "ｔool",
)


class PieceEncoder:
    """``encode(text)`` equal to ``tokenizer.encode(text, add_special_tokens=False).ids``."""

    def __init__(
        self,
        encode: Callable[[str], list[int]],
        raw: dict[str, int],
        normalized: dict[str, int] | None = None,
    ) -> None:
        self._encode = encode
        self._added = {**raw, **(normalized or {})}
        self._split_all = _splitter(self._added)
        self._split_raw = _splitter(raw) if normalized else self._split_all
        self._cached = lru_cache(maxsize=CACHE_ENTRIES)(lambda piece: tuple(encode(piece)))
        self.words: WordEncoder | None = None
        """Encodes ASCII pieces word by word (set by :meth:`for_tokenizer` where that is exact)."""
        self._cached_words = self._cached

    @classmethod
    def for_tokenizer(cls, fast: Any) -> PieceEncoder | None:
        """A piece encoder for a ``tokenizers.Tokenizer``, or None where pieces would not add up
        to the whole (see the module docstring)."""
        try:
            decoder = fast.get_added_tokens_decoder()
            spec = json.loads(fast.to_str())
        except Exception:
            return None
        if not decoder or getattr(fast, "encode_special_tokens", False):
            return None
        raw: dict[str, int] = {}
        normalized: dict[str, int] = {}
        for token_id, tok in decoder.items():
            if tok.lstrip or tok.rstrip or tok.single_word or not tok.content:
                return None
            (normalized if tok.normalized else raw)[tok.content] = int(token_id)
        if normalized and not (_keeps_ascii(spec.get("normalizer")) and all(c.isascii() for c in normalized)):
            return None
        if '"prepend_scheme": "first"' in json.dumps(spec.get("pre_tokenizer")):
            return None

        def encode(text: str) -> list[int]:
            return list(fast.encode(text, add_special_tokens=False).ids)

        pieces = cls(encode, raw, normalized)
        tokens = list(pieces._added)[:16]
        for i, text in enumerate(_PROBE_TEXTS):
            for token in tokens:
                probe = f"{text}{token}{_PROBE_TEXTS[-1 - i]}{token}{token}{text}"
                if pieces.encode(probe) != encode(probe):
                    return None
        pieces._cached.cache_clear()
        words = WordEncoder.for_tokenizer(fast, spec)
        if words is not None:
            pieces.words = words
            pieces._cached_words = lru_cache(maxsize=CACHE_ENTRIES)(lambda piece: tuple(words.encode(piece)))
        return pieces

    def encode(self, text: str, *, words: bool = True) -> list[int]:
        out: list[int] = []
        added = self._added
        if text.isascii():  # every added token is split out: the pieces are plain text
            split = self._split_all
            encode = self.words.encode if words and self.words is not None else self._encode
            cached = self._cached_words if words else self._cached
        else:
            split, encode, cached = self._split_raw, self._encode, self._cached
        for i, piece in enumerate(split(text)):
            if i & 1:
                out.append(added[piece])
            elif piece:
                out.extend(cached(piece) if len(piece) <= CACHE_MAX_CHARS else encode(piece))
        return out

    def cache_info(self) -> Any:
        """Hits and misses of the piece cache ASCII text goes through (the one ahead of the word
        level, where there is one)."""
        return self._cached_words.cache_info()


# The published split patterns of byte-level BPE tokenizers, restated for ASCII text: \p{L} is
# [A-Za-z] there and \p{N} is [0-9]; \s under re.ASCII is [ \t\n\r\f\v], as in the tokenizer.
_ASCII_SPLITS = {
    # Qwen 2 / 2.5 / 3: single digits
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""": (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    ),
    # Llama 3: up to three digits
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""": (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    ),
}
_NOT_WORD_SAFE = re.compile(r"[^\x20-\x7e\n\t]")
"""Characters the word path leaves to the tokenizer (control characters, \r, anything non-ASCII)."""
WORD_CACHE_ENTRIES = 1 << 15
"""Distinct words kept (the whole cache is dropped when it fills: words recur, so it refills fast)."""
WORD_MAX_CHARS = 64
"""Longer pre-tokens (a run of spaces, a long symbol string) are tokenized every time."""
_WORD_PROBES = (
    "hello world",
    "  two  spaces  ",
    "a   \n\n  b\n",
    "\n\n\n",
    " \n \t x\t\ty",
    "It's I'LL we'Re you'd 'm 'x",
    "1234567 12,345.67 v2.0",
    "(foo) [bar] {baz}!!! ...?",
    '{"name": "lookup", "arguments": {"key": "x"}}',
    "def f(x):\n    return x ** 2  # done\n",
    "a\tb\t\tc   ",
    "      ",
    "<tag>x</tag> <|not|> token",
)


class WordEncoder:
    """Encodes a piece of printable ASCII (with newlines and tabs) by the tokenizer's own
    pre-tokens, each looked up in a cache of words; what is not such a piece goes to ``encode``."""

    def __init__(self, split: re.Pattern[str], model: Any, encode: Callable[[str], list[int]]) -> None:
        self._findall = split.findall
        self._tokenize = model.tokenize
        self._encode = encode
        self._words: dict[str, Sequence[int]] = {}
        self._bytes = str.maketrans({chr(b): c for b, c in _byte_level_chars().items() if b < 128})

    @classmethod
    def for_tokenizer(cls, fast: Any, spec: dict[str, Any]) -> WordEncoder | None:
        """The word encoder of a ``tokenizers.Tokenizer`` whose pre-tokenizer is a known split
        pattern then byte-level, whose model is BPE without dropout and whose normalizer keeps
        ASCII; None otherwise, or where it disagrees with the tokenizer on a probe text."""
        pre = spec.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
        model = spec.get("model") or {}
        if (
            not steps
            or len(steps) != 2
            or model.get("type") != "BPE"
            or model.get("dropout")
            or not _keeps_ascii(spec.get("normalizer"))
        ):
            return None
        split, byte_level = steps
        pattern = (split.get("pattern") or {}).get("Regex")
        if (
            split.get("type") != "Split"
            or split.get("behavior") != "Isolated"
            or split.get("invert")
            or pattern not in _ASCII_SPLITS
            or byte_level.get("type") != "ByteLevel"
            or byte_level.get("add_prefix_space")
            or byte_level.get("use_regex")
        ):
            return None

        def encode(text: str) -> list[int]:
            return list(fast.encode(text, add_special_tokens=False).ids)

        words = cls(re.compile(_ASCII_SPLITS[pattern], re.ASCII), fast.model, encode)
        for probe in _WORD_PROBES:
            if words.encode(probe) != encode(probe):
                return None
        words._words.clear()
        return words

    def encode(self, piece: str) -> list[int]:
        if _NOT_WORD_SAFE.search(piece) is not None:
            return self._encode(piece)
        out: list[int] = []
        cache = self._words
        for word in self._findall(piece):
            ids = cache.get(word)
            if ids is None:
                ids = [t.id for t in self._tokenize(word.translate(self._bytes))]
                if len(word) <= WORD_MAX_CHARS:
                    if len(cache) >= WORD_CACHE_ENTRIES:
                        cache.clear()
                    cache[word] = ids
            out.extend(ids)
        return out


def _byte_level_chars() -> dict[int, str]:
    """Byte → the character byte-level BPE writes it as (GPT-2's table, as ``tokenizers`` has it)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def _splitter(tokens: dict[str, int]) -> Callable[[str], list[str]]:
    """``re.split`` at the tokens, longest first (the tokenizer matches leftmost-longest); the
    result alternates text and token."""
    if not tokens:
        return lambda text: [text]
    contents = sorted(tokens, key=len, reverse=True)
    return re.compile("(" + "|".join(re.escape(c) for c in contents) + ")").split


def _keeps_ascii(normalizer: Any) -> bool:
    """Whether the normalizer leaves ASCII text as it is (none, or Unicode normal forms)."""
    if normalizer is None:
        return True
    if normalizer.get("type") == "Sequence":
        return all(_keeps_ascii(n) for n in normalizer.get("normalizers", []))
    return normalizer.get("type") in _UNICODE_FORMS
