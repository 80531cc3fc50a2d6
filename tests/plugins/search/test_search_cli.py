"""``toolgym index build`` and ``toolgym index search`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.plugins.search.dense import dense_available
from toolgym.plugins.search.index import SearchIndex


def test_build_and_search(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps(
                {"id": f"p{i}", "title": f"Lighthouse {i}", "text": f"Lighthouse {i} stands on rock {i * 7}."}
            )
            + "\n"
            for i in range(40)
        )
    )
    runner = CliRunner()
    result = runner.invoke(app, ["index", "build", str(corpus), "--out", str(tmp_path / "idx"), "--no-dense"])
    assert result.exit_code == 0, result.output
    assert "index of 40 passages (bm25) written to" in result.output
    assert "BM25 (analysing passages): 40/40" in result.output  # plain progress lines when not a terminal
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["documents"] == 40 and manifest["methods"] == ["bm25"] and manifest["dense_model"] is None
    again = runner.invoke(app, ["index", "build", str(corpus), "--out", str(tmp_path / "idx")])
    assert again.exit_code != 0 and "already holds an index; pass --force" in str(again.exception)
    found = runner.invoke(app, ["index", "search", str(tmp_path / "idx"), "rock 91", "-k", "1"])
    assert (
        found.exit_code == 0
        and found.output.strip() == "Doc 1(Title: Lighthouse 13) Lighthouse 13 stands on rock 91."
    )
    missing = runner.invoke(
        app, ["index", "build", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "x")]
    )
    assert "does not exist" in str(missing.exception)


def test_build_dense_when_the_model_is_installed(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"id": "a", "contents": "Kettle\\nA kettle boils water."}\n'
        '{"id": "b", "contents": "Anvil\\nA smith strikes iron on an anvil."}\n'
    )
    result = CliRunner().invoke(
        app, ["index", "build", str(corpus), "--out", str(tmp_path / "idx"), "--force"]
    )
    assert result.exit_code == 0, result.output
    index = SearchIndex.load(tmp_path / "idx")
    if dense_available():
        assert index.methods == ("bm25", "dense", "hybrid")
        assert index.search("heating something to drink", 1, "dense")[0].document.id == "a"
    else:
        assert index.methods == ("bm25",)
