"""Fixtures for the model-backend tests: the tiny model, a taught copy of it, and model servers
over both, running on loopback ports for the whole session (faults reset before each test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.llm.serving.server import ServerThread

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
HELLO_TEXT = "Hello! How can I help you today?"
LESSONS = [
    ([{"role": "user", "content": "What is the weather in Paris?"}], TOOL_CALL_TEXT, [WEATHER_TOOL]),
    ([{"role": "user", "content": "Say hello."}], HELLO_TEXT, None),
]


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    from toolgym.core.llm.local.tiny import ensure_tiny_model

    return ensure_tiny_model("qwen")


@pytest.fixture(scope="session")
def taught_dir() -> Path:
    """The tiny model taught to call get_weather for Paris and to say hello (cached)."""
    from toolgym.core.llm.testing import ensure_taught_model

    return ensure_taught_model(LESSONS)


@pytest.fixture(scope="session")
def local(tiny_dir: Path) -> Iterator[TransformersBackend]:
    """An in-process backend over the tiny model (the reference the servers are compared with)."""
    backend = TransformersBackend(tiny_dir, max_batch_size=8)
    yield backend
    _close(backend)


@pytest.fixture(scope="session")
def _tiny_server(tiny_dir: Path) -> Iterator[ServerThread]:
    backend = TransformersBackend(tiny_dir, model_name="tiny", max_batch_size=8)
    with ServerThread(backend, owns_backend=True) as server:
        yield server


@pytest.fixture()
def server(_tiny_server: ServerThread) -> ServerThread:
    """The tiny model's server, with no faults injected."""
    f = _tiny_server.faults
    f.fail(0)
    f.latency_s, f.retry_after_s = 0.0, None
    return _tiny_server


@pytest.fixture(scope="session")
def taught_server(taught_dir: Path) -> Iterator[ServerThread]:
    backend = TransformersBackend(taught_dir, model_name="taught")
    with ServerThread(backend, owns_backend=True) as server:
        yield server


def _close(backend: Any) -> None:
    import asyncio

    asyncio.run(backend.aclose())
