"""Issue 17 (section 1): a released sandbox comes back indistinguishable from a fresh one, shown by
enumeration on both backends. One episode writes a mark in every place it can write (found from
``/proc/self/mountinfo``, not from a list), changes the mount roots' modes, leaves System V IPC
objects, a POSIX message queue, detached processes with listening sockets, Python and shell
session state; the next episode on the same sandbox finds exactly what a fresh sandbox shows.
The probes are ``toolgym.sandboxes.audit.probes``, which ``toolgym sandbox audit`` runs too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.sandboxes.audit.probes import FIND, LEAVE
from toolgym.sandboxes.pool import PooledBackend


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    """A fresh backend keeping one idle sandbox, so that the released one is handed out next."""
    b = make_backend(request.param, profiles={"python": TEST_PROFILE}, max_idle=1)
    yield b
    runner.run(b.aclose())


def _find(sandbox: Any, runner: asyncio.Runner) -> dict[str, Any]:
    r = runner.run(sandbox.run(["python3", "-c", FIND]))
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_a_reused_sandbox_is_indistinguishable_from_a_fresh_one(pool: PooledBackend, runner: asyncio.Runner) -> None:
    first = runner.run(pool.acquire("python", episode_id="ep-1"))
    fresh = _find(first, runner)  # a sandbox just made: the reference
    py = runner.run(first.python())
    left = runner.run(py.execute(LEAVE + "\ntg_secret = 'episode 1'\n", timeout=30))
    assert left.error is None, left.traceback
    report = json.loads(left.stdout.strip().splitlines()[-1])
    assert {"/workspace", "/tmp", "/home/sandbox", "/dev/shm"} <= set(report["marks"]), report
    assert all(v >= 0 for v in report["ipc"].values()), report  # every kind of leftover was made
    dirty = _find(first, runner)
    assert dirty != fresh and dirty["sysv"]["shm"] and dirty["processes"]  # the probe sees what it left
    assert dirty["times"] != fresh["times"] and any(dirty["xattrs"].values()), dirty
    sh = runner.run(first.shell())
    runner.run(sh.run("export TG_MARK=episode-1; cd /tmp"))
    runner.run(pool.release(first))
    runner.run(pool.settle())

    second = runner.run(pool.acquire("python", episode_id="ep-2"))
    try:
        assert second.id == first.id  # the same sandbox, reset
        assert _find(second, runner) == fresh
        r = runner.run(runner.run(second.python()).execute("tg_secret"))
        assert r.error is not None and "NameError" in r.error
        out = runner.run(runner.run(second.shell()).run('echo "[$TG_MARK]"; pwd')).stdout
        assert out == "[]\n/workspace\n"
    finally:
        runner.run(pool.release(second))
        runner.run(pool.settle())
