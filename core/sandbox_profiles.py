"""Sandbox profiles: how sandboxes of one kind are made (image, limits, network).

Sizes are bytes, times seconds. A backend takes ``profiles={"kind": SandboxProfile(...)}`` (or a
mapping of fields) to change any kind; kinds it has never heard of get ``SandboxProfile()`` with
the image ``toolgym/sandbox-<kind>``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.errors import ConfigError

MiB = 1024 * 1024
GiB = 1024 * MiB

WORKDIR = "/workspace"
"""Where commands start and where ``write_file`` / ``read_file`` are confined, in every sandbox."""
HOME = "/home/sandbox"
SANDBOX_UID = 1000
"""The unprivileged user commands run as, inside the sandbox."""
PROXY_PORT = 3128
"""Loopback port of the egress proxy inside sandboxes that have a network allowlist."""


@dataclass(frozen=True, slots=True)
class SandboxProfile:
    """Limits and image of one sandbox kind."""

    image: str = ""
    """Docker image; empty means ``toolgym/sandbox-<kind>:latest`` (built by ``toolgym sandbox build``)."""
    memory_bytes: int = 1 * GiB
    """Memory limit; on Docker also the memory+swap limit (no swap), and tmpfs pages count in it."""
    cpus: float = 1.0
    """CPU quota in cores (Docker only: the local backend cannot cap CPU without cgroups)."""
    pids: int = 256
    """Most processes (and threads) at once."""
    workdir_bytes: int = 512 * MiB
    """Size of the work directory (a tmpfs)."""
    tmp_bytes: int = 256 * MiB
    """Size of /tmp (a tmpfs)."""
    home_bytes: int = 64 * MiB
    shm_bytes: int = 64 * MiB
    """Size of /dev/shm (a tmpfs)."""
    inodes: int = 65536
    """Most files and directories in each writable tmpfs (``nr_inodes``; each costs kernel memory)."""
    network: tuple[str, ...] | None = None
    """None: no network at all. A tuple of host patterns (``example.com``, ``*.example.com``,
    optionally ``:port``): egress only to those, through the host's filtering proxy."""
    default_timeout_s: float = 60.0
    """Time limit of a call that names none."""
    max_output_bytes: int = 256 * 1024
    """Output kept per stream and call (head and tail halves); the middle is dropped."""
    max_file_bytes: int = 64 * MiB
    """Largest file ``read_file`` returns."""
    ttl_s: float = 6 * 3600.0
    """A sandbox destroys itself after this long, whatever the host does."""
    nofile: int = 4096
    prestart_python: bool = False
    """Start the Python session's interpreter with the sandbox (and after each reset), off the
    path of the first call; costs its memory (about 10 MB) while idle."""
    python_zygote: bool = False
    """Fork the Python session's interpreter from a pre-imported one started with the sandbox
    (about 1 ms instead of tens), which lives through the resets; the host checks it from outside
    after each (``toolgym/sandboxes/agent/zygote.py``). Costs its memory (about 10 MB)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables of every command."""

    def image_for(self, kind: str) -> str:
        return self.image or f"toolgym/sandbox-{kind}:latest"

    def allows(self, host: str, port: int) -> bool:
        """Whether the network allowlist lets a connection to ``host:port`` out."""
        if not self.network:
            return False
        host = host.lower().rstrip(".").strip("[]")
        for pattern in self.network:
            pat_host, pat_port = split_pattern(pattern)
            if pat_port and pat_port != str(port):
                continue
            if fnmatch.fnmatchcase(host, pat_host) or (pat_host.startswith("*.") and host == pat_host[2:]):
                return True
        return False

    def names_address(self, address: str, port: int) -> bool:
        """Whether the allowlist names the IP ``address`` literally for ``port`` (not through a host
        name or a wildcard): only then may egress reach a loopback, link-local, metadata or
        Docker-host address (``toolgym.sandboxes.addresses``)."""
        if not self.network:
            return False
        want = parse_ip(address)
        for pattern in self.network:
            pat_host, pat_port = split_pattern(pattern)
            if (not pat_port or pat_port == str(port)) and want is not None and parse_ip(pat_host) == want:
                return True
        return False

    def names_host(self, host: str, port: int) -> bool:
        """Whether an allowlist entry names ``host`` exactly for ``port``: no ``*``, ``?`` or ``[``
        in it, and not an IP address. Such an entry (not a wildcard) lets egress reach a private,
        non-global address the name resolves to (a user's own service on a private network)."""
        if not self.network:
            return False
        host = host.lower().rstrip(".").strip("[]")
        for pattern in self.network:
            pat_host, pat_port = split_pattern(pattern)
            if pat_port and pat_port != str(port):
                continue
            if not set(pat_host) & set("*?[") and parse_ip(pat_host) is None and pat_host == host:
                return True
        return False


