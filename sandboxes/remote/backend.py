"""``RemoteDockerBackend``: hardened sandbox containers on a Docker engine on another machine.

Same containers as ``DockerBackend`` (the same ``create_sandbox_container`` and ``hardened_host_config``: no network, read-only
root, no capabilities, ``no-new-privileges``, limits, ``--init``, ``auto_remove``; the same
labels and TTL; the same warm pool, reset and poison checks; the same start-up sweep, run against
that engine), with two differences forced by the distance:

- the agent's files come from a per-version volume on that engine (``agentvol``), not a bind
  mount of this machine's directory;
- the agent's channel is the container's attach stream (``attach``), not a UNIX socket in a
  bind-mounted directory. The container's log driver is ``none``, so protocol traffic is never
  written to the engine's disk; the agent's stderr comes back on the stream instead.

Sandbox kinds with a network allowlist get the same filtering proxy (``netproxy.EgressProxy``)
on this machine, fed by tunnels over the attach stream (``toolgym.sandboxes.tunnel``) instead of
a UNIX socket; besides this host's own addresses, the engine's address and its networks' gateways
are refused unless the allowlist names them literally. ``open_backend("docker")`` and the
``docker`` plugin pick this class when ``DOCKER_HOST`` names a TCP engine.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import socket
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from toolgym.core.sandbox_profiles import SandboxProfile, agent_config
from toolgym.sandboxes.agent import protocol
from toolgym.sandboxes.docker import engine
from toolgym.sandboxes.docker.backend import PYTHON, DockerBackend, create_sandbox_container
from toolgym.sandboxes.netproxy import EgressProxy
from toolgym.sandboxes.remote import agentvol
from toolgym.sandboxes.remote.attach import AttachStream, open_attach, wait_hello
from toolgym.sandboxes.remote.hosts import DockerHost
from toolgym.sandboxes.sandbox import AgentSandbox
from toolgym.sandboxes.tunnel import EgressTunnels

_gates: dict[str, threading.BoundedSemaphore] = {}
_gates_lock = threading.Lock()


def _gate(url: str) -> threading.BoundedSemaphore:
    """Container creations in flight per engine (the engine serialises them anyway)."""
    with _gates_lock:
        return _gates.setdefault(url, threading.BoundedSemaphore(4))


class RemoteDockerBackend(DockerBackend):
    """Sandboxes on one Docker engine reached through its API only (see the module docstring).
    Options: those of ``PooledBackend`` plus ``host`` (a ``DockerHost`` or URL) or ``base_url``
    (default ``DOCKER_HOST``; TLS from ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``)."""

    name = "docker"

    def __init__(
        self, *, host: DockerHost | str | None = None, base_url: str | None = None, **options: Any
    ) -> None:
        resolved = (
            DockerHost.from_env(host) if isinstance(host, str) else host or DockerHost.from_env(base_url)
        )
        super().__init__(base_url=resolved.url, **options)
        self.host: DockerHost = resolved
        self._blocked: list[str] | None = None

    @property
    def api(self) -> Any:
        return self.host.client()

    async def _sweep(self) -> int:
        swept = await engine.call(lambda: engine.sweep(self.api))
        try:
            await engine.call(lambda: agentvol.sweep(self.api))
        except Exception as exc:  # old volumes are clutter, not a reason to stop
            from toolgym.sandboxes.pool import log

            log.warning("could not sweep old agent volumes on %s: %s", self.host.url, exc)
        return swept

    async def _create(
        self,
        kind: str,
        profile: SandboxProfile,
        *,
        sandbox_id: str,
        episode_id: str,
        labels: Mapping[str, str],
    ) -> AgentSandbox:
        image = profile.image_for(kind)
        await self._check_image(image, kind)
        volume = await engine.call(agentvol.ensure, self.api, image, python=PYTHON, key=self.host.url)
        token = secrets.token_hex(16)
        config = agent_config(profile, socket="stdio", python=PYTHON, proxy_socket=protocol.TUNNEL)
        blocked = await self._engine_addresses() if profile.network else []
        all_labels = self._labels(labels, kind, sandbox_id=sandbox_id, episode_id=episode_id, profile=profile)
        container_id: str | None = None
        stream: AttachStream | None = None
        try:
            container_id = await engine.call(
                self._create_container, image, kind, sandbox_id, profile, config, all_labels, volume, token
            )
            stream = await open_attach(self.host, container_id, api_version=self.api.api_version)
            await engine.call(self.api.start, container_id)
            cid, attached = container_id, stream

            async def alive() -> str | None:
                return await engine.call(self._why_stopped_remote, cid, attached)

            channel = await wait_hello(
                stream, token=token, name=sandbox_id, timeout_s=self.start_timeout_s, alive=alive
            )
            proxy = None
            if profile.network:  # before any command runs, so before any tunnel can open
                proxy = EgressProxy(None, profile, name=sandbox_id, blocked=blocked)
                EgressTunnels(channel, proxy.handle)
        except BaseException:
            if stream is not None:
                stream.close()
            if container_id is not None:
                cid = container_id
                await engine.call(lambda: engine.remove_container(self.api, cid))
            raise
        return AgentSandbox(
            id=sandbox_id,
            kind=kind,
            backend=self.name,
            channel=channel,
            profile=profile,
            episode_id=episode_id,
            handle={"container": container_id, "proxy": proxy, "host": self.host.url},
        )

    async def _engine_addresses(self) -> list[str]:
        """The engine's own address and its networks' gateways (docker0's among them), fetched once."""
        if self._blocked is None:
            self._blocked = await engine.call(self._fetch_engine_addresses)
        return self._blocked

    def _fetch_engine_addresses(self) -> list[str]:
        found: list[str] = []
        hostname = urlsplit(self.host.url).hostname
        if hostname:
            with contextlib.suppress(OSError):
                found += [
                    str(info[4][0]) for info in socket.getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
                ]
        for network in self.api.networks():
            for pool in (network.get("IPAM") or {}).get("Config") or []:
                if pool.get("Gateway"):
                    found.append(str(pool["Gateway"]).split("/")[0])
                elif pool.get("Subnet"):  # an engine that does not list it uses the subnet's first address
                    with contextlib.suppress(ValueError, StopIteration):
                        found.append(str(next(ipaddress.ip_network(pool["Subnet"], strict=False).hosts())))
        return sorted(set(found))

    def _create_container(
        self,
        image: str,
        kind: str,
        sandbox_id: str,
        profile: SandboxProfile,
        config: dict[str, Any],
        labels: dict[str, str],
        volume: str,
        token: str,
    ) -> str:
        from docker.types import LogConfig, Mount

        mounts = [Mount(target=agentvol.MOUNT, source=volume, type="volume", read_only=True, no_copy=True)]
        with _gate(self.host.url):
            return create_sandbox_container(
                self.api,
                image,
                kind=kind,
                sandbox_id=sandbox_id,
                profile=profile,
                labels=labels,
                entry=agentvol.ENTRY,
                config=config,
                token=token,
                mounts=mounts,
                host_options={"log_config": LogConfig(type="none")},
                stdin_open=True,  # with detach=False: OpenStdin, StdinOnce and AttachStdin/out/err
                detach=False,
                tty=False,
            )

    def _why_stopped_remote(self, container_id: str, stream: AttachStream) -> str | None:
        import docker

        try:
            state = self.api.inspect_container(container_id)["State"]
        except docker.errors.NotFound:
            return f"its container exited and was removed (stderr: {stream.stderr_tail() or 'empty'})"
        if state.get("Running"):
            return None
        return (
            f"its container exited with status {state.get('ExitCode')}: {stream.stderr_tail() or 'no output'}"
        )
