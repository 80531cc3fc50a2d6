"""What the audit needs from the host: a loopback HTTP server that answers with a nonce (the
allowlisted target, and a stand-in for the host's loopback services), the addresses a sandbox must
not reach (the Docker engine's gateways, this host's own addresses), and the agent's process as
this host's ``/proc`` shows it."""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import os
import secrets
import socket
import threading
from typing import Any


class HostServer:
    """An HTTP server on ``127.0.0.1`` whose every answer contains ``nonce``: a sandbox that
    reads the nonce reached it. Use as a context manager."""

    def __init__(self) -> None:
        self.nonce = "toolgym-audit-" + secrets.token_hex(8)
        nonce = self.nonce

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"{nonce} {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]

    def __enter__(self) -> HostServer:
        threading.Thread(target=self._server.serve_forever, name="audit-host-server", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def own_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses: the one its default route leaves from, and those
    its name resolves to."""
    found: set[str] = set()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET: a UDP connect sends nothing, it only picks a route
        found.add(s.getsockname()[0])
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    return sorted(a for a in found if not a.startswith("127.") and a != "0.0.0.0")


def engine_gateways(api: Any) -> list[str]:
    """IPv4 gateways of the Docker engine's networks (``bridge``'s is the host seen from a
    bridged container)."""
    out: set[str] = set()
    with contextlib.suppress(Exception):
        for net in api.networks():
            for cfg in (net.get("IPAM") or {}).get("Config") or []:
                gateway = cfg.get("Gateway") or ""
                if not gateway and cfg.get("Subnet"):  # the engine's default: the subnet's first address
                    gateway = str(next(ipaddress.ip_network(cfg["Subnet"], strict=False).hosts()))
                if gateway and ":" not in gateway:
                    out.add(gateway)
    return sorted(out)


def docker_api_of(backend: Any) -> Any | None:
    """The Docker API client of a Docker backend (the first host's for ``docker-hosts``), else None."""
    for b in (backend, *getattr(backend, "backends", {}).values()):
        with contextlib.suppress(Exception):
            api = b.api
            if api is not None:
                return api
    return None


def agent_pid_here(sandbox: Any) -> int | None:
    """The host PID of the sandbox's agent when this host's ``/proc`` shows it, else None (an
    engine on another machine)."""
    pids = sandbox.handle.get("pids") or {}
    if pids.get("via", "proc") != "proc" or "agent" not in pids:
        return None
    return int(pids["agent"])


def process_view(pid: int) -> dict[str, Any]:
    """``/proc/<pid>/status`` fields and the owner of ``/proc/<pid>/mem`` (root for a process that
    is not dumpable, whatever its uid; the directory itself keeps the process's uid)."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    return {
        "status": {k: v.strip() for k, v in fields.items()},
        "proc_owner": os.stat(f"/proc/{pid}/mem").st_uid,
    }