def split_pattern(pattern: str) -> tuple[str, str]:
    """``(host, port)`` of an allowlist pattern (``host``, ``host:port``, ``[v6]:port``); port may be ''."""
    pattern = pattern.strip().lower()
    if pattern.startswith("["):
        host, _, rest = pattern[1:].partition("]")
        return host, rest.removeprefix(":")
    if pattern.count(":") > 1:  # a bare IPv6 address
        return pattern, ""
    host, _, port = pattern.partition(":")
    return host.rstrip("."), port


def parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an IP address (IPv4-mapped IPv6 as IPv4, a zone or brackets dropped), or None for a name."""
    try:
        ip = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


DEFAULT_PROFILES: dict[str, SandboxProfile] = {
    "python": SandboxProfile(prestart_python=True, python_zygote=True),
    "shell": SandboxProfile(
        memory_bytes=2 * GiB,
        cpus=2.0,
        pids=512,
        workdir_bytes=2 * GiB,
        inodes=262144,
        default_timeout_s=120.0,
    ),
    "sql": SandboxProfile(),
    "browser": SandboxProfile(memory_bytes=2 * GiB, cpus=2.0, pids=1024, shm_bytes=512 * MiB, network=()),
}


def register_profile(kind: str, profile: SandboxProfile) -> None:
    """Declare the default profile of a sandbox kind; a tool plugin calls this when it is imported
    (the search tool: ``SandboxProfile(network=("api.search.example",))``). Backends made later
    start from it; a backend's own ``profiles=`` option still overrides it."""
    DEFAULT_PROFILES[kind] = profile


def resolve_profiles(
    overrides: Mapping[str, SandboxProfile | Mapping[str, Any]] | None,
) -> dict[str, SandboxProfile]:
    """The default profiles with ``overrides`` applied (a profile replaces, a mapping patches)."""
    profiles = dict(DEFAULT_PROFILES)
    for kind, value in (overrides or {}).items():
        if isinstance(value, SandboxProfile):
            profiles[kind] = value
            continue
        base = profiles.get(kind, SandboxProfile())
        known = {f.name for f in dataclasses.fields(SandboxProfile)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"sandbox profile {kind!r}: unknown fields {unknown}; known: {sorted(known)}")
        patch = dict(value)
        if patch.get("network") is not None:
            patch["network"] = tuple(patch["network"])
        profiles[kind] = dataclasses.replace(base, **patch)
    return profiles


def sandbox_env(profile: SandboxProfile) -> tuple[dict[str, str], dict[str, str]]:
    """The environment of every command: ``(defaults, forced)``. The agent starts from the
    defaults, lets the image's own variables (``ENV`` lines, inherited by the agent) replace them,
    then applies the forced ones: the proxy settings and the profile's ``env``."""
    defaults = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": HOME,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
    }
    forced: dict[str, str] = {}
    if profile.network:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            forced[name] = proxy
        forced["NO_PROXY"] = forced["no_proxy"] = "localhost,127.0.0.1,::1"
    forced.update(profile.env)
    return defaults, forced


def agent_config(
    profile: SandboxProfile,
    *,
    socket: str,
    python: str,
    rlimits: Mapping[str, int] | None = None,
    proxy_socket: str = "/run/toolgym/p.sock",
) -> dict[str, Any]:
    """What the agent is started with (see ``toolgym/sandboxes/agent/main.py``); paths are as
    seen inside the sandbox, whose state directory is mounted at ``/run/toolgym``. ``proxy_socket``:
    where the agent forwards egress connections (the host proxy's UNIX socket, or ``"channel"``:
    tunnelled over the agent's own channel, for engines on other machines). The config is the
    agent's command line, which every process of the sandbox can read (``/proc/1/cmdline``): the
    hello token is never in it (the backend hands it over; ``agent/protocol.py`` says how)."""
    config: dict[str, Any] = {
        "socket": socket,
        "workdir": WORKDIR,
        "python": python,
        "bash": "/bin/bash",
        "ttl_s": profile.ttl_s,
        "own_pid_namespace": True,
        "max_output": profile.max_output_bytes,
        "max_file_bytes": profile.max_file_bytes,
        "prestart_python": profile.prestart_python,
        "python_zygote": profile.python_zygote,
        "rlimits": {"CORE": 0, "NOFILE": profile.nofile, **(rlimits or {})},
    }
    config["env_defaults"], config["env"] = sandbox_env(profile)
    if profile.network:
        config["proxy_socket"] = proxy_socket
        config["proxy_port"] = PROXY_PORT
    return config
