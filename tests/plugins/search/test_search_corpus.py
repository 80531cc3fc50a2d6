"""The corpus format and the shipped corpus: loading, errors, reproducibility, question consistency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.core.errors import ConfigError
from toolgym.plugins.search import worldgen
from toolgym.plugins.search.corpus import SHIPPED_CORPUS, SHIPPED_QA, Document, load_corpus
from toolgym.plugins.search.qa.env import load_questions


def test_document_forms() -> None:
    d = Document.from_json({"id": "7", "contents": '"Oslo"\nThe capital of Norway.'})
    assert d.title == "Oslo" and d.text == "The capital of Norway."
    d2 = Document.from_json({"id": 3, "title": "Bergen", "text": "A city."})
    assert (
        d2.id == "3"
        and d2.contents == "Bergen\nA city."
        and d2.to_json() == {"id": "3", "contents": "Bergen\nA city."}
    )
    d3 = Document.from_json({"text": "no title here"}, fallback_id="9")
    assert d3.id == "9" and d3.title == "" and d3.text == "no title here"
    with pytest.raises(ConfigError, match="neither a 'contents' string nor a 'text'"):
        Document.from_json({"id": "x", "body": "?"})


def test_load_corpus_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_corpus(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "contents": "x"}\n{not json}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: not valid JSON"):
        load_corpus(bad)
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "a", "contents": "x"}\n\n{"id": "a", "contents": "y"}\n')
    with pytest.raises(ConfigError, match="appears twice"):
        load_corpus(dup)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="holds no documents"):
        load_corpus(empty)


def test_shipped_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    worldgen.write(tmp_path)
    assert (tmp_path / "corpus.jsonl").read_bytes() == SHIPPED_CORPUS.read_bytes()
    assert (tmp_path / "qa.jsonl").read_bytes() == SHIPPED_QA.read_bytes()


def test_shipped_questions_are_answered_by_their_passages() -> None:
    docs = {d.id: d for d in load_corpus(SHIPPED_CORPUS)}
    assert 250 <= len(docs) <= 400
    questions = load_questions()
    assert len(questions) >= 300 and {q.metadata["type"] for q in questions} == {"single", "two-hop"}
    for q in questions:
        support = q.metadata["support"]
        assert all(s in docs for s in support), q.id
        # the answer is stated in the last supporting passage; a two-hop question's bridge entity in the first
        assert q.answer[0] in docs[support[-1]].contents, q.id
        assert len(q.metadata["hops"]) == len(support)
    raw = [json.loads(line) for line in SHIPPED_QA.read_text().splitlines()]
    assert len({r["question"] for r in raw}) == len(raw), "questions repeat"
