"""What one episode can hand the next through a pooled sandbox besides files, on both
backends.

- the agent's hello token is nowhere a sandbox process can read it (``/proc/1/cmdline``,
  ``/proc/*/environ``, the commands' environment), nor in the agent's environment block seen from
  the host;
- the memory cgroup's peak does not carry over a reset where the backend closes it (Docker on
  cgroup v1, this host: reset from outside; bubblewrap: not visible inside at all);
- the counters a reset cannot empty (loopback bytes, inode numbers, the PID counter) do carry
  over, as documented, and the pool never hands a sandbox to another episode of the same group,
  which is what makes them harmless; the group id reaches ``acquire`` from the engine.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.core.env.context import EpisodeContext
from toolgym.core.sandbox import GROUP_LABEL
from toolgym.sandboxes import counters
from toolgym.sandboxes.audit import carryover, probes
from toolgym.sandboxes.pool import PooledBackend


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    """Two idle sandboxes at most: a released sandbox is the next handed out unless the group rule
    says otherwise."""
    b = make_backend(request.param, profiles={"python": TEST_PROFILE}, max_idle=2)
    yield b
    runner.run(b.aclose())


def _probe(sandbox: Any, runner: asyncio.Runner, text: str, *args: str) -> Any:
    return runner.run(probes.run_probe(sandbox, text, *args, timeout=60))


def _cycle(pool: PooledBackend, runner: asyncio.Runner, sandbox: Any, **acquire: Any) -> Any:
    runner.run(pool.release(sandbox))
    runner.run(pool.settle())
    return runner.run(pool.acquire("python", **acquire))


# -- the hello token -----------------------------------------------------------------

READ_PROC = r"""
import json, os
seen, readable = [], {}
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:
    for name in ('cmdline', 'environ'):
        try:
            data = open('/proc/%s/%s' % (pid, name), 'rb').read()
        except OSError as exc:
            readable['%s/%s' % (pid, name)] = exc.strerror
            continue
        readable['%s/%s' % (pid, name)] = 'readable'
        seen.append(data.decode('latin-1'))
