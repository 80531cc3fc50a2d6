"""BM25 product search with ``bm25s``, set up like the published Lucene (pyserini) index.

Each product is indexed as one document: its title, description, first feature bullet and the
text of its options (``color: black, white, and size: s, m``), lowercased, exactly the fields
the original index holds. Tokens are analysed like Lucene's English analyser (lowercase, English
possessive removed, Lucene's English stop words dropped, Porter stemming) and scored with BM25
(k1 = 0.9, b = 0.4, pyserini's defaults). A query returns at most 50 products, best first; ties
go to the product listed first in the catalog, as Lucene breaks them by document id; products
sharing no term with the query are not returned.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import Stemmer

from toolgym.plugins.bm25s_safe import bm25s

from .products import Product

SEARCH_RETURN_N = 50
K1, B = 0.9, 0.4
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
_TOKEN = re.compile(r"[a-z0-9]+(?:[.'’][a-z0-9]+)*")
_stemmer_lock = threading.Lock()
_stemmer = Stemmer.Stemmer("porter")


def analyze(text: str) -> list[str]:
    """Text → index terms (Lucene English analyser, approximately)."""
    tokens = []
    for tok in _TOKEN.findall(text.lower()):
        if tok.endswith(("'s", "’s")):
            tok = tok[:-2]
        if tok and tok not in LUCENE_STOPWORDS:
            tokens.append(tok)
    with _stemmer_lock:  # PyStemmer objects are not thread-safe
        return _stemmer.stemWords(tokens)


def document_text(product: Product) -> str:
    """The indexed text of a product, as the published index builds it."""
    option_texts = [f"{name}: {', '.join(values)}" for name, values in product.get("options", {}).items()]
    bullets = product.get("BulletPoints") or [""]
    return " ".join(
        [product["Title"], product["Description"], bullets[0] if bullets else "", ", and ".join(option_texts)]
    ).lower()


class ProductSearch:
    """A BM25 index over a catalog's products; ``search`` is thread-safe and cached.

    ``cache_dir`` keeps a built index on disk (worth it for the full 1.18M-product catalog),
    keyed by a digest of the documents.
    """

    def __init__(
        self, products: Sequence[Product], *, cache_dir: str | Path | None = None, cache_size: int = 4096
    ) -> None:
        self.asins = [p["asin"] for p in products]
        docs = [document_text(p) for p in products]
        self.retriever = self._load_or_build(docs, cache_dir)
        self._cache: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @staticmethod
    def _load_or_build(docs: list[str], cache_dir: str | Path | None) -> bm25s.BM25:
        path: Path | None = None
        if cache_dir is not None:
            h = hashlib.blake2b(digest_size=10)
            for d in docs:
                h.update(d.encode("utf-8", "surrogatepass"))
                h.update(b"\x00")
            path = Path(cache_dir).expanduser() / f"bm25-{h.hexdigest()}"
            if (path / "params.index.json").exists():
                return bm25s.BM25.load(str(path))
        retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
        retriever.index([analyze(d) for d in docs], show_progress=False)
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
            retriever.save(str(path))
            (path / "toolgym.json").write_text(json.dumps({"documents": len(docs), "k1": K1, "b": B}))
        return retriever

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the best ``k`` products for ``query``, best first."""
        key = f"{k}\x1f{query}"
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return list(hit)
        result = tuple(self._rank(query, k))
        with self._lock:
            self._cache[key] = result
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return list(result)

    def _rank(self, query: str, k: int) -> list[str]:
        # "" (Porter stems a lone "s" to it) is in bm25s's vocabulary but not in its matrix: bm25s
        # raised on a query holding it and an agent's episode ended in an error. The documents keep
        # their analysis, so indexes built and cached before rank as they did.
        terms = [t for t in analyze(query) if t and t in self.retriever.vocab_dict]
        if not terms:
            return []
        scores = np.asarray(self.retriever.get_scores(terms), dtype=np.float64)
        n = min(k, len(scores))
        if n == 0:
            return []
        threshold = np.partition(scores, len(scores) - n)[len(scores) - n]
        candidates = np.nonzero((scores >= threshold) & (scores > 0))[0]
        # Sort by score descending, then catalog position ascending (Lucene's tie-break).
        order = np.lexsort((candidates, -scores[candidates]))
        return [self.asins[i] for i in candidates[order][:n]]
