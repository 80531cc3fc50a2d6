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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
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
        return pieces

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        added, cached, encode = self._added, self._cached, self._encode
        split = self._split_all if text.isascii() else self._split_raw
        for i, piece in enumerate(split(text)):
            if i & 1:
                out.append(added[piece])
            elif piece:
                out.extend(cached(piece) if len(piece) <= CACHE_MAX_CHARS else encode(piece))
        return out

    def cache_info(self) -> Any:
        return self._cached.cache_info()


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
