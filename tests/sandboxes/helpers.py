"""Helpers of the sandbox suite (also used by the code-tool tests): the two backends, a profile
with small limits, and making a backend or failing/skipping when this host lacks it.

A backend this host lacks is skipped on a developer's machine and fails in CI (``CI`` set), where
the CI script starts the Docker engine and builds the images first.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from toolgym.core.sandbox_profiles import MiB
from toolgym.sandboxes import SandboxProfile
from toolgym.sandboxes.pool import PooledBackend

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "local"]

TEST_PROFILE = SandboxProfile(
    memory_bytes=256 * MiB,
    cpus=1.0,
    pids=64,
    workdir_bytes=32 * MiB,
    tmp_bytes=16 * MiB,
    home_bytes=8 * MiB,
    default_timeout_s=20.0,
    max_output_bytes=64 * 1024,
    ttl_s=1800.0,
)
"""Small limits so that bombs hit them fast."""


def backend_problem(name: str) -> str | None:
    if name == "docker":
        from toolgym.sandboxes.docker import engine

        if not engine.engine_answers():
            return "no Docker engine answers (bash scripts/ensure-docker.sh)"
        return None
    from toolgym.sandboxes.local.backend import bwrap_problem

    return bwrap_problem()


def require(name: str) -> None:
    problem = backend_problem(name)
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the {name} sandbox backend must work in CI: {problem}")
    pytest.skip(f"{name} backend unavailable here: {problem}")


def ensure_images(*names: str) -> None:
    """Build the images the tests need when they are missing or stale (a no-op when cached)."""
    from toolgym.sandboxes.docker import engine, images

    status = images.image_status(engine.api())
    if any(status.get(n) != "up to date" for n in names):
        images.build(list(names), progress=lambda m: print(m, flush=True))


def make_backend(name: str, *, images: tuple[str, ...] = ("python",), **options: Any) -> PooledBackend:
    """A backend of ``name`` (its Docker ``images`` built first), or skip/fail when it cannot work."""
    require(name)
    if name == "docker":
        from toolgym.sandboxes.docker.backend import DockerBackend

        ensure_images(*images)
        return DockerBackend(**options)
    from toolgym.sandboxes.local.backend import LocalBackend

    return LocalBackend(**options)
