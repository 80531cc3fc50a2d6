"""The isolation and fault suite, on both backends: what a hostile or careless command can do to a
sandbox, to the host, and to the orchestrator."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
from typing import Any

import pytest

from toolgym.core.errors import SandboxBrokenError
from toolgym.sandboxes.pool import PooledBackend


def _processes(sandbox: Any, runner: asyncio.Runner) -> int:
    return int(runner.run(sandbox.stats())["processes"])


def test_fork_bomb_is_contained_and_the_sandbox_recovers(
    backend: PooledBackend, runner: asyncio.Runner
) -> None:
    sb = runner.run(backend.acquire("python"))
    r = runner.run(sb.run(["bash", "-c", "f(){ f | f & }; f; sleep 30"], timeout=3))
    assert r.timed_out or r.exit_code != 0
    assert runner.run(sb.run(["echo", "alive"])).stdout == "alive\n"
    assert _processes(sb, runner) == 0
    # a bomb that leaves its process group: the timeout cannot reach it, the reset does
    escape = "import os, time\nfor _ in range(200):\n    if os.fork() == 0:\n        os.setsid(); time.sleep(300)\n"
    runner.run(sb.run(["python3", "-c", escape], timeout=5))
    runner.run(backend.release(sb))
    again = runner.run(backend.acquire("python"))
    try:
        assert runner.run(again.run(["echo", "clean"])).stdout == "clean\n"
        assert _processes(again, runner) == 0
    finally:
        runner.run(backend.release(again))


def test_memory_bomb_is_reported_as_out_of_memory(sandbox: Any, runner: asyncio.Runner) -> None:
    bomb = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"
    r = runner.run(sandbox.run(["python3", "-c", bomb], timeout=20))
    assert r.oom_killed and r.exit_code != 0 and not r.timed_out
    assert runner.run(sandbox.run(["echo", "alive"])).stdout == "alive\n"


def test_memory_bomb_in_the_python_session(sandbox: Any, runner: asyncio.Runner) -> None:
    py = runner.run(sandbox.python())
    runner.run(py.execute("before = 1"))
    r = runner.run(py.execute("chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))", timeout=20))
    assert r.error is not None and ("MemoryError" in r.error or r.restarted)
    assert runner.run(py.execute("1 + 1")).value == "2"


def test_cpu_spin_stops_at_its_timeout(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(sandbox.run(["python3", "-c", "while True: pass"], timeout=1.0))
    assert r.timed_out and r.exit_code == 124
    assert 0.9 < r.duration_s < 4.0


def test_yes_flood_is_capped_and_host_memory_bounded(sandbox: Any, runner: asyncio.Runner) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = runner.run(sandbox.run(["yes"], timeout=2.0))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert r.timed_out and r.truncated
    assert r.stdout.startswith("y\ny\n") and len(r.stdout) <= 64 * 1024 + 200
    assert after - before < 64 * 1024  # KiB: the flood never reached the host process


@pytest.mark.parametrize(
    "code",
    [
        "import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)",
        "import socket; socket.create_connection(('8.8.8.8', 53), timeout=3)",
        "import socket; socket.getaddrinfo('example.com', 443)",
        "import urllib.request; urllib.request.urlopen('http://example.com', timeout=3)",
    ],
)
def test_egress_and_dns_are_blocked(sandbox: Any, runner: asyncio.Runner, code: str) -> None:
    r = runner.run(sandbox.run(["python3", "-c", code], timeout=15))
    assert r.exit_code != 0 and not r.timed_out
    assert any(
        word in r.stderr for word in ("unreachable", "Name or service", "resolution", "URLError", "gaierror")
    )


def test_writes_to_root_and_etc_are_refused(sandbox: Any, runner: asyncio.Runner) -> None:
    for path in (
        "/newfile",
        "/etc/passwd",
        "/etc/newfile",
        "/usr/bin/evil",
        "/opt/toolgym/main.py",
        "/run/toolgym/x",
    ):
        r = runner.run(sandbox.run(["sh", "-c", f"echo x >> {path}"]))
        assert r.exit_code != 0, path
        assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr, r.stderr


def test_tmpfs_fill_hits_its_size_and_the_sandbox_survives(
    backend: PooledBackend, runner: asyncio.Runner
) -> None:
    sb = runner.run(backend.acquire("python"))
    r = runner.run(sb.run("dd if=/dev/zero of=/tmp/fill bs=1M count=64", timeout=20))
    assert r.exit_code != 0 and ("No space left" in r.stderr or "too large" in r.stderr)
    r = runner.run(sb.run("dd if=/dev/zero of=fill bs=1M count=64", timeout=20))
    assert r.exit_code != 0
    assert runner.run(sb.run(["echo", "alive"])).stdout == "alive\n"
    runner.run(backend.release(sb))
    again = runner.run(backend.acquire("python"))
    try:
        disk = runner.run(again.stats())["disk"]
        assert all(d["used"] < 1 << 20 for d in disk.values()), disk
    finally:
        runner.run(backend.release(again))


def test_privileges_cannot_be_gained(sandbox: Any, runner: asyncio.Runner) -> None:
    status = runner.run(sandbox.run(["cat", "/proc/self/status"])).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["CapEff"].strip() == "0000000000000000" and fields["CapPrm"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    for code in (
        "import os; os.setuid(0)",
        "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
        "import os; open('f', 'w').close(); os.chown('f', 0, 0)",
    ):
        r = runner.run(sandbox.run(["python3", "-c", code]))
        assert r.exit_code != 0 and ("PermissionError" in r.stderr or "Invalid argument" in r.stderr), (
            code,
            r.stderr,
        )
    # setuid-root mount(8) runs as the sandbox user: no_new_privs and nosuid mounts
    r = runner.run(sandbox.run("mount -t tmpfs none /tmp"))
    assert r.exit_code != 0
    assert runner.run(sandbox.run("grep -c ' /tmp tmpfs' /proc/mounts")).stdout.strip() == "1"


def test_background_processes_die_with_their_command(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(sandbox.run("sleep 300 & sleep 300 & (sleep 300 &); wait", timeout=1.0))
    assert r.timed_out
    assert _processes(sandbox, runner) == 0
    r = runner.run(sandbox.run("nohup sleep 300 >/dev/null 2>&1 & echo started"))
    assert r.exit_code == 0 and r.stdout == "started\n"
    assert _processes(sandbox, runner) == 0


def test_docker_socket_and_host_channel_are_unreachable(sandbox: Any, runner: asyncio.Runner) -> None:
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/toolgym/h.sock"):
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r})"
        r = runner.run(sandbox.run(["python3", "-c", code]))
        assert r.exit_code != 0 and ("FileNotFoundError" in r.stderr or "ConnectionRefused" in r.stderr), (
            r.stderr
        )
    assert runner.run(sandbox.run("ls /root /home 2>&1; env")).stdout.count("DOCKER") == 0


def test_killing_the_agent_breaks_the_sandbox_and_it_is_replaced(
    backend: PooledBackend, runner: asyncio.Runner
) -> None:
    sb = runner.run(backend.acquire("python"))
    # the agent is PID 1 of the sandbox: signals from inside do not reach it
    r = runner.run(
        sb.run(f"kill -STOP {sb.channel.agent_pid}; kill -9 {sb.channel.agent_pid}; sleep 0.5; echo alive")
    )
    assert sb.channel.agent_pid == 1 and r.stdout == "alive\n"
    assert runner.run(sb.run(["echo", "still"])).stdout == "still\n"
    # an agent that dies anyway (killed from the host here) breaks the sandbox, which is replaced
    os.kill(sb.handle["pids"]["agent"], signal.SIGKILL)
    with pytest.raises(SandboxBrokenError):
        for _ in range(50):
            runner.run(sb.run(["sleep", "0.1"]))
    assert sb.broken
    with pytest.raises(SandboxBrokenError, match="acquire a new sandbox"):
        runner.run(sb.run(["true"]))
    runner.run(backend.release(sb))
    fresh = runner.run(backend.acquire("python"))
    try:
        assert fresh.id != sb.id and not fresh.broken
        assert runner.run(fresh.run(["echo", "ok"])).stdout == "ok\n"
    finally:
        runner.run(backend.release(fresh))
