"""Run the audit against one backend: open it with small limits, take real sandboxes of each kind,
run the checks in order (each a ``Row``), close it.

Limits are the kind's own profile (image, network) with small caps (``AUDIT_LIMITS``), so that the
probes that push on them finish in seconds. Order matters: the fresh sandbox is looked at before
anything touches it; the reset checks come after the others have dirtied it; the hijack attempt is
followed by the next episode's look; the carry-over rows (``residual`` where a counter outlives a
reset) and the group rule that mitigates them come last; the allowlist check uses a kind of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from toolgym.core.sandbox_profiles import DEFAULT_PROFILES, MiB, SandboxProfile
from toolgym.sandboxes.audit import agent, carryover, egress, hostside, isolation, probes, reset, zygote
from toolgym.sandboxes.audit.rows import PASS, Row, outcome
from toolgym.sandboxes.audit.target import Target

AUDIT_LIMITS: dict[str, Any] = {
    "memory_bytes": 256 * MiB,
    "pids": 64,
    "workdir_bytes": 32 * MiB,
    "tmp_bytes": 16 * MiB,
    "home_bytes": 8 * MiB,
    "shm_bytes": 16 * MiB,
    "inodes": 4096,
    "default_timeout_s": 30.0,
    "prestart_python": False,
}
"""Caps of the audit's sandboxes (a bomb hits them fast)."""

Check = Callable[[Target], Awaitable[str]]
KIND_CHECKS: list[tuple[str, Check]] = [
    ("isolation.read-only-root", isolation.read_only_root),
    ("isolation.privileges", isolation.privileges),
    ("isolation.host-sockets", isolation.host_sockets),
    ("agent.pid1", agent.pid1),
    ("agent.seccomp", agent.seccomp),
    ("host.agent-hardening", agent.host_view),
    ("limits.tmpfs", isolation.tmpfs_caps),
    ("limits.pids", isolation.pids_cap),
    ("limits.memory", isolation.memory_cap),
    ("egress.interfaces", egress.interfaces),
    ("egress.public", egress.public),
    ("egress.link-local", egress.link_local),
    ("egress.gateway", egress.gateway),
    ("egress.host-loopback", egress.host_loopback),
    ("reset.enumeration", reset.enumeration),
    ("agent.hijack", agent.hijack),
    ("reset.after-hijack", reset.after_hijack),
    ("reset.verified-from-host", reset.verified_from_host),
    ("reset.kept-session", reset.kept_session),
    ("reset.zygote", zygote.zygote),
    ("reset.carryover-lo-bytes", carryover.lo_bytes),
    ("reset.carryover-inodes", carryover.inodes),
    ("reset.carryover-pids", carryover.pids),
    ("reset.carryover-ipc-ids", carryover.ipc_ids),
    ("reset.carryover-process-counters", carryover.process_counters),
    ("reset.carryover-memory-peak", carryover.memory_peak),
    ("reset.group-separation", carryover.group_separation),
]
"""Checks run in each kind's sandbox, in this order."""
BACKEND_CHECKS: list[tuple[str, Check]] = [
    ("egress.other-sandboxes", egress.other_sandboxes),
    ("egress.allowlist", egress.allowlist),
]
"""Checks run once per backend: ``egress.allowlist`` in a kind made for it, the others in the first kind."""
ALLOWLIST_KIND = "audit-allowlist"

BackendFactory = Callable[..., Any]


def audit_profile(kind: str, base: SandboxProfile | None = None) -> SandboxProfile:
    import dataclasses

    profile = base or DEFAULT_PROFILES.get(kind) or SandboxProfile()
    return dataclasses.replace(profile, image=profile.image_for(kind), **AUDIT_LIMITS)


