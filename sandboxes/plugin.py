"""Registers the Docker and local sandbox backends through the ``toolgym_sandbox_backends`` hook,
as any third-party backend would. Heavy imports (the Docker SDK) wait until a backend is made."""

from __future__ import annotations

from typing import Any

from toolgym.core.hookspecs import hookimpl
from toolgym.core.sandbox import SandboxBackendSpec


def _docker(**options: Any) -> Any:
    import os

    from toolgym.sandboxes.remote.hosts import is_remote_url

    if is_remote_url(options.get("base_url") or os.environ.get("DOCKER_HOST")):  # another machine's engine
        from toolgym.sandboxes.remote.backend import RemoteDockerBackend

        return RemoteDockerBackend(**options)
    from toolgym.sandboxes.docker.backend import DockerBackend

    return DockerBackend(**options)


def _docker_hosts(**options: Any) -> Any:
    from toolgym.sandboxes.remote.multihost import MultiHostDockerBackend

    return MultiHostDockerBackend(**options)


def _docker_hosts_configured() -> bool:
    import os

    from toolgym.sandboxes.remote.hosts import HOSTS_ENV

    return bool(os.environ.get(HOSTS_ENV))


def _docker_available() -> bool:
    from toolgym.sandboxes.docker.engine import engine_answers

    return engine_answers()


def _local(**options: Any) -> Any:
    from toolgym.sandboxes.local.backend import LocalBackend

    return LocalBackend(**options)


def _local_available() -> bool:
    from toolgym.sandboxes.local.backend import bwrap_problem

    return bwrap_problem() is None


def _memory(**options: Any) -> Any:
    from toolgym.sandboxes.memory import MemoryBackend

    return MemoryBackend(**options)


@hookimpl
def toolgym_sandbox_backends() -> list[SandboxBackendSpec]:
    options = {
        "warm": "idle sandboxes kept ready per kind",
        "max_idle": "idle sandboxes kept after release",
        "profiles": "per-kind limits, image and network allowlist",
        "run_id": "label of this run",
    }
    return [
        SandboxBackendSpec(
            name="docker-hosts",
            factory=_docker_hosts,
            available=_docker_hosts_configured,
            priority=30,
            options={**options, "hosts": "URL[=CAPACITY],... (default $TOOLGYM_DOCKER_HOSTS)"},
            description="Docker engines on several hosts (TCP with TLS, or local), sandboxes placed by free capacity.",
        ),
        SandboxBackendSpec(
            name="docker",
            factory=_docker,
            available=_docker_available,
            priority=20,
            options=options,
            description="Hardened Docker containers (no network, read-only root, no capabilities), warm-pooled.",
        ),
        SandboxBackendSpec(
            name="local",
            factory=_local,
            available=_local_available,
            priority=10,
            options=options,
            description="bubblewrap namespaces plus rlimits on this host, for machines without Docker.",
        ),
        # A test double that isolates nothing: never picked automatically, only by name; model-driven
        # runs (collect, train, reverify) refuse it without --unsafe-in-process-sandbox.
        SandboxBackendSpec(
            name="memory",
            factory=_memory,
            available=lambda: False,
            priority=-100,
            isolates=False,
            options={
                **options,
                "handler": "answers run() calls",
                "python": "'inprocess', None or a session factory",
            },
            description="In-memory test double (fake files, pluggable commands, in-process Python); NO isolation: "
            "code runs inside this process.",
        ),
    ]
