"""Limits a command must not get past, on both backends: /dev and /dev/shm
sizes, an inode cap on every writable tmpfs, memory summed over processes, no nested user
namespaces, no key ring."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.sandboxes.helpers import TEST_PROFILE
from toolgym.sandboxes.audit.probes import MEMORY_HOGS, TMPFS
from toolgym.sandboxes.pool import PooledBackend


def _tmpfs(sandbox: Any, runner: asyncio.Runner) -> list[dict[str, Any]]:
    r = runner.run(sandbox.run(["python3", "-c", TMPFS]))
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_dev_shm_is_size_capped_and_dev_is_read_only(sandbox: Any, runner: asyncio.Runner) -> None:
    mounts = {m["point"]: m for m in _tmpfs(sandbox, runner)}
    assert mounts["/dev/shm"]["writable"]
    assert mounts["/dev/shm"]["bytes"] <= TEST_PROFILE.shm_bytes * 1.05, mounts["/dev/shm"]
    r = runner.run(sandbox.run(["touch", "/dev/planted"]))
    assert r.exit_code != 0


def test_every_writable_tmpfs_caps_inodes(sandbox: Any, runner: asyncio.Runner) -> None:
    writable = [m for m in _tmpfs(sandbox, runner) if m["writable"]]
    assert {"/workspace", "/tmp", "/dev/shm"} <= {m["point"] for m in writable}
    too_many = [m for m in writable if m["inodes"] > TEST_PROFILE.inodes]
    assert not too_many, too_many


def test_memory_is_capped_over_all_processes(
    backend: PooledBackend, sandbox: Any, runner: asyncio.Runner
) -> None:
    """Four processes of 100 MB each against a 256 MiB profile: they cannot all live."""
    if backend.name == "local":
        from toolgym.sandboxes.local import limits

        if limits.memory_mode() == "rlimit":
            pytest.skip(f"this host gives the local backend no memory cgroup: {limits.cgroup_problem()}")
    r = runner.run(sandbox.run(["python3", "-c", MEMORY_HOGS], timeout=30))
    assert r.exit_code == 0, r.stderr
    assert int(r.stdout) <= 2
    assert runner.run(sandbox.run(["echo", "alive"])).stdout == "alive\n"


def test_nested_user_namespaces_are_refused(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(sandbox.run(["unshare", "--user", "--map-root-user", "id", "-u"]))
    assert r.exit_code != 0 and r.stdout.strip() != "0"
    code = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))"
    )
    assert runner.run(sandbox.run(["python3", "-c", code])).stdout.startswith("-1 ")


def test_the_key_ring_is_refused(sandbox: Any, runner: asyncio.Runner) -> None:
    code = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(248 if os.uname().machine == 'x86_64' else 217, b'user', b'tg', b'secret', 6, -2)\n"
        "print(r, os.strerror(ctypes.get_errno()))"
    )
    r = runner.run(sandbox.run(["python3", "-c", code]))
    assert r.stdout.startswith("-1 "), r.stdout
