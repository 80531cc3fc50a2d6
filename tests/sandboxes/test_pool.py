"""The warm pool and lifecycle, on both backends: prewarming, reuse after reset, poison checks,
dead sandboxes in the pool, and replacement through an episode's context."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import SandboxBrokenError
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.sandbox import AgentSandbox


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, profiles={"python": TEST_PROFILE}, warm={"python": 2}, max_idle=2)
    runner.run(b.prewarm("python", 2))
    yield b
    runner.run(b.aclose())


def test_acquire_from_the_warm_pool_is_fast_and_refills(pool: PooledBackend, runner: asyncio.Runner) -> None:
    assert pool.idle_count("python") == 2
    reused = pool.counters["reused"]
    sb = runner.run(pool.acquire("python", episode_id="ep-fast"))
    # taken from the pool, not created (how much faster that is: bench/, not a timed test)
    assert sb.episode_id == "ep-fast" and pool.counters["reused"] == reused + 1
    runner.run(pool.prewarm("python", 2))  # topped back up in the background
    assert pool.idle_count("python") == 2
    runner.run(pool.release(sb))


def test_release_resets_files_processes_and_sessions(pool: PooledBackend, runner: asyncio.Runner) -> None:
    async def scenario(backend: PooledBackend) -> None:
        sb = await backend.acquire("python")
        await sb.write_file("secret.txt", "from the last episode")
        await sb.run("echo x > /tmp/t; echo y > ~/.h")
        await (await sb.python()).execute("leftover = 1")
        await sb.run("nohup setsid sleep 300 >/dev/null 2>&1 &")
        await backend.release(sb)
        await backend.settle()  # the reset runs in the background
        again = await backend.acquire("python")
        assert again is sb, "a clean sandbox goes back to the pool"
        assert sorted((await sb.run("ls -A . /tmp ~")).stdout.split()) == [".:", "/home/sandbox:", "/tmp:"]
        assert (await sb.stats())["processes"] == 0
        assert (await (await sb.python()).execute("'leftover' in dir()")).value == "False"
        await backend.release(sb)

    fresh = make_backend(pool.name, profiles={"python": TEST_PROFILE}, max_idle=1)
    try:
        runner.run(scenario(fresh))
    finally:
        runner.run(fresh.aclose())


def test_dead_sandbox_in_the_pool_is_skipped(pool: PooledBackend, runner: asyncio.Runner) -> None:
    runner.run(pool.prewarm("python", 2))
    victim = next(iter(pool._idle["python"]))
    victim.channel.close("killed by the test")
    runner.run(asyncio.sleep(0.05))
    assert victim not in list(pool._idle["python"])
    sb = runner.run(pool.acquire("python"))
    try:
        assert sb is not victim and runner.run(sb.run(["true"])).ok
    finally:
        runner.run(pool.release(sb))


def test_acquire_pings_only_an_agent_not_heard_from_lately(
    pool: PooledBackend, runner: asyncio.Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox whose agent answered within ``ping_fresh_s`` (just back from its checked reset)
    is handed out without a ping; an older one is pinged, and a hung agent (stopped from the host)
    is passed over after the ping's timeout."""
    pings: list[str] = []
    real_ping = AgentSandbox.ping

    async def counted(self: AgentSandbox, *, timeout: float = 2.0) -> float:
        pings.append(self.id)
        return await real_ping(self, timeout=timeout)

    monkeypatch.setattr(AgentSandbox, "ping", counted)
    runner.run(pool.prewarm("python", 2))
    idle = list(pool._idle["python"])  # at least the 2 asked for (earlier tests may have left more)
    assert len(idle) >= 2
    for sb in idle:
        sb.channel.last_heard = time.monotonic()
    sb = runner.run(pool.acquire("python"))
    assert pings == [] and sb is idle[0]
    runner.run(pool.release(sb))
    runner.run(pool.settle())

    runner.run(pool.prewarm("python", 2))
    hung = pool._idle["python"][0]
    hung.channel.last_heard -= 2 * pool.ping_fresh_s
    os.kill(hung.handle["pids"]["agent"], signal.SIGSTOP)  # alive, connected, silent
    dead = pool.counters["dead_in_pool"]
    sb = runner.run(pool.acquire("python"))
    try:
        assert pings[0] == hung.id and sb is not hung and pool.counters["dead_in_pool"] == dead + 1
        assert runner.run(sb.run(["true"])).ok
    finally:
        runner.run(pool.release(sb))
        runner.run(pool.settle())


def test_broken_sandbox_is_destroyed_on_release(pool: PooledBackend, runner: asyncio.Runner) -> None:
    sb = runner.run(pool.acquire("python"))
    destroyed = pool.counters["destroyed"]
    runner.run(pool.release(sb, broken=True))
    assert pool.counters["destroyed"] == destroyed + 1
    assert sb.id not in {s.id for s in pool.live}


def test_poison_check() -> None:
    ok = {
        "processes": 0,
        "memory_bytes": 10,
        "memory_limit_bytes": 100,
        "pids": 1,
        "pids_limit": 64,
        "disk": {"/tmp": {"used": 0, "size": 100}},
    }
    assert PooledBackend.poison_reason(None, ok) is None  # type: ignore[arg-type]
    assert "survived" in PooledBackend.poison_reason(None, {**ok, "processes": 3})  # type: ignore[arg-type,operator]
    assert "memory" in PooledBackend.poison_reason(None, {**ok, "memory_bytes": 95})  # type: ignore[arg-type,operator]
    assert "pids" in PooledBackend.poison_reason(None, {**ok, "pids": 60})  # type: ignore[arg-type,operator]
    full = {**ok, "disk": {"/tmp": {"used": 90, "size": 100}}}
    assert "full" in PooledBackend.poison_reason(None, full)  # type: ignore[arg-type,operator]


