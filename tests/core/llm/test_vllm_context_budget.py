"""A server's context limit caps the engine's budget: an episode that outgrows a server toolgym did
not start truncates (``truncation_reason``) instead of ending on HTTP 400. The toolgym model server
stands in for vLLM (it reports ``max_model_len`` and refuses longer prompts with 400)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.core.helpers import test_registry
from toolgym import EngineConfig, RolloutEngine, Status, Trajectory, plan_episodes
from toolgym.core.llm.clients.openai import OpenAICompletionsBackend
from toolgym.core.llm.clients.sglang import SGLangBackend
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.llm.serving.server import ServerThread
from toolgym.core.rollout.policy import ModelPolicy

CONTEXT = 192
"""The context length the stand-in server reports and enforces (vLLM's --max-model-len)."""


@pytest.fixture(scope="module")
def short_server(tiny_dir: Path) -> Iterator[ServerThread]:
    backend = TransformersBackend(tiny_dir, model_name="tiny", max_batch_size=8)
    backend.max_context = CONTEXT  # reported as max_model_len on /v1/models; longer prompts get HTTP 400
    with ServerThread(backend, owns_backend=True) as server:
        yield server


@pytest.mark.parametrize("client_cls", [OpenAICompletionsBackend, SGLangBackend])
def test_a_long_episode_truncates_at_the_servers_context_instead_of_failing(
    short_server: ServerThread, client_cls: type
) -> None:
    client = client_cls(short_server.url)
    assert client.max_context_len == CONTEXT
    config = EngineConfig(
        max_turns=40, max_tokens_per_turn=24, max_tokens_per_trajectory=8192, max_live_episodes=2
    )
    trajectories: list[Trajectory] = []
    engine = RolloutEngine(
        registry=test_registry(),
        policy=ModelPolicy(client, config),
        config=config,
        env_kwargs={"target": 1000},
        on_trajectory=trajectories.append,
    )

    async def run() -> None:
        try:
            await engine.run(plan_episodes("counter", num_tasks=2, group_size=1))
        finally:
            await client.aclose()

    asyncio.run(run())
    assert len(trajectories) == 2
    for t in trajectories:
        assert t.status is Status.OK, t.status_reason
        assert t.truncated and "context budget" in (t.truncation_reason or "")
        calls = [s.llm for s in t.steps if s.llm is not None]
        assert calls and all(c.prompt_len + c.completion_tokens <= CONTEXT for c in calls)  # what vLLM admits
    assert config.max_tokens_per_trajectory == 8192  # the caller's config is not changed
