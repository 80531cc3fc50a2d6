"""A released sandbox comes back indistinguishable from a fresh one, shown by
enumeration on both backends. One episode writes a mark in every place it can write (found from
``/proc/self/mountinfo``, not from a list), changes the mount roots' modes, leaves System V IPC
objects, a POSIX message queue, detached processes with listening sockets, Python and shell
session state; the next episode on the same sandbox finds exactly what a fresh sandbox shows.
The probes are ``toolgym.sandboxes.audit.probes``, which ``toolgym sandbox audit`` runs too."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend, require
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


def test_a_reused_sandbox_is_indistinguishable_from_a_fresh_one(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
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


# Attributes of the agent that a process of the same uid may change without any capability, and
# that every process the agent starts later inherits (``hostprocs.attributes``).
AGENT_ATTACKS = {
    "limits": "import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (777, 777))",
    "nice": "import os; os.setpriority(os.PRIO_PROCESS, 1, 13)",
    "scheduler": "import os; os.sched_setscheduler(1, os.SCHED_BATCH, os.sched_param(0))",
    "affinity": "import os; os.sched_setaffinity(1, {min(os.sched_getaffinity(1))})",
    "io-priority": (
        "import ctypes, platform; n = {'x86_64': 251, 'aarch64': 30}[platform.machine()]\n"
        "assert ctypes.CDLL(None, use_errno=True).syscall(n, 1, 1, 3 << 13) == 0, ctypes.get_errno()"
    ),
    "another thread": (
        "import os; tids = [int(t) for t in os.listdir('/proc/1/task') if t != '1']\n"
        "os.setpriority(os.PRIO_PROCESS, tids[0], 7)"
    ),
}
INHERITED = (
    "import os, resource; print(resource.getrlimit(resource.RLIMIT_NOFILE), "
    "os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))"
)


@pytest.mark.parametrize("attack", sorted(AGENT_ATTACKS))
def test_an_episode_that_changes_what_the_agent_passes_on_gets_a_new_sandbox(
    pool: PooledBackend, runner: asyncio.Runner, attack: str
) -> None:
    """Resource limits, nice value, CPU affinity, scheduling policy and I/O priority of the agent
    (PID 1), set by an episode's code, would be inherited by every process of the next episode
    (its interpreter included): the host compares them with those the sandbox was made with and
    makes a new sandbox instead."""
    if attack == "affinity" and len(__import__("os").sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no other affinity to set")
    first = runner.run(pool.acquire("python", episode_id=f"attrs-{attack}-1"))
    fresh = runner.run(first.run(["python3", "-c", INHERITED])).stdout
    r = runner.run(first.run(["python3", "-c", AGENT_ATTACKS[attack]]))
    assert r.exit_code == 0, r.stderr
    if attack in ("limits", "nice", "scheduler", "affinity"):  # the attack took: the agent passes it on
        assert runner.run(first.run(["python3", "-c", INHERITED])).stdout != fresh
    poisoned = pool.counters["poisoned"]
    runner.run(pool.release(first))
    runner.run(pool.settle())
    assert pool.counters["poisoned"] == poisoned + 1
    second = runner.run(pool.acquire("python", episode_id=f"attrs-{attack}-2"))
    try:
        assert second.id != first.id
        assert runner.run(second.run(["python3", "-c", INHERITED])).stdout == fresh
        py = runner.run(second.python())
        assert runner.run(py.execute(INHERITED)).stdout == fresh
    finally:
        runner.run(pool.release(second))
        runner.run(pool.settle())


def _shared(with_data: bool) -> Iterator[Path]:
    outer = Path(tempfile.mkdtemp(prefix="toolgym-shared-"))
    (outer / "scratch").mkdir()
    (outer / "scratch").chmod(0o777)  # writable by the sandbox user of either backend
    if with_data:
        (outer / "scratch" / "keep.txt").write_text("operator data")
    outer.chmod(0o555)
    yield outer
    outer.chmod(0o755)
    shutil.rmtree(outer, ignore_errors=True)


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """An operator's host directory to bind at ``/srv``: its root not writable from inside, an
    empty ``scratch`` below it that is (a data mount with a cache directory, say)."""
    yield from _shared(with_data=False)


@pytest.fixture()
def shared_data_dir() -> Iterator[Path]:
    """The same, with the operator's file in ``scratch`` before any sandbox starts."""
    yield from _shared(with_data=True)


