"""BM25 over passages with ``bm25s``, set up as pyserini's Lucene BM25 (the baseline Search-R1 uses).

Analysis: lowercase, split on non-alphanumerics, English stop words dropped, Snowball English
stemming (PyStemmer). Scoring: Lucene's BM25 with k1 = 0.9, b = 0.4. A query returns at most
``k`` passages that share a term with it, best first; equal scores go to the earlier passage.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import Stemmer

from toolgym import ConfigError
from toolgym.plugins.bm25s_safe import bm25s

K1, B = 0.9, 0.4
STOPWORDS = frozenset(
    "a about an and are as at be been but by can did do does for from had has have he her his how i if in "
    "into is it its no not of on or she so such that the their them then there these they this to was were "
    "what when where which who whom why will with you".split()
)
_TOKEN = re.compile(r"[a-z0-9]+")
_stemmer = Stemmer.Stemmer("english")
_stemmer_lock = threading.Lock()  # PyStemmer objects are not thread-safe


def analyze(text: str) -> list[str]:
    """Text → index terms."""
    tokens = [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]
    with _stemmer_lock:
        return _stemmer.stemWords(tokens)


class BM25Index:
    """A BM25 index over ``n`` passages (numbered 0..n-1). ``search`` is thread-safe."""

    def __init__(self, retriever: bm25s.BM25, size: int) -> None:
        self.retriever = retriever
        self.size = size

    @classmethod
    def build(cls, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> BM25Index:
        """Index ``texts``; ``progress(n)`` is called as batches of ``n`` texts are analysed."""
        if not texts:
            raise ConfigError("cannot build a BM25 index over no passages")
        tokens: list[list[str]] = []
        for start in range(0, len(texts), 1024):
            batch = texts[start : start + 1024]
            tokens.extend(analyze(t) for t in batch)
            if progress is not None:
                progress(len(batch))
        retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
        retriever.index(tokens, show_progress=False)
        return cls(retriever, len(texts))

    def save(self, directory: str | Path) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(path))
        (path / "toolgym_bm25.json").write_text(json.dumps({"size": self.size, "k1": K1, "b": B}))

    @classmethod
    def load(cls, directory: str | Path) -> BM25Index:
        path = Path(directory)
        meta = path / "toolgym_bm25.json"
        if not meta.is_file():
            raise ConfigError(
                f"{str(path)!r} holds no BM25 index; build one with `toolgym index build CORPUS --out DIR`"
            )
        size = int(json.loads(meta.read_text())["size"])
        return cls(bm25s.BM25.load(str(path)), size)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (zeros when no query term is indexed)."""
        vocab = self.retriever.vocab_dict
        terms = [t for t in analyze(query) if t in vocab]
        if not terms:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self.retriever.get_scores(terms), dtype=np.float32)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The best ``k`` (passage number, score) pairs for ``query``, best first, scores > 0."""
        return top_k(self.scores(query), k, positive_only=True)


def top_k(scores: np.ndarray, k: int, *, positive_only: bool = False) -> list[tuple[int, float]]:
    """Indices of the ``k`` highest scores, best first; ties go to the lower index."""
    n = min(k, len(scores))
    if n <= 0:
        return []
    if n < len(scores):
        threshold = np.partition(scores, len(scores) - n)[len(scores) - n]
        candidates = np.nonzero(scores >= threshold)[0]
    else:
        candidates = np.arange(len(scores))
    if positive_only:
        candidates = candidates[scores[candidates] > 0]
    order = np.lexsort((candidates, -scores[candidates]))
    return [(int(i), float(scores[i])) for i in candidates[order][:n]]
