"""Docker engines by address: ``DockerHost`` (URL, capacity, TLS files), parsing host lists, and
one API client and TLS context per host.

An address is ``unix:///var/run/docker.sock`` (an engine on this machine) or ``tcp://HOST:PORT``
(an engine anywhere, TLS when ``tls_verify`` is set or a certificate directory is given, as the
docker CLI does with ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH``). A certificate directory
holds ``ca.pem``, ``cert.pem`` and ``key.pem``.

Host lists (``TOOLGYM_DOCKER_HOSTS``, ``--sandbox-backend docker-hosts``) are comma-separated
``URL[=CAPACITY]``; a host without a capacity gets ``SANDBOXES_PER_CORE`` × its CPU count (asked
from the engine). TLS settings come from ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``; when
``DOCKER_CERT_PATH`` has a sub-directory named after a host (``10.0.0.5`` or ``10.0.0.5:2376``),
that host uses it instead.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from toolgym.core.errors import ConfigError, SandboxError

HOSTS_ENV = "TOOLGYM_DOCKER_HOSTS"
API_VERSION = "1.41"
"""Docker Engine API version spoken to every engine (Docker 20.10 and every later release)."""
SANDBOXES_PER_CORE = 2
"""Default capacity per CPU core of a host whose capacity is not given (tool calls are bursty:
most sandboxes idle between model turns, so two per core keeps the cores busy without thrashing)."""

Channel = Literal["auto", "socket", "attach"]

_lock = threading.Lock()
_clients: dict[tuple[str, str | None, bool], Any] = {}


@dataclass(frozen=True, slots=True)
class DockerHost:
    """One Docker engine that sandboxes may be placed on."""

    url: str
    """``unix:///path/docker.sock`` or ``tcp://host:port``."""
    capacity: int | None = None
    """Most sandboxes (idle or busy) on this host at once, counting other processes' sandboxes;
    None: ``SANDBOXES_PER_CORE`` × the host's CPU count."""
    tls_verify: bool = False
    """Verify the engine's certificate against ``ca.pem`` (``DOCKER_TLS_VERIFY``)."""
    cert_path: str | None = None
    """Directory with ``ca.pem``, ``cert.pem``, ``key.pem`` (``DOCKER_CERT_PATH``); None: no TLS
    unless ``tls_verify`` (then ``~/.docker``)."""
    channel: Channel = "auto"
    """How the host reaches each sandbox's agent: ``socket`` (a UNIX socket in a bind-mounted
    directory: the engine must share this machine's filesystem), ``attach`` (the agent's
    stdin/stdout through the engine's API, works anywhere), ``auto`` (socket for ``unix://``
    engines, attach otherwise)."""

    def __post_init__(self) -> None:
        scheme = urlsplit(self.url).scheme
        if scheme not in ("unix", "tcp", "http", "https"):
            raise ConfigError(
                f"Docker host {self.url!r}: give unix:///path/docker.sock or tcp://HOST:PORT "
                "(ssh:// engines are not supported: expose the engine over TCP with TLS)"
            )
        if self.capacity is not None and self.capacity < 1:
            raise ConfigError(f"Docker host {self.url!r}: capacity must be at least 1, got {self.capacity}")
        if self.channel not in ("auto", "socket", "attach"):
            raise ConfigError(
                f"Docker host {self.url!r}: channel must be auto, socket or attach, got {self.channel!r}"
            )

    @property
    def name(self) -> str:
        """``host:port`` (or the socket path): what logs and labels call this engine."""
        parts = urlsplit(self.url)
        return parts.path if parts.scheme == "unix" else parts.netloc

    @property
    def attach(self) -> bool:
        """Whether sandboxes here are reached over the engine's attach stream."""
        if self.channel == "auto":
            return urlsplit(self.url).scheme != "unix"
        return self.channel == "attach"

    @property
    def uses_tls(self) -> bool:
        return self.tls_verify or self.cert_path is not None

    def _certs(self) -> tuple[Path, Path, Path]:
        root = Path(self.cert_path or Path.home() / ".docker").expanduser()
        files = (root / "ca.pem", root / "cert.pem", root / "key.pem")
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise ConfigError(
                f"Docker host {self.url}: TLS files missing ({', '.join(missing)}); "
                "set DOCKER_CERT_PATH to the directory holding ca.pem, cert.pem and key.pem"
            )
        return files

    def client(self) -> Any:
        """The shared ``docker.APIClient`` of this engine (made once per process)."""
        key = (self.url, self.cert_path, self.tls_verify)
        with _lock:
            made = _clients.get(key)
            if made is None:
                import docker

                tls: Any = False
                if self.uses_tls:
                    ca, cert, keyfile = self._certs()
                    tls = docker.tls.TLSConfig(
                        client_cert=(str(cert), str(keyfile)), ca_cert=str(ca), verify=self.tls_verify
                    )
                import requests

                made = docker.APIClient(
                    base_url=self.url, version=API_VERSION, timeout=60, max_pool_size=64, tls=tls
                )
                # The attach stream connects directly, so the API does too: no proxies from the
                # environment, and REQUESTS_CA_BUNDLE must not replace the engine's own CA.
                made.trust_env = False
                try:
                    made.ping()
                except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                    raise SandboxError(
                        f"cannot reach the Docker engine at {self.url} ({exc}); check that it runs, that this "
                        "machine may connect to it, and its TLS settings (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)"
                    ) from None
                _clients[key] = made
            return made

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for raw connections to the engine (attach streams), or None."""
        if not self.uses_tls:
            return None
        ca, cert, keyfile = self._certs()
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.load_cert_chain(str(cert), str(keyfile))
        if not self.tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    @classmethod
    def from_env(
        cls, url: str | None = None, *, capacity: int | None = None, environ: Mapping[str, str] | None = None
    ) -> DockerHost:
        """The engine ``url`` (default ``DOCKER_HOST``, else the local socket) with the TLS
        settings of ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``."""
        env = os.environ if environ is None else environ
        url = url or env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        verify = env.get("DOCKER_TLS_VERIFY", "") not in ("", "0")
        certs = env.get("DOCKER_CERT_PATH") or None
        if certs is None and verify:
            certs = str(Path.home() / ".docker")
        host = cls(url=url, capacity=capacity)
        if urlsplit(url).scheme == "unix" or not (verify or certs):
            return host
        assert certs is not None
        for sub in (host.name, host.name.rsplit(":", 1)[0]):
            if (Path(certs) / sub).is_dir():
                certs = str(Path(certs) / sub)
                break
        return replace(host, tls_verify=verify, cert_path=certs)


def is_remote_url(url: str | None) -> bool:
    """Whether an engine address needs the attach channel (anything but a UNIX socket)."""
    return bool(url) and urlsplit(str(url)).scheme not in ("unix", "")


def parse_hosts(
    spec: str | Sequence[str | DockerHost | Mapping[str, Any]], *, environ: Mapping[str, str] | None = None
) -> list[DockerHost]:
    """Hosts from ``"URL[=CAP],URL[=CAP]"``, or from a list of such strings, ``DockerHost``s, or
    mappings of ``DockerHost`` fields."""
    items: Sequence[Any] = [s for s in spec.split(",") if s.strip()] if isinstance(spec, str) else spec
    hosts: list[DockerHost] = []
    for item in items:
        if isinstance(item, DockerHost):
            hosts.append(item)
        elif isinstance(item, Mapping):
            unknown = set(item) - {"url", "capacity", "tls_verify", "cert_path", "channel"}
            if unknown:
                raise ConfigError(
                    f"Docker host {dict(item)!r}: unknown fields {sorted(unknown)}; "
                    "known: url, capacity, tls_verify, cert_path, channel"
                )
            hosts.append(DockerHost(**item))
        else:
            url, _, cap = (
                str(item).strip().rpartition("=") if "=" in str(item) else (str(item).strip(), "", "")
            )
            if cap and not cap.isdigit():
                raise ConfigError(
                    f"Docker host {item!r}: write URL=CAPACITY with a whole number, e.g. tcp://10.0.0.5:2376=32"
                )
            hosts.append(DockerHost.from_env(url, capacity=int(cap) if cap else None, environ=environ))
    if not hosts:
        raise ConfigError(
            f"no Docker hosts given; set {HOSTS_ENV}=tcp://HOST:PORT=CAPACITY,... (comma-separated)"
        )
    names = [h.url for h in hosts]
    if len(set(names)) != len(names):
        raise ConfigError(f"Docker hosts listed twice: {sorted({n for n in names if names.count(n) > 1})}")
    return hosts