def test_episode_context_replaces_a_broken_sandbox(pool: PooledBackend, runner: asyncio.Runner) -> None:
    async def episode() -> tuple[str, str]:
        ctx = EpisodeContext(episode_id="ep-replace", run_id="r", sandbox_backend=pool)
        try:
            first = await ctx.sandbox("python")
            os.kill(first.handle["pids"]["agent"], signal.SIGKILL)  # from the host: it is PID 1 inside
            with pytest.raises(SandboxBrokenError):
                for _ in range(50):
                    await first.run(["sleep", "0.1"])
            second = await ctx.sandbox("python")
            assert (await second.run(["echo", "replaced"])).stdout == "replaced\n"
            return first.id, second.id
        finally:
            await ctx.aclose()

    first, second = runner.run(episode())
    assert first != second


def test_prestarted_python_sessions_survive_recycling(pool: PooledBackend, runner: asyncio.Runner) -> None:
    async def cycles(backend: PooledBackend) -> list[str]:
        seen = []
        for i in range(8):
            sb = await backend.acquire("python")
            seen.append(sb.id)
            assert (await (await sb.python()).execute(f"{i} * 2")).value == str(i * 2)
            await backend.release(sb)
            await backend.settle()
        return seen

    prestart = dataclasses.replace(TEST_PROFILE, prestart_python=True)
    fresh = make_backend(pool.name, profiles={"python": prestart}, max_idle=1)
    try:
        seen = runner.run(cycles(fresh))
        assert len(set(seen)) == 1, "the one sandbox is reset and reused, never taken for poisoned"
        assert fresh.counters["poisoned"] == 0
    finally:
        runner.run(fresh.aclose())


def test_a_reset_cancelled_before_it_ran_is_not_waited_for(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    """A release's reset task cancelled before its first step (its coroutine's ``finally`` never
    runs) no longer counts as a sandbox coming back: an acquire does not wait ``reuse_wait_s`` for it."""
    backend = make_backend(pool.name, profiles={"python": TEST_PROFILE}, max_idle=4, reuse_wait_s=30)

    async def scenario() -> None:
        sb = await backend.acquire("python")
        await backend.release(sb)
        recycle = next(t for t in backend._tasks if t.get_name() == f"recycle-{sb.id}")
        recycle.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recycle
        await asyncio.sleep(0)  # its done callbacks
        assert not backend._recycling.get("python")
        started = time.monotonic()
        other = await backend.acquire("python")
        assert other is not sb and backend.counters["waited_for_reset"] == 0
        assert time.monotonic() - started < 15  # made afresh, not after 30 s of waiting
        await backend.release(other)

    try:
        runner.run(scenario())
    finally:
        runner.run(backend.aclose())


def test_a_sandbox_destroys_itself_after_its_ttl(pool: PooledBackend, runner: asyncio.Runner) -> None:
    async def scenario(backend: PooledBackend) -> bool:
        sb = await backend.acquire("python")
        await asyncio.sleep(2.5)
        broken = sb.broken
        await backend.release(sb)
        return broken

    short = dataclasses.replace(TEST_PROFILE, ttl_s=1.0)
    fresh = make_backend(pool.name, profiles={"python": short})
    try:
        assert runner.run(scenario(fresh)), "the agent exits at its TTL and the sandbox with it"
    finally:
        runner.run(fresh.aclose())


def test_an_acquire_during_a_reset_waits_for_that_sandbox_rather_than_make_another(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    """With none idle, an acquire waits (up to ``reuse_wait_s``) for a released sandbox in its reset;
    two acquires do not count on the same one; a sandbox that served the acquiring episode's group
    is not waited for (the group rule); ``reuse_wait_s=0`` never waits."""
    from toolgym.core.sandbox import GROUP_LABEL

    async def scenario(backend: PooledBackend) -> None:
        sb = await backend.acquire("python", labels={GROUP_LABEL: "g1"})
        await backend.release(sb)  # its reset runs in the background: nothing idle now
        again = await backend.acquire("python", episode_id="next")
        assert again is sb and backend.counters["created"] == 1
        assert backend.counters["waited_for_reset"] == 1
        await backend.release(again)
        first, second = await asyncio.gather(backend.acquire("python"), backend.acquire("python"))
        assert {first, second} >= {sb} and first is not second  # one waited for it, one was made
        assert backend.counters["created"] == 2
        await backend.release(first)
        await backend.release(second)
        await backend.settle()
        for idle in list(backend._idle["python"]):  # both idle ones have served g2, below
            backend._served.setdefault(idle.id, set()).add("g2")
        taken = [await backend.acquire("python", labels={GROUP_LABEL: "g2"})]
        assert backend.counters["created"] == 3  # both idle ones served g2: a new one
        await backend.release(taken[0])
        mine = await backend.acquire("python", labels={GROUP_LABEL: "g2"})  # only g2's in reset
        assert mine is not taken[0] and backend.counters["waited_for_reset"] == 2
        await backend.release(mine)

    fresh = make_backend(pool.name, profiles={"python": TEST_PROFILE}, max_idle=4)
    never = make_backend(pool.name, profiles={"python": TEST_PROFILE}, max_idle=4, reuse_wait_s=0)

    async def no_wait(backend: PooledBackend) -> None:
        sb = await backend.acquire("python")
        await backend.release(sb)
        other = await backend.acquire("python")
        assert other is not sb and backend.counters["waited_for_reset"] == 0
        await backend.release(other)

    try:
        runner.run(scenario(fresh))
        runner.run(no_wait(never))
    finally:
        runner.run(fresh.aclose())
        runner.run(never.aclose())
