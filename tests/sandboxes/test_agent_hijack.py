"""Code run by one episode must not take over the sandbox's agent, and a pooled sandbox
handed to a later episode must give that episode its own results, on both backends.

The attack (``toolgym.sandboxes.audit.hijack_probe``, which ``toolgym sandbox audit`` runs too) is
what a model's Python cell can do: fork a detached process that tries ``pidfd_getfd`` and ``ptrace``
injection against the agent to get its channel to the host, then stops the agent and answers the
host itself. The host must also not believe a sandbox's own
report of its reset: a lying reset is caught from outside.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.sandboxes.audit.hijack_probe import FORGED, probe_cell
from toolgym.sandboxes.audit.reset import ESCAPE
from toolgym.sandboxes.pool import PooledBackend


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    """One idle sandbox at most, so that a released sandbox is the next one handed out."""
    b = make_backend(request.param, profiles={"python": TEST_PROFILE}, max_idle=1)
    yield b
    runner.run(b.aclose())


def _attack(pool: PooledBackend, runner: asyncio.Runner) -> tuple[Any, dict[str, Any]]:
    sb = runner.run(pool.acquire("python", episode_id="attacker"))
    py = runner.run(sb.python())
    r = runner.run(py.execute(probe_cell(), timeout=30))
    assert r.error is None, r.traceback
    return sb, json.loads(r.stdout.strip().splitlines()[-1])


def test_tool_code_cannot_take_the_agents_channel(pool: PooledBackend, runner: asyncio.Runner) -> None:
    sb, report = _attack(pool, runner)
    try:
        assert report["agent"], report  # the agent is visible (same pid namespace), but out of reach
        assert not report["hijacked"], report
        assert "got the channel" not in report["pidfd_getfd"] and "got the channel" not in report["ptrace"]
        assert report["agent"] == 1 and report["init_mem"] != "writable", report  # no init beside the agent
        time.sleep(2.0)  # a hijacker would now stop the agent and answer for it
        assert runner.run(sb.run(["echo", "still mine"])).stdout == "still mine\n"
    finally:
        runner.run(pool.release(sb))
        runner.run(pool.settle())


def test_pooled_sandbox_gives_the_next_episode_its_own_results(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    runner.run(pool.settle())
    first, report = _attack(pool, runner)
    time.sleep(2.5)  # the leftover has had its chance to take over the agent
    runner.run(pool.release(first))
    runner.run(pool.settle())
    second = runner.run(pool.acquire("python", episode_id="victim"))
    try:
        py = runner.run(second.python())
        assert runner.run(py.execute("print(6 * 7)")).stdout == "42\n", report
        assert runner.run(second.run(["echo", "mine"])).stdout == "mine\n"
        listing = runner.run(second.run(["ps", "-eo", "pid,args"]))
        assert FORGED not in listing.stdout
        assert "hijack" not in listing.stdout and "run_in_cell" not in listing.stdout
    finally:
        runner.run(pool.release(second))
        runner.run(pool.settle())


def test_a_lying_reset_is_caught_from_outside(pool: PooledBackend, runner: asyncio.Runner) -> None:
    """An agent that answers 'clean' without cleaning (as a hijacked one would) loses its sandbox."""
    runner.run(pool.settle())
    sb = runner.run(pool.acquire("python", episode_id="liar"))
    runner.run(sb.run(["python3", "-c", ESCAPE]))

    async def lying_reset(**_: Any) -> dict[str, Any]:
        return {"processes": 0, "disk": {}}

    sb.reset = lying_reset  # the agent's own report says clean; a process is still there
    poisoned = pool.counters["poisoned"]
    runner.run(pool.release(sb))
    runner.run(pool.settle())
    assert pool.counters["poisoned"] == poisoned + 1
    assert all(s.id != sb.id for s in pool.live)


@pytest.mark.docker
def test_a_lying_reset_is_caught_through_the_engine_when_its_proc_is_elsewhere(
    runner: asyncio.Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine on another machine: the host cannot read its /proc and asks ``docker top``."""
    from toolgym.sandboxes.docker import backend as docker_backend

    monkeypatch.setattr(docker_backend, "_engine_is_local", lambda pid, container_id: False)
    b = make_backend("docker", profiles={"python": TEST_PROFILE}, max_idle=1)
    try:
        sb = runner.run(b.acquire("python", episode_id="remote-like"))
        assert sb.handle["pids"]["via"] == "top"
        runner.run(b.release(sb))
        runner.run(b.settle())
        assert b.counters["poisoned"] == 0 and b.idle_count("python") == 1  # an honest reset passes
        sb = runner.run(b.acquire("python", episode_id="liar"))
        runner.run(sb.run(["python3", "-c", ESCAPE]))

        async def lying_reset(**_: Any) -> dict[str, Any]:
            return {"processes": 0, "disk": {}}

        sb.reset = lying_reset
        runner.run(b.release(sb))
        runner.run(b.settle())
        assert b.counters["poisoned"] == 1
    finally:
        runner.run(b.aclose())