def _bound_backend(name: str, host_dir: Path, monkeypatch: pytest.MonkeyPatch) -> PooledBackend:
    """A backend of ``name`` whose sandboxes see ``host_dir`` bound read-write at ``/srv``."""
    require(name)
    if name == "docker":
        from docker.types import Mount

        from toolgym.sandboxes.docker import backend as docker_backend

        plain = docker_backend.hardened_host_config

        def with_srv(api: Any, profile: Any, mounts: list[Any], **extra: Any) -> dict[str, Any]:
            return plain(
                api, profile, [*mounts, Mount(target="/srv", source=str(host_dir), type="bind")], **extra
            )

        monkeypatch.setattr(docker_backend, "hardened_host_config", with_srv)
        return make_backend("docker", profiles={"python": TEST_PROFILE}, max_idle=1)
    from toolgym.sandboxes.local.backend import LocalBackend

    class SharedDirLocalBackend(LocalBackend):
        def _launch_argv(self, *args: Any) -> tuple[list[str], bool]:  # type: ignore[override]
            argv, drop = LocalBackend._launch_argv(*args)
            at = next(
                i for i in range(len(argv) - 2) if argv[i] == "--ro-bind" and argv[i + 2] == "/run/toolgym"
            )
            return [*argv[:at], "--bind", str(host_dir), "/srv", *argv[at:]], drop

    return SharedDirLocalBackend(profiles={"python": TEST_PROFILE}, max_idle=1)


def _episode_marks_scratch(backend: PooledBackend, runner: asyncio.Runner) -> str:
    first = runner.run(backend.acquire("python", episode_id="ep-1"))
    r = runner.run(first.run(["sh", "-c", "echo answer=42 > /srv/scratch/.tg-mark && ls -A /srv/scratch"]))
    assert r.exit_code == 0 and ".tg-mark" in r.stdout, r
    runner.run(backend.release(first))
    runner.run(backend.settle())
    return first.id


@pytest.mark.parametrize("name", BACKENDS)
def test_a_writable_directory_below_an_unwritable_mount_root_is_wiped(
    name: str, shared_dir: Path, runner: asyncio.Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by walking the read-write mount, not by its root: the reset empties it."""
    backend = _bound_backend(name, shared_dir, monkeypatch)
    try:
        first_id = _episode_marks_scratch(backend, runner)
        second = runner.run(backend.acquire("python", episode_id="ep-2"))
        try:
            assert second.id == first_id  # empty when the sandbox started: the reset can clean it
            assert runner.run(second.run(["ls", "-A", "/srv/scratch"])).stdout == ""
            assert list((shared_dir / "scratch").iterdir()) == []
        finally:
            runner.run(backend.release(second))
            runner.run(backend.settle())
    finally:
        runner.run(backend.aclose())


@pytest.mark.parametrize("name", BACKENDS)
def test_operator_data_below_a_mount_is_kept_and_the_sandbox_made_anew(
    name: str,
    shared_data_dir: Path,
    runner: asyncio.Runner,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A writable directory that held files before the sandbox started is not wiped (that would
    destroy the operator's data): the reset reports it, the host destroys the sandbox and warns
    once, in one line naming the path."""
    backend = _bound_backend(name, shared_data_dir, monkeypatch)
    try:
        with caplog.at_level(logging.WARNING, logger="toolgym"):
            first_id = _episode_marks_scratch(backend, runner)
            second = runner.run(backend.acquire("python", episode_id="ep-2"))
            runner.run(backend.release(second))
            runner.run(backend.settle())
        assert second.id != first_id
        assert (shared_data_dir / "scratch" / "keep.txt").read_text() == "operator data"
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "/srv/scratch" in r.getMessage()
        ]
        assert len(warnings) == 1 and "\n" not in warnings[0], caplog.text
    finally:
        runner.run(backend.aclose())
