"""Fixtures for the verl bridge tests: the tiny model and its in-process backend, and a test
plugin installed as the agent loop's registry. The test modules skip themselves without verl."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh test plugin, installed as the agent loop's registry (captures finished trajectories)."""
    from verl_helpers import TestPlugin

    from toolgym.core.builtin import parsers as builtin
    from toolgym.core.registry import Registry
    from toolgym.training.verl.agent_loop import ToolgymAgentLoop

    plug = TestPlugin()
    reg = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("test", plug)])
    monkeypatch.setattr(ToolgymAgentLoop, "registry_factory", staticmethod(lambda: reg))
    return plug


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from toolgym.core.llm.local.tiny import ensure_tiny_model

    return ensure_tiny_model("qwen")


@pytest.fixture(scope="session")
def tiny_backend(tiny_model: Path) -> Iterator[Any]:
    """The in-process transformers backend on the tiny model (one worker thread for the session)."""
    from toolgym.core.llm.local.transformers_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model))
    yield backend
    asyncio.run(backend.aclose())
