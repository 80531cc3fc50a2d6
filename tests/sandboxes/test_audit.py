"""``toolgym sandbox audit``: every check passes on both backends as configured, and a
really weakened backend — containers on Docker's bridge network, an agent without its seccomp
filter, a writable bind mount the reset does not wipe — fails with the check that names the
weakness. The CLI's exit code says the same."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.sandboxes.helpers import BACKENDS, ensure_images, require
from toolgym.sandboxes import lifecycle
from toolgym.sandboxes.audit import FAIL, KIND_CHECKS, PASS, RESIDUAL, audit_backend, runner
from toolgym.sandboxes.audit.rows import Row
from toolgym.sandboxes.audit.runner import BACKEND_CHECKS
from toolgym.sandboxes.docker.backend import DockerBackend
from toolgym.sandboxes.local.backend import LocalBackend


def _backend_class(name: str) -> type[Any]:
    require(name)
    if name == "docker":
        ensure_images("python")
        return DockerBackend
    return LocalBackend


def _audit(factory: Any, name: str, only: tuple[str, ...] = ()) -> list[Row]:
    lines: list[Row] = []
    rows = asyncio.run(audit_backend(factory, name, ["python"], progress=lines.append, only=only))
    assert lines == rows  # a progress line per check, as it ran
    return rows


RESIDUAL_HERE = {
    "reset.carryover-lo-bytes",
    "reset.carryover-inodes",
    "reset.carryover-pids",
    "reset.carryover-ipc-ids",
    "reset.carryover-process-counters",
}
"""The carry-over rows that are residual on both backends of this machine (the README's "What carries
over between episodes"); the memory peak is closed here (Docker on cgroup v1, as root; bubblewrap)."""


def _failed(rows: list[Row]) -> set[str]:
    return {r.check for r in rows if r.result == FAIL}


@pytest.mark.parametrize("name", BACKENDS)
def test_the_audit_passes_on_a_hardened_backend(name: str) -> None:
    rows = _audit(_backend_class(name), name)
    assert [r.check for r in rows] == [n for n, _ in KIND_CHECKS + BACKEND_CHECKS]
    assert {r.backend for r in rows} == {name}
    # both backends run here: nothing is out of reach of a check; the counters a reset cannot empty
    # are reported as residual, and the rule that keeps them harmless passes
    not_passed = [
        (r.check, r.result, r.detail) for r in rows if r.result != PASS and r.check not in RESIDUAL_HERE
    ]
    assert not not_passed, not_passed
    residual = {r.check: r for r in rows if r.check in RESIDUAL_HERE}
    assert all(r.result == RESIDUAL and "mitigated" in r.detail for r in residual.values()), residual
    memory = next(r for r in rows if r.check == "reset.carryover-memory-peak")
    assert memory.detail.startswith("closed: ") and (
        "not visible" in memory.detail if name == "local" else "reset from the host" in memory.detail
    ), memory


class _BridgedApi:
    """The Docker API, except that every container it makes is on the default bridge network."""

    def __init__(self, api: Any) -> None:
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def create_host_config(self, **kwargs: Any) -> Any:
        return self._api.create_host_config(**{**kwargs, "network_mode": "bridge"})

    def create_container(self, *args: Any, **kwargs: Any) -> Any:
        return self._api.create_container(*args, **{**kwargs, "network_disabled": False})


class BridgedDockerBackend(DockerBackend):
    @property
    def api(self) -> Any:
        return _BridgedApi(super().api)


@pytest.mark.docker
def test_containers_on_the_bridge_network_fail_the_egress_checks() -> None:
    _backend_class("docker")
    rows = _audit(BridgedDockerBackend, "docker", only=("egress.",))
    assert {r.check for r in rows} == {n for n, _ in KIND_CHECKS + BACKEND_CHECKS if n.startswith("egress.")}
    failed = _failed(rows)
    assert {"egress.interfaces", "egress.gateway", "egress.other-sandboxes", "egress.allowlist"} <= failed, (
        rows
    )
    detail = next(r.detail for r in rows if r.check == "egress.interfaces")
    assert "eth0" in detail


@pytest.mark.docker
def test_an_engine_whose_proc_is_elsewhere_skips_only_the_host_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote engine: the host cannot read the agent's /proc, the reset is still checked (docker top)."""
    from toolgym.sandboxes.docker import backend as docker_backend

    cls = _backend_class("docker")
    monkeypatch.setattr(docker_backend, "_engine_is_local", lambda pid, container_id: False)
    rows = _audit(cls, "docker", only=("host.", "reset.verified"))
    assert [(r.check, r.result) for r in rows] == [
        ("host.agent-hardening", "skip"),
        ("reset.verified-from-host", PASS),
    ]
    assert "another machine" in rows[0].detail and "docker top" in rows[1].detail


@pytest.fixture()
def agent_without_filter() -> Iterator[Path]:
    """The agent's files with ``harden.apply`` doing nothing: dumpable, no seccomp filter."""
    weak = Path(tempfile.mkdtemp(prefix="toolgym-weak-agent-"))
    weak.chmod(0o755)
    for f in lifecycle.staged_agent_dir().iterdir():
        shutil.copyfile(f, weak / f.name)
        (weak / f.name).chmod(0o644)
    with open(weak / "harden.py", "a") as harden:  # the rest of the module (the token hand-over) stays
        harden.write("\n\ndef apply():\n    return {'dumpable': True, 'seccomp': 'not installed: a test'}\n")
    yield weak
    shutil.rmtree(weak, ignore_errors=True)


def test_a_local_agent_without_its_seccomp_filter_fails_the_agent_checks(agent_without_filter: Path) -> None:
    require("local")
    staged = str(lifecycle.staged_agent_dir())

    class NoFilterLocalBackend(LocalBackend):
        def _launch_argv(self, *args: Any) -> tuple[list[str], bool]:  # type: ignore[override]
            argv, drop = LocalBackend._launch_argv(*args)
            return [a.replace(staged, str(agent_without_filter)) for a in argv], drop

    rows = _audit(NoFilterLocalBackend, "local", only=("agent.", "host."))
    failed = _failed(rows)
    assert {"agent.seccomp", "agent.pid1", "host.agent-hardening"} <= failed, rows
    seccomp = next(r.detail for r in rows if r.check == "agent.seccomp")
    assert "process_vm_readv" in seccomp and "pidfd_getfd" in seccomp


@pytest.fixture()
def agent_forgetting_dev_shm() -> Iterator[Path]:
    """The agent's files with a reset whose enumeration leaves ``/dev/shm`` out: neither wiped
    nor reported (the kind of gap a reset from a list of remembered places has)."""
    weak = Path(tempfile.mkdtemp(prefix="toolgym-weak-agent-"))
    weak.chmod(0o755)
    for f in lifecycle.staged_agent_dir().iterdir():
        shutil.copyfile(f, weak / f.name)
        (weak / f.name).chmod(0o644)
    with open(weak / "wipe.py", "a") as wipe:
        wipe.write(
            "\n_every_mount = writable_mounts\n\n\ndef writable_mounts():\n"
            "    return [m for m in _every_mount() if m[0] != '/dev/shm']\n"
        )
    yield weak
    shutil.rmtree(weak, ignore_errors=True)


def test_a_writable_place_the_reset_does_not_wipe_fails_the_reset_check(
    agent_forgetting_dev_shm: Path,
) -> None:
    require("local")
    staged = str(lifecycle.staged_agent_dir())

    class ForgetfulLocalBackend(LocalBackend):
        def _launch_argv(self, *args: Any) -> tuple[list[str], bool]:  # type: ignore[override]
            argv, drop = LocalBackend._launch_argv(*args)
            return [a.replace(staged, str(agent_forgetting_dev_shm)) for a in argv], drop

    rows = _audit(ForgetfulLocalBackend, "local", only=("reset.enumeration",))
    assert _failed(rows) == {"reset.enumeration"}, rows
    assert "/dev/shm" in rows[0].detail and ".tg-mark" in rows[0].detail


@pytest.mark.parametrize("name", BACKENDS)
def test_a_pool_without_the_group_rule_fails_and_a_false_claim_of_reset_fails(name: str) -> None:
    """A pool that hands a sandbox to a sibling of its last episode fails
    ``reset.group-separation``; a backend that says it reset the memory peak and did not fails
    ``reset.carryover-memory-peak`` (where the peak is visible: Docker)."""
    from toolgym.core.sandbox import GROUP_LABEL

    base = _backend_class(name)

    class Careless(base):  # type: ignore[misc, valid-type]
        async def acquire(self, kind: str, **kwargs: Any) -> Any:
            labels = {k: v for k, v in (kwargs.pop("labels", None) or {}).items() if k != GROUP_LABEL}
            return await super().acquire(kind, labels=labels, **kwargs)

        async def _after_reset(self, sandbox: Any) -> None:
            sandbox.handle["counters"] = {"memory_peak": "reset"}

    rows = {
        r.check: r
        for r in _audit(Careless, name, only=("reset.group-separation", "reset.carryover-memory-peak"))
    }
    assert rows["reset.group-separation"].result == FAIL, rows
    assert "same group" in rows["reset.group-separation"].detail
    peak = rows["reset.carryover-memory-peak"]
    if name == "local":
        assert peak.result == PASS and "not visible" in peak.detail, peak
    else:
        assert peak.result == FAIL and "yet the next episode read it" in peak.detail, peak


def test_the_cli_exit_code_follows_the_checks(
    monkeypatch: pytest.MonkeyPatch, agent_without_filter: Path
) -> None:
    """Two checks are enough to see the plumbing: table, JSON, progress lines, exit status."""
    from toolgym.cli import app

    require("local")
    monkeypatch.setattr(
        runner, "KIND_CHECKS", [c for c in KIND_CHECKS if c[0] in ("agent.seccomp", "egress.interfaces")]
    )
    monkeypatch.setattr(runner, "BACKEND_CHECKS", [])
    from toolgym.plugins.sql import audit as sql_audit  # database rows: tests/plugins/sql/test_sql_audit.py

    monkeypatch.setattr(sql_audit, "SQLITE_CHECKS", [])
    monkeypatch.setattr(sql_audit, "POSTGRES_CHECKS", [])
    cli = CliRunner()
    ok = cli.invoke(app, ["sandbox", "audit", "--backend", "local"])
    assert ok.exit_code == 0, ok.output
    assert "agent.seccomp (python)" in ok.stdout and "everything contained" in ok.output
    staged = str(lifecycle.staged_agent_dir())

    class NoFilterLocalBackend(LocalBackend):
        def _launch_argv(self, *args: Any) -> tuple[list[str], bool]:  # type: ignore[override]
            argv, drop = LocalBackend._launch_argv(*args)
            return [a.replace(staged, str(agent_without_filter)) for a in argv], drop

    monkeypatch.setattr(runner, "resolve", lambda backend: ("local", NoFilterLocalBackend))
    bad = cli.invoke(app, ["sandbox", "audit", "--json"])
    assert bad.exit_code == 1, bad.output
    rows = json.loads(bad.stdout)
    assert [(r["check"], r["result"]) for r in rows] == [("agent.seccomp", FAIL), ("egress.interfaces", PASS)]
    assert "1 FAILED (agent.seccomp (python))" in bad.output
