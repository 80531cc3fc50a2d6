"""A setting the engine and the episode context both have takes one default."""

from __future__ import annotations

import inspect

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.sandbox import ACQUIRE_TIMEOUT_S


def test_one_default_wait_for_a_sandbox() -> None:
    context_default = inspect.signature(EpisodeContext).parameters["acquire_timeout_s"].default
    assert context_default == EngineConfig().sandbox_acquire_timeout_s == ACQUIRE_TIMEOUT_S
    assert EpisodeContext(episode_id="e")._acquire_timeout_s == ACQUIRE_TIMEOUT_S