seen.append(json.dumps(dict(os.environ)))
print(json.dumps({'text': '\n'.join(seen), 'readable': readable}))
"""


def test_no_sandbox_process_can_read_the_agents_hello_token(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    sb = runner.run(pool.acquire("python", episode_id="token"))
    try:
        token = sb.channel.hello["token"]
        assert len(token) == 32
        seen = _probe(sb, runner, READ_PROC)
        assert seen["readable"]["1/cmdline"] == "readable"  # the attack did look where the token was
        assert token not in seen["text"], "a sandbox process read the agent's hello token"
        shell = runner.run(sb.run("cat /proc/1/cmdline; env")).stdout
        assert token not in shell and "TOOLGYM_AGENT_TOKEN" not in shell
        # the agent's environment block seen by root on the host: overwritten, not just unset
        agent = (sb.handle.get("pids") or {}).get("agent")
        if agent and os.geteuid() == 0 and (sb.handle["pids"].get("via", "proc") == "proc"):
            for name in ("cmdline", "environ"):
                with open(f"/proc/{agent}/{name}", "rb") as f:
                    assert token.encode() not in f.read(), (
                        f"the token is in the agent's /proc/{name} (host view)"
                    )
    finally:
        runner.run(pool.release(sb))
        runner.run(pool.settle())


# -- counters across a reset -------------------------------------------------------------------------


def test_the_memory_peak_does_not_carry_over_a_reset(pool: PooledBackend, runner: asyncio.Runner) -> None:
    sb = runner.run(pool.acquire("python", episode_id="peak-1"))
    fresh = _probe(sb, runner, carryover.COUNTERS)["memory_peak"]
    r = runner.run(sb.run(["python3", "-c", carryover.ALLOCATE, "150"], timeout=60))
    assert r.exit_code == 0, r.stderr
    dirty = _probe(sb, runner, carryover.COUNTERS)["memory_peak"]
    again = _cycle(pool, runner, sb, episode_id="peak-2")
    try:
        assert again.id == sb.id
        after = _probe(again, runner, carryover.COUNTERS)["memory_peak"]
        if pool.name == "local":  # bubblewrap mounts no /sys: no cgroup file to read at all
            assert (fresh, dirty, after) == (None, None, None)
            return
        assert dirty is not None and dirty > 150 << 20, dirty  # the probe sees what it did
        claim = again.handle.get("counters", {}).get("memory_peak")
        pids = again.handle.get("pids") or {}
        found = counters.memory_cgroup(int(pids["agent"])) if pids.get("via") == "proc" else None
        if found is None or found[0] != 1 or not os.access(found[1] / "memory.max_usage_in_bytes", os.W_OK):
            pytest.skip(
                f"the host cannot reset the peak here (cgroup v2, a remote engine, or no permission): {claim}"
            )
        assert after < 100 << 20, (
            f"the next episode read the previous one's peak: {after >> 20} MiB (fresh {fresh >> 20})"
        )
        assert claim == counters.RESET, claim
    finally:
        runner.run(pool.release(again))
        runner.run(pool.settle())


def test_the_documented_residual_counters_do_carry_over(pool: PooledBackend, runner: asyncio.Runner) -> None:
    """The README says loopback bytes, inode numbers, the PID counter and System V ids go on across a
    reset; if one stops doing so (a per-episode namespace), the README and the audit should say it
    is closed."""
    sb = runner.run(pool.acquire("python", episode_id="residual-1"))
    before = _probe(sb, runner, carryover.COUNTERS)
    assert _probe(sb, runner, carryover.MOVE_COUNTERS, "4", "300", "200", "50")["done"]
    again = _cycle(pool, runner, sb, episode_id="residual-2")
    try:
        assert again.id == sb.id
        after = _probe(again, runner, carryover.COUNTERS)
        assert after["lo_bytes"] >= before["lo_bytes"] + (4 << 20)
        assert after["inode"] >= before["inode"] + 300
        assert after["pid"] >= before["pid"] + 200
        assert after["ipc_id"] >= before["ipc_id"] + 50
    finally:
        runner.run(pool.release(again))
        runner.run(pool.settle())


# -- the group rule --------------------------------------------------------------------------------


def test_two_episodes_of_one_group_never_get_the_same_sandbox_in_turn(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    async def scenario() -> None:
        await pool.settle()
        g, h = {GROUP_LABEL: "env/7/1234"}, {GROUP_LABEL: "env/8/1234"}
        first = await pool.acquire("python", episode_id="g-0", labels=g)
        await pool.release(first)
        await pool.settle()
        kept = pool.counters.get("kept_from_group", 0)
        sibling = await pool.acquire("python", episode_id="g-1", labels=g)
        assert sibling.id != first.id, "a sibling got the sandbox its group had just used"
        await pool.release(sibling)
        await pool.settle()
        third = await pool.acquire("python", episode_id="g-2", labels=g)  # two idle now, both served g
        assert third.id not in (first.id, sibling.id)
        assert pool.counters["kept_from_group"] == kept + 2  # an idle sandbox passed over each time
        other = await pool.acquire("python", episode_id="h-0", labels=h)  # another group: reuse as before
        assert other.id in (first.id, sibling.id)
        unlabelled = await pool.acquire("python", episode_id="none")
        assert unlabelled.id in (first.id, sibling.id)
        for sb in (third, other, unlabelled):
            await pool.release(sb)
        await pool.settle()

    runner.run(scenario())


class RecordingBackend:
    """A sandbox backend that records what ``acquire`` was given and hands out nothing useful."""

    name = "recording"

    def __init__(self) -> None:
        self.labels: list[Mapping[str, str]] = []

    async def acquire(
        self, kind: str, *, episode_id: str = "", labels: Mapping[str, str] | None = None
    ) -> Any:
        self.labels.append(dict(labels or {}))
        return object()

    async def release(self, sandbox: Any, *, broken: bool = False) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_the_engine_passes_the_group_id_to_acquire() -> None:
    from toolgym.core.rollout.engine import RolloutEngine
    from toolgym.core.rollout.requests import EpisodeRequest

    backend = RecordingBackend()
    engine = RolloutEngine(registry=None, policy=None, sandbox_backend=backend, run_id="run-1")  # type: ignore[arg-type]
    req = EpisodeRequest("env", 7, 0, 1234, "env/7/1234", "traj-0")
    ctx = engine._context(req)  # what every episode and ARPO fork of the request gets
    assert isinstance(ctx, EpisodeContext) and ctx.group_id == req.group_id
    await ctx.sandbox("python")
    await ctx.aclose()
    assert backend.labels == [{"toolgym.run": "run-1", GROUP_LABEL: "env/7/1234"}]


def test_the_probes_compile() -> None:
    """The probes are plain text run in sandboxes: a slip would only show there."""
    for text in (carryover.COUNTERS, carryover.ALLOCATE, carryover.MOVE_COUNTERS):
        compile(text, "<probe>", "exec")
