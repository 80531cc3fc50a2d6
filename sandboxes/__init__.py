"""toolgym.sandboxes: where tools run code.

One sandbox per episode and tool family, taken from a warm pool, reset or destroyed afterwards.
Two backends share one in-sandbox agent and one API (``toolgym.core.sandbox.Sandbox``):
``DockerBackend`` (hardened containers) and ``LocalBackend`` (bubblewrap), chosen by
``open_backend()`` — by name, or ``auto``: Docker when an engine answers, else local. See README.md in this folder.
"""

from __future__ import annotations

from typing import Any

from toolgym.core.sandbox_profiles import DEFAULT_PROFILES, HOME, WORKDIR, SandboxProfile, register_profile
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.sandbox import AgentPythonSession, AgentSandbox, AgentShellSession


def open_backend(name: str = "auto", **options: Any) -> PooledBackend:
    """A sandbox backend by name (``docker``, ``local``, ``docker-hosts``, ...) or ``auto``, under the one
    rule of :func:`toolgym.core.sandbox.sandbox_backend_spec`. ``options`` go to the backend (``warm``,
    ``profiles``, ...)."""
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import open_sandbox_backend

    return open_sandbox_backend(get_registry(), name, **options)  # type: ignore[return-value]


__all__ = [
    "DEFAULT_PROFILES",
    "HOME",
    "WORKDIR",
    "AgentPythonSession",
    "AgentSandbox",
    "AgentShellSession",
    "PooledBackend",
    "SandboxProfile",
    "open_backend",
    "register_profile",
]