async def audit_backend(
    factory: BackendFactory,
    name: str,
    kinds: Sequence[str] = ("python",),
    *,
    progress: Callable[[Row], None] | None = None,
    only: Sequence[str] = (),
) -> list[Row]:
    """Audit the backend ``factory(profiles=..., max_idle=1)`` makes (``name``: how rows call it):
    the rows of ``KIND_CHECKS`` for each kind, then ``BACKEND_CHECKS``; a kind whose sandbox cannot
    be made gets one failed ``sandbox.create`` row instead. ``progress`` sees each row as it is done;
    ``only``: run just the checks whose names start with one of these prefixes."""
    rows: list[Row] = []

    def emit(row: Row) -> None:
        rows.append(row)
        if progress is not None:
            progress(row)

    wanted = [(n, c) for n, c in KIND_CHECKS if not only or n.startswith(tuple(only))]
    backend_wanted = [(n, c) for n, c in BACKEND_CHECKS if not only or n.startswith(tuple(only))]
    with hostside.HostServer() as server:
        profiles = {k: audit_profile(k) for k in kinds}
        profiles[ALLOWLIST_KIND] = egress.allowlist_profile(profiles[kinds[0]], kinds[0], server.port)
        backend = factory(profiles=profiles, max_idle=1)
        try:
            gateways = await asyncio.to_thread(_gateways, backend, name)
            for kind in kinds:
                t = Target(backend, name, kind, profiles[kind], server, gateways)
                made = await _run(t, "sandbox.create", _create)
                if made.result != PASS:  # nothing to audit in: one row says why, not one per check
                    emit(made)
                    continue
                await _look_fresh(t)
                for check_name, check in wanted:
                    emit(await _run(t, check_name, check))
                await t.close()
            for check_name, check in backend_wanted:
                kind = ALLOWLIST_KIND if check_name == "egress.allowlist" else kinds[0]
                t = Target(backend, name, kind, profiles[kind], server, gateways)
                emit(await _run(t, check_name, check))
                await t.close()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(backend.aclose(), 60)
    return rows


async def _create(t: Target) -> str:
    started = time.perf_counter()
    sb = await t.current()
    return f"{sb.id} in {time.perf_counter() - started:.1f}s"


async def _look_fresh(t: Target) -> None:
    try:
        t.fresh = await asyncio.wait_for(probes.run_probe(await t.current(), probes.FIND), 90)
    except Exception as exc:  # the reset check reports it
        t.fresh_error = f"{type(exc).__name__}: {exc}"


async def _run(t: Target, name: str, check: Check) -> Row:
    started = time.perf_counter()
    try:
        result, detail = outcome(None, await asyncio.wait_for(check(t), 120))
    except Exception as exc:
        result, detail = outcome(exc)
    return Row(name, t.backend_name, t.kind, result, detail, round(time.perf_counter() - started, 2))


def _gateways(backend: Any, name: str) -> list[str]:
    """Where the host is, seen from a sandbox: the Docker engine's gateways, and this host's own
    addresses when the sandboxes run here (a local backend or a local engine)."""
    api = hostside.docker_api_of(backend)
    found = hostside.engine_gateways(api) if api is not None else []
    base_url = str(getattr(api, "base_url", "") or "")
    if api is None:  # sandboxes on this host: a Docker engine here has its bridge on this host too
        from toolgym.sandboxes.docker import engine

        if engine.engine_answers():
            found += hostside.engine_gateways(engine.api())
    if api is None or "unix" in base_url or "localhost" in base_url:
        found += hostside.own_addresses()
    return sorted(set(found))


def resolve(backend: str | None) -> tuple[str, BackendFactory]:
    """``(name, factory)`` of the backend called ``backend``, or of the one ``auto`` picks
    (:func:`toolgym.core.sandbox.sandbox_backend_spec`, the rule every command uses)."""
    from toolgym.core.errors import ConfigError
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import sandbox_backend_spec

    spec = sandbox_backend_spec(get_registry(), backend)
    if spec is None:
        raise ConfigError(
            "`toolgym sandbox audit` needs a sandbox backend to audit; --backend none names none"
        )
    return spec.name, spec.factory


async def run_audit(
    backend: str | None = None,
    kinds: Sequence[str] | None = None,
    *,
    progress: Callable[[Row], None] | None = None,
) -> list[Row]:
    """Audit the backend named ``backend`` (default: the one other commands pick) on ``kinds``
    (default ``python``)."""
    name, factory = resolve(backend)
    return await audit_backend(factory, name, list(kinds or ["python"]), progress=progress)
