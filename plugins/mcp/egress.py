"""The egress of HTTP MCP servers: through the sandboxes' egress decision, never around it.

The MCP client runs on the host, but an HTTP server is a network peer a run names, so its
connections are held to the rules a sandbox with a network allowlist lives by
(``toolgym.sandboxes.netproxy``): the host and port must match the server's allowlist
(``McpServer.allowlist``), and every address the name resolves to must be globally reachable
unless the allowlist names that address (loopback, link-local metadata, this host's own
addresses) or, for a private address, the host exactly; a name re-pointed at internal services
reaches nothing. The decision is ``EgressProxy.decide``, the proxy's own, and the connection goes
to the addresses it checked, never to a second lookup of the name.

:class:`EgressNetwork` is the httpcore network backend that makes every connection of the
client's HTTP transport (:func:`egress_transport`), so nothing the SDK does (a GET for the event
stream, a redirect, a retry) connects any other way. A refusal is kept in ``refused`` for the
caller to report: one tool error naming the host and what would allow it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from toolgym import SandboxProfile
from toolgym.plugins.mcp.servers import ALLOW_ENV, McpServer
from toolgym.sandboxes.netproxy import CONNECT_TIMEOUT_S, EgressProxy, Refused


class EgressNetwork(httpcore2.AsyncNetworkBackend):
    """TCP connections of one HTTP MCP server's client, each decided by the egress proxy first."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.proxy = EgressProxy(None, SandboxProfile(network=server.allowlist), name=server.label)
        self.refused: str | None = None
        """Why the last refused connection was refused (after "<server> may not be reached: "); None
        while none was."""
        self._tcp = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await self.proxy.decide(host, port)
        except Refused as refusal:
            self.refused = self.explain(host, port, refusal)
            raise httpcore2.ConnectError(f"{self.server.label} may not be reached: {self.refused}") from None
        error: Exception = httpcore2.ConnectError(f"{host}:{port} has no address")
        for address in addresses:  # the checked addresses (IP literals: no second lookup)
            try:
                return await self._tcp.connect_tcp(
                    address,
                    port,
                    timeout=CONNECT_TIMEOUT_S if timeout is None else timeout,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        raise error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError(f"{self.server.label}: UNIX sockets are not an MCP server's egress")

    async def sleep(self, seconds: float) -> None:
        await self._tcp.sleep(seconds)

    def explain(self, host: str, port: int, refusal: Refused) -> str:
        """Why ``host:port`` was refused, in words that say what would allow it."""
        where = f"{host}:{port}"
        if not self.proxy.allowlist.allows(host, port):
            allowed = ", ".join(self.server.allowlist) or "nothing"
            return (
                f"{where} is not in its network allowlist ({allowed}); allow it with --mcp-allow {where} "
                f"(or ${ALLOW_ENV}, or the server's `network`)"
            )
        reason = str(refusal).removeprefix(f"toolgym sandbox {self.server.label}: ")
        return reason.removeprefix("toolgym sandbox proxy: ").replace("a sandbox reach", "its client reach")


class _EgressTransport(httpx2.AsyncHTTPTransport):
    """httpx's transport with its connection pool made over ``network`` (httpx takes no network
    backend of its own; requests, responses and errors stay httpx's)."""

    def __init__(self, network: EgressNetwork) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False), network_backend=network
        )


def egress_transport(network: EgressNetwork) -> httpx2.AsyncBaseTransport:
    """The transport of an HTTP MCP client whose every connection ``network`` makes (and may refuse).
    Proxies named in the environment (``HTTPS_PROXY``) are not used: the decision is toolgym's."""
    return _EgressTransport(network)
