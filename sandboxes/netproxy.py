"""The host's egress proxy for sandboxes with a network allowlist: the one place that decides.

Sandboxes never get a network interface. One whose profile has ``network=(patterns...)`` gets
``HTTP_PROXY`` / ``HTTPS_PROXY`` pointing at a loopback port inside it, which the agent forwards
here: over a UNIX socket in the sandbox's state directory (local Docker, bubblewrap), or as
tunnels over the agent's own channel (engines on other machines, ``toolgym.sandboxes.tunnel``).
Both feed ``EgressProxy.handle``. The proxy speaks HTTP/1.1 proxy requests: ``CONNECT host:port``
(TLS and anything else tunnelled) and absolute-URI plain-HTTP requests.

The decision (``EgressProxy.decide``), in order:

1. the host and port must match the allowlist (``SandboxProfile.allows``), else ``403``;
2. a host spelled as an IP address, in any spelling (``2130706433``, ``0x7f.1``, ``[::ffff:a.b.c.d]``),
   is that address; any other name the proxy resolves itself (the sandbox has no DNS);
3. every address so found must be globally reachable (``toolgym.sandboxes.addresses.classify``):
   loopback, link-local (``169.254.0.0/16``, ``fe80::/10``: cloud metadata), unspecified,
   multicast, other metadata addresses (``100.100.100.200``, ``fd00:ec2::254``), this host's own
   addresses (its bridges included: ``docker0``) and the Docker host's (``blocked``: the engine's
   bridge gateways and address) need an allowlist entry naming that IP literally
   (``SandboxProfile.names_address``); private and other non-global ones (RFC 1918 — other
   containers on the bridge —, ``100.64.0.0/10``, ``fc00::/7``, ...) need that or an entry naming
   the host exactly (``SandboxProfile.names_host``). A wildcard (``*``) reaches none of them, and
   an allowed name that someone re-points at internal services (DNS rebinding) reaches nothing;
   else ``403`` saying which address and why;
4. it connects to the addresses it checked, never resolving the name a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol
from urllib.parse import urlsplit

from toolgym.core.sandbox_profiles import parse_ip as as_ip
from toolgym.sandboxes.addresses import IP, Internal, classify, parse_host_ip

MAX_HEAD = 64 * 1024
CONNECT_TIMEOUT_S = 15.0
RESOLVE_TIMEOUT_S = 10.0
Resolver = Callable[[str, int], Awaitable[list[str]]]


class Allowlist(Protocol):
    """What the proxy asks of a profile (``SandboxProfile`` is one)."""

    def allows(self, host: str, port: int) -> bool: ...

    def names_address(self, address: str, port: int) -> bool: ...

    def names_host(self, host: str, port: int) -> bool: ...


class ByteSource(Protocol):
    """The sandbox side's bytes (an ``asyncio.StreamReader`` or a tunnel's reader)."""

    async def readuntil(self, separator: bytes = ...) -> bytes: ...

    async def read(self, n: int = ...) -> bytes: ...


class ByteSink(Protocol):
    """Where bytes for the sandbox go (an ``asyncio.StreamWriter`` or a tunnel's writer)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def write_eof(self) -> None: ...

    def close(self) -> None: ...


_own: tuple[float, frozenset[IP]] = (0.0, frozenset())


def host_addresses(*, max_age_s: float = 5.0) -> frozenset[IP]:
    """Every address of this host's interfaces (bridges such as ``docker0`` included), read from
    ``/proc/net/fib_trie`` (IPv4 local routes) and ``/proc/net/if_inet6``; cached ``max_age_s``."""
    global _own
    stamp, cached = _own
    if time.monotonic() - stamp < max_age_s:
        return cached
    found: set[IP] = set()
    with contextlib.suppress(OSError):
        with open("/proc/net/fib_trie") as f:
            last = ""
            for line in f:
                text = line.strip()
                if text.startswith(("|--", "+--")):
                    last = text[3:].strip()
                elif "/32 host LOCAL" in text and (ip := as_ip(last)) is not None:
                    found.add(ip)
    with contextlib.suppress(OSError):
        with open("/proc/net/if_inet6") as f:
            for line in f:
                hexaddr = line.split()[0]
                if (ip := as_ip(":".join(hexaddr[i : i + 4] for i in range(0, 32, 4)))) is not None:
                    found.add(ip)
    _own = (time.monotonic(), frozenset(found))
    return _own[1]


def internal_reason(ip: IP, blocked: frozenset[IP] = frozenset()) -> str | None:
    """Why egress to ``ip`` needs the allowlist to name it, or None for a globally reachable address."""
    found = internal(ip, blocked)
    return None if found is None else found.reason


def internal(ip: IP, blocked: frozenset[IP] = frozenset()) -> Internal | None:
    """``addresses.classify`` with this host's own addresses."""
    return classify(ip, blocked=blocked, own=host_addresses())


async def resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (in the resolver's order, duplicates dropped)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def _relay(reader: ByteSource, writer: ByteSink) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.write_eof()


def _reply(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class Refused(Exception):
    """Egress refused: ``status`` (an HTTP status line's code and phrase) and the reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class EgressProxy:
    """Decides and relays egress of one sandbox. ``path``: serve on that UNIX socket (``start``);
    None when connections come through ``handle`` only (tunnels). ``blocked``: addresses of the
    Docker host besides this host's own (a remote engine's bridge gateways and address)."""

    def __init__(
        self,
        path: str | None,
        allowlist: Allowlist,
        *,
        name: str,
        owner_uid: int | None = None,
        blocked: Iterable[str] = (),
        resolver: Resolver = resolve,
    ) -> None:
        self.path = path
        self.allowlist = allowlist
        self.name = name
        self.owner_uid = owner_uid
        self.blocked = frozenset(ip for text in blocked if (ip := as_ip(text)) is not None)
        self.resolver = resolver
        self.denied: list[str] = []
        """``host:port`` of every refused request, for logs and tests."""
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        assert self.path is not None, "a proxy without a path is fed through handle()"
        self._server = await asyncio.start_unix_server(self.handle, path=self.path)
        os.chmod(self.path, 0o600)
        if self.owner_uid is not None and self.owner_uid != os.geteuid():
            with contextlib.suppress(PermissionError):
                os.chown(self.path, self.owner_uid, -1)

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def decide(self, host: str, port: int) -> list[str]:
        """The checked addresses to connect to for ``host:port``; raises ``Refused`` (see the module)."""
        where = f"{host}:{port}"
        if not self.allowlist.allows(host, port):
            raise Refused(
                "403 Forbidden",
                f"toolgym sandbox {self.name}: egress to {where} is not in this sandbox's network allowlist",
            )
        literal = parse_host_ip(host)
        if literal is not None:
            # a standard spelling keeps its zone (fe80::1%eth0); a numeric one (0x7f.1) is connected to as dotted
            addresses = [host.strip("[]") if as_ip(host) is not None else str(literal)]
        else:
            try:
                addresses = await asyncio.wait_for(self.resolver(host, port), RESOLVE_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                raise Refused(
                    "502 Bad Gateway", f"toolgym sandbox proxy: cannot resolve {host} ({exc})"
                ) from None
            if not addresses:
                raise Refused("502 Bad Gateway", f"toolgym sandbox proxy: {host} has no address")
        for address in addresses:
            ip = as_ip(address)
            found = Internal("not an IP address", False) if ip is None else internal(ip, self.blocked)
            if found is None or self.allowlist.names_address(address, port):
                continue
            if found.by_name and literal is None and self.allowlist.names_host(host, port):
                continue
            unlock = (
                f"an allowlist entry naming {address}:{port} itself, or {host}:{port} exactly (not a wildcard),"
                if found.by_name and literal is None
                else f"a network allowlist entry naming {address}:{port} itself"
            )
            raise Refused(
                "403 Forbidden",
                f"toolgym sandbox {self.name}: egress to {where} is refused: it "
                f"resolves to {address}, {found.reason}; only {unlock} lets a sandbox reach it",
            )
        return addresses

    async def handle(self, reader: ByteSource, writer: ByteSink) -> None:
        """Serve one proxy connection from the sandbox (its request head first), then close it."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30.0)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            OSError,
        ):
            writer.close()
            return
        try:
            await self._serve(head, reader, writer)
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, head: bytes, reader: ByteSource, writer: ByteSink) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            writer.write(_reply("400 Bad Request", "toolgym sandbox proxy: malformed request line"))
            return
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            forward = b""
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                writer.write(
                    _reply("400 Bad Request", "toolgym sandbox proxy: send absolute http:// URLs or CONNECT")
                )
                return
            try:
                host, port_text = url.hostname, str(url.port or 80)
            except ValueError:
                host, port_text = url.hostname, ""
            path = url.path or "/"
            if url.query:
                path += "?" + url.query
            kept = [
                line for line in lines[1:] if line and not line.lower().startswith(("proxy-", "connection:"))
            ]
            forward = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""]).encode(
                "latin-1"
            )
        if not port_text.isdigit() or not host:
            writer.write(_reply("400 Bad Request", f"toolgym sandbox proxy: bad host or port in {target!r}"))
            return
        port = int(port_text)
        try:
            addresses = await self.decide(host, port)
        except Refused as refusal:
            if refusal.status.startswith("403"):
                self.denied.append(f"{host}:{port}")
            writer.write(_reply(refusal.status, str(refusal)))
            return
        try:
            up_reader, up_writer = await self._connect(addresses, port)
        except (TimeoutError, OSError) as exc:
            writer.write(
                _reply("502 Bad Gateway", f"toolgym sandbox proxy: cannot reach {host}:{port} ({exc})")
            )
            return
        try:
            if forward:
                up_writer.write(forward)
            else:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_relay(reader, up_writer), _relay(up_reader, writer))
        finally:
            with contextlib.suppress(Exception):
                up_writer.close()

    @staticmethod
    async def _connect(addresses: list[str], port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the first of the checked ``addresses`` that answers (no new lookup)."""
        error: BaseException = OSError("no address")
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                error = exc
        raise error
