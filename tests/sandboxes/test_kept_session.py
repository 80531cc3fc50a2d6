"""The kept session (``AgentSandbox.kept_python``), on both backends: what a pooled sandbox's reset
spares (the browser tools keep Playwright and Chromium there) and when it spares nothing.

Kept only when the episode ran no code of its own in the sandbox and the session's renewal cell
answered ``True``; the host's check from outside then allows exactly that process tree beside the
agent. The browser's own isolation between episodes: tests/plugins/miniwob/test_kept_browser.py."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.sandboxes import hostprocs
from toolgym.sandboxes.pool import PooledBackend

SETUP = """import os, subprocess
_child = subprocess.Popen(["sleep", "300"])
episode_secret = "planted"
def _renew(answer=True):
    global episode_secret
    episode_secret = None  # the renewal drops what the episode left
    return answer
"""
STATE = "(os.getpid(), _child.pid, _child.poll(), episode_secret)"


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    b = make_backend(request.param, profiles={"python": TEST_PROFILE}, max_idle=1)
    yield b
    runner.run(b.aclose())


async def _episode_then_next(
    backend: PooledBackend, renew: str, *, run_code: bool
) -> tuple[str, str, object]:
    """Plant a kept session (a child process, a variable) and maybe run code; release; reacquire the
    same sandbox; what its kept session holds then (``STATE``, or the error), and the reset stats."""
    sb = await backend.acquire("python")
    kept = await sb.kept_python(renew=renew)
    assert (await kept.execute(SETUP)).error is None
    before = (await kept.execute(STATE)).value
    if run_code:
        await sb.run(["true"])
    await backend.release(sb)
    await backend.settle()
    again = await backend.acquire("python")
    assert again is sb, "the reset sandbox went back to the pool"
    kept = await again.kept_python(renew=renew)
    after = await kept.execute(STATE)
    assert (await again.stats())["processes"] == 0
    assert (await (await again.python()).execute("'_child' in dir()")).value == "False"
    await backend.release(again)
    await backend.settle()
    return str(before), str(after.value if after.error is None else after.error), again.kept_pid


def test_a_renewed_kept_session_survives_the_reset_with_its_processes(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    before, after, _ = runner.run(_episode_then_next(pool, "_renew()", run_code=False))
    pid, child, poll, secret = eval(before)
    assert secret == "planted" and poll is None
    # the same interpreter and its child, verified from the host; the renewal's own cleaning done
    assert eval(after) == (pid, child, None, None), (before, after)


@pytest.mark.parametrize("why", ["code ran", "renewal refused", "renewal raised"])
def test_the_kept_session_dies_with_the_rest_unless_it_may_stay(
    pool: PooledBackend, runner: asyncio.Runner, why: str
) -> None:
    renew = {"code ran": "_renew()", "renewal refused": "_renew(False)", "renewal raised": "1/0"}[why]
    before, after, kept = runner.run(_episode_then_next(pool, renew, run_code=why == "code ran"))
    assert "planted" in before
    assert after.startswith("NameError"), after  # a new interpreter: nothing of the last
    assert kept is None


def test_the_host_allows_one_kept_tree_under_the_agent_and_nothing_else() -> None:
    """``hostprocs.only_expected`` with ``kept_under``: a stand-in sandbox (root -> agent ->
    kept tree, plus a stray child of the agent) is refused until the stray is gone."""
    root = subprocess.Popen(
        ["bash", "-c", "bash -c 'bash -c \"sleep 300 & wait\" & sleep 300 & wait' & wait"]
    )
    try:
        deadline = time.monotonic() + 5
        while len(hostprocs.descendants(root.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        (agent,) = hostprocs.children(root.pid)
        _kept, stray = sorted(
            hostprocs.children(agent), key=lambda p: len(hostprocs.children(p)), reverse=True
        )
        assert hostprocs.only_expected(root.pid, {agent}, within_s=0) is not None  # strict: no tree at all
        refused = hostprocs.only_expected(root.pid, {agent}, within_s=0, kept_under=agent)
        assert refused is not None and str(stray) in refused
        subprocess.run(["kill", "-9", str(stray)], check=True)
        assert hostprocs.only_expected(root.pid, {agent}, within_s=2, kept_under=agent) is None
    finally:
        for pid in hostprocs.descendants(root.pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        root.kill()
        root.wait()
