"""The ``python`` and ``bash`` tools on real sandboxes (both backends), and the math-python task
end to end through the rollout engine."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, backend_problem, make_backend
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.plugins.code.tools import bash, python
from toolgym.sandboxes.pool import PooledBackend


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, images=("python", "shell"), profiles={"python": TEST_PROFILE})
    yield b
    runner.run(b.aclose())


def test_python_tool_is_a_persistent_session(backend: PooledBackend, runner: asyncio.Runner) -> None:
    async def calls() -> list[Any]:
        sb = await backend.acquire("python")
        try:
            return [
                await python.call({"code": code}, sandbox=sb)
                for code in (
                    "x = 6 * 7\nprint('working')\nx",
                    "x + 1",
                    "import numpy, sympy, pandas\nsympy.factorint(360)",
                    "1 / 0",
                    "",
                    "print('a' * 100000)",
                )
            ]
        finally:
            await backend.release(sb)

    first, second, libs, error, empty, long = runner.run(calls())
    assert (first.text, first.error) == ("working\n42", False)
    assert second.text == "43"
    if backend.name == "docker":  # the python image has the scientific stack; the host may not
        assert libs.text == "{2: 3, 3: 2, 5: 1}", libs.text
    assert error.error and "ZeroDivisionError" in error.text and "Traceback" in error.text
    assert empty.text == "(no output)" and not empty.error
    assert len(long.text) < 20_000 and "characters omitted" in long.text


def test_bash_tool_keeps_directory_and_reports_exit_codes(
    backend: PooledBackend, runner: asyncio.Runner
) -> None:
    async def calls() -> list[Any]:
        sb = await backend.acquire("shell")
        try:
            return [
                await bash.call({"command": c}, sandbox=sb)
                for c in (
                    "mkdir -p repo && cd repo && export STAGE=dev",
                    "pwd; echo $STAGE",
                    "ls missing-file",
                    "git --version >/dev/null && echo has-git",
                )
            ]
        finally:
            await backend.release(sb)

    _, where, failed, git = runner.run(calls())
    assert where.text == "/workspace/repo\ndev"
    assert (
        failed.text.endswith("[exit code 2]")
        and "missing-file" in failed.text
        and failed.metadata["exit_code"] == 2
    )
    assert git.text == "has-git"


def test_broken_sandbox_is_reported_and_replaced(backend: PooledBackend, runner: asyncio.Runner) -> None:
    async def episode() -> tuple[Any, Any, str, str]:
        ctx = EpisodeContext(episode_id="ep-broken", sandbox_backend=backend)
        try:
            sb = await ctx.sandbox("python")
            # Tool code can no longer signal its agent: the agent dies from the host side.
            os.kill(sb.handle["pids"]["agent"], signal.SIGKILL)
            broken = await python.call({"code": "import time; time.sleep(5)"}, sandbox=sb)
            fresh = await ctx.sandbox("python")
            after = await python.call({"code": "'fresh'"}, sandbox=fresh)
            return broken, after, sb.id, fresh.id
        finally:
            await ctx.aclose()

    broken, after, old_id, new_id = runner.run(episode())
    assert broken.error and "fresh sandbox" in broken.text and broken.metadata["sandbox_broken"]
    assert after.text == "'fresh'" and old_id != new_id


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_math_python_task_end_to_end(backend_name: str, qwen_chat: ChatFormat) -> None:
    from toolgym.core.registry import get_registry

    registry: Registry = get_registry()
    assert {"python", "bash"} <= set(registry.tools) and "math-python" in registry.envs

    async def run() -> list[Any]:
        sandboxes = make_backend(backend_name)
        out: list[Any] = []
        engine = RolloutEngine(
            registry=registry,
            policy=ScriptedPolicy(qwen_chat),
            config=EngineConfig(max_turns=4),
            sandbox_backend=sandboxes,
            on_trajectory=out.append,
        )
        try:
            await engine.run(plan_episodes("math-python", num_tasks=3, group_size=1))
        finally:
            await sandboxes.aclose()
        return out

    trajectories = asyncio.run(run())
    assert len(trajectories) == 3
    for t in trajectories:
        assert t.reward == 1.0, (t.status, t.status_reason, [s.observation for s in t.steps])
        call = t.steps[0].tool_calls[0]
        assert call.name == "python" and not call.error


def test_auto_backend_is_docker_when_an_engine_answers() -> None:
    from toolgym.cli.common import open_sandbox_backend
    from toolgym.core.registry import get_registry

    async def pick() -> str:
        b = await open_sandbox_backend(get_registry())
        await b.aclose()
        return b.name

    expected = "docker" if backend_problem("docker") is None else "local"
    assert asyncio.run(pick()) == expected
