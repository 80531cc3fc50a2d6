"""Lifecycle against a real orchestrator process, on both backends: kill -9 with 20 live
sandboxes and a sweep that leaves none; SIGTERM, SIGINT and normal exit release everything;
``toolgym sandbox gc``; the hardening and labels of Docker containers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend, require
from toolgym.sandboxes import lifecycle

ORCHESTRATOR = Path(__file__).with_name("orchestrator.py")


def _start(
    backend: str, count: int, run_id: str, then: str = "wait"
) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(ORCHESTRATOR), backend, str(count), run_id, then],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise AssertionError(f"orchestrator failed: {line}{proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[1:]


def _containers(run_id: str) -> list[dict[str, object]]:
    from toolgym.sandboxes.docker import engine

    return engine.api().containers(all=True, filters={"label": f"toolgym.run={run_id}"})


def _local_processes(ids: list[str]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if any(i.encode() in cmdline for i in ids):
                found.append(int(entry.name))
    return found


def _leftovers(backend: str, run_id: str, ids: list[str]) -> int:
    live = len(_containers(run_id)) if backend == "docker" else len(_local_processes(ids))
    dirs = sum((lifecycle.state_root() / i).exists() for i in ids)
    return live + dirs


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_kill_9_with_20_live_sandboxes_then_the_sweep_leaves_none(backend_name: str) -> None:
    require(backend_name)
    make_backend(backend_name)  # builds the image if needed
    run_id = f"kill9-{uuid.uuid4().hex[:8]}"
    proc, ids = _start(backend_name, 20, run_id)
    assert len(ids) == 20
    if backend_name == "docker":
        assert len(_containers(run_id)) == 20
    else:
        assert len(_local_processes(ids)) >= 20
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)

    async def sweep() -> None:
        b = make_backend(backend_name)
        await b.start()
        await b.aclose()

    asyncio.run(sweep())
    assert _leftovers(backend_name, run_id, ids) == 0


@pytest.mark.parametrize("how", ["sigterm", "sigint", "exit"])
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_exit_and_signals_release_everything(backend_name: str, how: str) -> None:
    require(backend_name)
    make_backend(backend_name)
    run_id = f"exit-{how}-{uuid.uuid4().hex[:8]}"
    proc, ids = _start(backend_name, 3, run_id, then="exit" if how == "exit" else "wait")
    if how != "exit":
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(
            f"the orchestrator did not exit within 30 s of {how}; this process's SIGINT handler "
            f"{signal.getsignal(signal.SIGINT)!r}, blocked {signal.pthread_sigmask(signal.SIG_BLOCK, [])}; "
            f"its stderr: {err[-2000:]}"
        ) from None
    deadline = time.monotonic() + 3.0  # removal is synchronous; allow for the daemon's bookkeeping
    while _leftovers(backend_name, run_id, ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leftovers(backend_name, run_id, ids) == 0


@pytest.mark.docker
def test_gc_command_removes_containers_of_dead_owners() -> None:
    require("docker")
    make_backend("docker")
    from toolgym.sandboxes.docker import engine

    api = engine.api()
    run_id = f"gc-{uuid.uuid4().hex[:8]}"
    dead_owner = f"{os.uname().nodename}:999999999:0"
    created = api.create_container(
        "toolgym/sandbox-python:latest",
        command=["true"],
        labels={engine.LABEL: "python", "toolgym.run": run_id, "toolgym.owner": dead_owner},
    )
    live_owner = api.create_container(
        "toolgym/sandbox-python:latest",
        command=["true"],
        labels={engine.LABEL: "python", "toolgym.run": run_id, "toolgym.owner": lifecycle.owner_id()},
    )
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "toolgym", "sandbox", "ls", "--json"], capture_output=True, text=True
        )
        assert listing.returncode == 0 and run_id in listing.stdout
        out = subprocess.run(
            [sys.executable, "-m", "toolgym", "sandbox", "gc"], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        left = {c["Id"] for c in _containers(run_id)}
        assert created["Id"] not in left and live_owner["Id"] in left
    finally:
        engine.remove_container(api, live_owner["Id"])
        engine.remove_container(api, created["Id"])


@pytest.mark.docker
def test_containers_are_hardened_and_labelled() -> None:
    require("docker")
    from toolgym.sandboxes.docker import engine

    async def inspect() -> tuple[dict, str]:  # type: ignore[type-arg]
        b = make_backend("docker", profiles={"python": TEST_PROFILE}, run_id="hardening")
        try:
            sb = await b.acquire("python", episode_id="ep-h", labels={"toolgym.extra": "x"})
            info = await engine.call(engine.api().inspect_container, sb.handle["container"])
            status = (await sb.run(["cat", "/proc/self/status"])).stdout
            return info, status
        finally:
            await b.aclose()

    info, status = asyncio.run(inspect())
    host, config = info["HostConfig"], info["Config"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert not any("seccomp" in opt for opt in host["SecurityOpt"])  # the engine's default profile applies
    assert host["PidsLimit"] == TEST_PROFILE.pids
    assert host["Memory"] == host["MemorySwap"] == TEST_PROFILE.memory_bytes
    assert host["NanoCpus"] == int(TEST_PROFILE.cpus * 1e9) and not host["Init"]  # the agent is PID 1
    assert set(host["Tmpfs"]) == {"/workspace", "/tmp", "/home/sandbox", "/dev/shm"}
    assert all(f"nr_inodes={TEST_PROFILE.inodes}" in opts for opts in host["Tmpfs"].values())
    assert all(m["RW"] is False for m in info["Mounts"])
    assert config["User"] == "1000:1000"
    labels = config["Labels"]
    assert labels["toolgym.sandbox"] == "python" and labels["toolgym.run"] == "hardening"
    assert labels["toolgym.episode"] == "ep-h" and labels["toolgym.extra"] == "x"
    assert lifecycle.owner_alive(labels["toolgym.owner"]) and int(labels["toolgym.expires"]) > time.time()
    assert "Seccomp:\t2" in status
