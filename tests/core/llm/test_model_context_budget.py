"""An in-process model's own context length caps the engine's budget: the tiny model
has 4,096 positions and the default budget is 8,192, so without the cap every long episode ended
on "prompt … does not fit the model's context; shorten it" (an error) instead of truncating."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.core.helpers import test_registry
from toolgym import EngineConfig, RolloutEngine, Status, Trajectory, plan_episodes
from toolgym.core.llm.clients.server_info import fit_context_budget
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.rollout.policy import ModelPolicy

CONTEXT = 160
"""A context far below the default budget: the counter env's growing observations reach it in a few turns."""


def test_the_default_budget_is_the_models_own_context(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, model_name="tiny", max_batch_size=1)
    try:
        config = EngineConfig()
        assert (
            backend.max_context_len == backend.max_context == 4096
        )  # the tiny model's max_position_embeddings
        assert (
            fit_context_budget(config, ModelPolicy(backend, config)).max_tokens_per_trajectory == 4096
        )  # min(8192, 4096)
        smaller = EngineConfig(max_tokens_per_trajectory=1000)
        assert (
            fit_context_budget(smaller, ModelPolicy(backend, smaller)) is smaller
        )  # a smaller configured budget stays
    finally:
        asyncio.run(backend.aclose())


def test_an_episode_that_outgrows_the_models_context_truncates_with_status_ok(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, model_name="tiny", max_batch_size=2)
    backend.max_context = CONTEXT
    config = EngineConfig(max_turns=40, max_tokens_per_turn=24, max_live_episodes=2)  # default budget: 8192
    trajectories: list[Trajectory] = []
    engine = RolloutEngine(
        registry=test_registry(),
        policy=ModelPolicy(backend, config),
        config=config,
        env_kwargs={"target": 1000},
        on_trajectory=trajectories.append,
    )

    async def run() -> None:
        try:
            await engine.run(plan_episodes("counter", num_tasks=2, group_size=1))
        finally:
            await backend.aclose()

    asyncio.run(run())
    assert len(trajectories) == 2
    for t in trajectories:
        assert t.status is Status.OK, t.status_reason
        assert t.truncated and not t.terminated
        assert "context" in (t.truncation_reason or "") and str(CONTEXT) in (t.truncation_reason or ""), (
            t.truncation_reason
        )
        calls = [s.llm for s in t.steps if s.llm is not None]
        assert calls and all(c.prompt_len + c.completion_tokens <= CONTEXT for c in calls)
    assert config.max_tokens_per_trajectory == 8192  # the caller's config is not changed
