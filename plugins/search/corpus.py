"""Documents, search hits, and the JSONL corpus format.

A corpus is a JSONL file, one document per line, with an ``id`` and either ``contents`` (the
Search-R1 / FlashRAG layout: the title on the first line, the text after it) or ``title`` and
``text``. ``id`` may be missing: the line number is used. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym import ConfigError

SHIPPED_CORPUS = Path(__file__).parent / "data" / "corpus.jsonl"
"""The invented-archipelago corpus shipped with toolgym (298 passages; see ``worldgen``)."""
SHIPPED_QA = Path(__file__).parent / "data" / "qa.jsonl"
"""Questions over the shipped corpus, with answers, supporting passage ids and oracle queries."""


@dataclass(frozen=True, slots=True)
class Document:
    """One passage. ``contents`` is what is indexed and returned: ``title\\ntext``."""

    id: str
    contents: str

    @property
    def title(self) -> str:
        """The first line of ``contents`` without surrounding quotes (empty if there is one line)."""
        head, sep, _ = self.contents.partition("\n")
        return head.strip().strip('"') if sep else ""

    @property
    def text(self) -> str:
        head, sep, rest = self.contents.partition("\n")
        return rest.strip() if sep else head.strip()

    def to_json(self) -> dict[str, str]:
        """The Search-R1 wire form of a document: ``{"id", "contents"}``."""
        return {"id": self.id, "contents": self.contents}

    @classmethod
    def from_json(cls, obj: Any, fallback_id: str = "") -> Document:
        """A document from a corpus line or a retrieval-server answer; ConfigError if neither form fits."""
        if not isinstance(obj, dict):
            raise ConfigError(f"a document must be a JSON object, got {type(obj).__name__}")
        doc_id = str(obj.get("id", obj.get("docid", obj.get("_id", fallback_id))))
        contents = obj.get("contents")
        if not isinstance(contents, str):
            title, text = obj.get("title"), obj.get("text")
            if not isinstance(text, str):
                raise ConfigError(f"document {doc_id!r} has neither a 'contents' string nor a 'text' string")
            contents = f"{title}\n{text}" if isinstance(title, str) and title else text
        return cls(doc_id, contents)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a document and its score (higher is better; the scale depends on the method)."""

    document: Document
    score: float

    def to_json(self) -> dict[str, Any]:
        return {"document": self.document.to_json(), "score": self.score}


def iter_corpus(path: str | Path) -> Iterator[Document]:
    """Stream the documents of a JSONL corpus; ConfigError naming the line on a bad one."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"corpus file {str(path)!r} does not exist; give a JSONL file with one document per line"
        )
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{path}:{n}: not valid JSON ({exc.msg}); each line must be one JSON document"
                ) from None
            try:
                yield Document.from_json(obj, fallback_id=str(n - 1))
            except ConfigError as exc:
                raise ConfigError(f"{path}:{n}: {exc}") from None


def load_corpus(path: str | Path) -> list[Document]:
    """All documents of a JSONL corpus; ConfigError if it is empty or ids repeat."""
    docs = list(iter_corpus(path))
    if not docs:
        raise ConfigError(f"corpus {str(path)!r} holds no documents")
    seen: set[str] = set()
    for d in docs:
        if d.id in seen:
            raise ConfigError(f"corpus {str(path)!r}: document id {d.id!r} appears twice; ids must be unique")
        seen.add(d.id)
    return docs


def write_corpus(docs: list[Document], path: str | Path) -> None:
    """Write documents as JSONL in the ``{"id", "contents"}`` form."""
    with Path(path).open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
