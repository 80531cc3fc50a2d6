"""Egress latency: a small HTTP GET (and a 1 MiB one) from inside a sandbox through its filtering
proxy, per way of reaching the proxy, beside a direct GET from the host measured in the same run.

- ``docker``: local Docker, the agent forwards to the proxy's UNIX socket in the state directory;
- ``remote``: ``RemoteDockerBackend``, egress tunnelled over the agent's attach stream (frames of
  base64 data with a credit window) to the same proxy; by default on the local engine through its
  API socket, so the same engine and image as ``docker``; ``--remote-engine tcp://HOST:PORT``
  names another;
- ``local``: bubblewrap, UNIX socket as for ``docker``;
- ``inproc``: the tunnel protocol alone, no engine and no container: the agent's ``TunnelHub`` in
  a thread of this process joined to ``EgressTunnels`` by a socketpair (both ends share this
  process's GIL), the client on the host.

The paths are measured in five interleaved rounds (load on a shared host shifts between them);
sandboxes get 2 CPUs so that a CPU quota's throttling does not stand in for the path's cost.
Every GET opens a new connection (the proxy closes each after one response, as it forwards with
``Connection: close``). The server is a separate process, so the proxy (in this process) and the
server do not share a GIL.

    python bench/egress_proxy.py [--backends docker,remote,local,inproc] [--n 200] [--remote-engine URL] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from toolgym.core.sandbox_profiles import SandboxProfile
from toolgym.sandboxes.agent import AGENT_DIR, protocol
from toolgym.sandboxes.channel import AgentChannel
from toolgym.sandboxes.netproxy import EgressProxy
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.tunnel import EgressTunnels

SERVER = r"""
import http.server, sys
BIG = bytes(range(256)) * 4096
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = BIG if self.path == "/big" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

CLIENT = r"""
import json, sys, time, urllib.request
url, n, proxy = sys.argv[1], int(sys.argv[2]), sys.argv[3]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
out = []
for i in range(n + 5):
    t = time.perf_counter()
    body = opener.open(url, timeout=60).read()
    if i >= 5:
        out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def direct(url: str, n: int) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, str(n), ""], capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout))


@dataclass
class _Ran:
    exit_code: int
    stdout: str
    stderr: str


class InProcessTunnel:
    """The tunnel protocol alone (see the module docstring); ``run`` stands in for a sandbox's."""

    def __init__(self, port: int) -> None:
        sys.path.insert(0, str(AGENT_DIR))
        import netfwd  # type: ignore[import-not-found]  # the agent's sibling module, on sys.path above

        self.agent_end, host_end = socket.socketpair()
        self.send_lock = threading.Lock()
        self.hub = netfwd.TunnelHub(self._send, self._send_frame)
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            self.proxy_port = free.getsockname()[1]
        self.hub.start(self.proxy_port)
        threading.Thread(target=self._serve, daemon=True).start()
        self.host_end = host_end
        self.allowlist = SandboxProfile(network=(f"127.0.0.1:{port}",))

    def _send(self, message: dict[str, Any]) -> None:
        self._send_frame(protocol.encode(message))

    def _send_frame(self, frame: bytes) -> None:
        with self.send_lock:
            self.agent_end.sendall(frame)

    def _serve(self) -> None:
        while (frame := protocol.recv_frame(self.agent_end)) is not None:
            self.hub.dispatch(frame)

    async def start(self) -> None:
        reader, writer = await asyncio.open_connection(sock=self.host_end, limit=protocol.MAX_FRAME)
        self.channel = AgentChannel(reader, writer, name="inproc", hello={})
        self.tunnels = EgressTunnels(self.channel, EgressProxy(None, self.allowlist, name="inproc").handle)

    async def run(self, argv: list[str], *, timeout: float, env: dict[str, str]) -> _Ran:
        argv = [a.replace("127.0.0.1:3128", f"127.0.0.1:{self.proxy_port}") for a in argv]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv[1:],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        return _Ran(proc.returncode or 0, out.decode(), err.decode())


def make(name: str, profile: SandboxProfile, remote_engine: str) -> PooledBackend:
    if name == "docker":
        from toolgym.sandboxes.docker.backend import DockerBackend

        return DockerBackend(profiles={"web": profile})
    if name == "remote":
        from toolgym.sandboxes.remote.backend import RemoteDockerBackend

        return RemoteDockerBackend(host=remote_engine, profiles={"web": profile})
    from toolgym.sandboxes.local.backend import LocalBackend

    return LocalBackend(profiles={"web": profile})


async def measure(
    names: list[str], port: int, n: int, big_n: int, rounds: int, remote_engine: str, image: str
) -> dict[str, dict[str, list[float]]]:
    """Small and 1 MiB GETs from a sandbox of each backend, and directly from the host, taken in
    ``rounds`` interleaved rounds so that the host's load shifts weigh on every path alike."""
    profile = SandboxProfile(network=(f"127.0.0.1:{port}",), image=image, cpus=2.0)
    backends = {name: make(name, profile, remote_engine) for name in names if name != "inproc"}
    env = {"NO_PROXY": "", "no_proxy": ""}
    proxy = "http://127.0.0.1:3128"
    out: dict[str, dict[str, list[float]]] = {name: {"small": [], "big": []} for name in ["direct", *names]}
    try:
        sandboxes: dict[str, Any] = {
            name: await b.acquire("web", episode_id="bench-egress") for name, b in backends.items()
        }
        if "inproc" in names:
            sandboxes["inproc"] = InProcessTunnel(port)
            await sandboxes["inproc"].start()
        for _ in range(rounds):
            for path, count in (("/", n // rounds), ("/big", max(1, big_n // rounds))):
                key = "small" if path == "/" else "big"
                out["direct"][key] += await asyncio.to_thread(direct, f"http://127.0.0.1:{port}{path}", count)
                for name, sb in sandboxes.items():
                    r = await sb.run(
                        ["python3", "-c", CLIENT, f"http://127.0.0.1:{port}{path}", str(count), proxy],
                        timeout=600,
                        env=env,
                    )
                    if r.exit_code:
                        raise SystemExit(f"{name}: the client failed: {r.stderr}")
                    out[name][key] += json.loads(r.stdout)
        for name, b in backends.items():
            await b.release(sandboxes[name])
        return out
    finally:
        for b in backends.values():
            await b.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="docker,remote,local,inproc")
    ap.add_argument("--n", type=int, default=200, help="small GETs per path")
    ap.add_argument("--big", type=int, default=20, help="1 MiB GETs per path")
    ap.add_argument(
        "--remote-engine",
        default="unix:///var/run/docker.sock",
        help="engine for the tunnelled path (default: the local engine, reached through its API)",
    )
    ap.add_argument(
        "--image",
        default="toolgym/sandbox-python:latest",
        help="sandbox image (any with python3; a second engine may hold only toolgym/base:bookworm)",
    )
    ap.add_argument("--smoke", action="store_true", help="20 small and 3 big GETs per path")
    args = ap.parse_args()
    n, big_n = (20, 3) if args.smoke else (args.n, args.big)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        print(
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {n} small GETs (2-byte body), "
            f"{big_n} GETs of 1 MiB per path; p50 (p90)",
            flush=True,
        )
        names = args.backends.split(",")
        got = asyncio.run(
            measure(names, port, n, big_n, 1 if args.smoke else 5, args.remote_engine, args.image)
        )
        labels = {
            "direct": "direct from the host (baseline)",
            "docker": "local Docker, UNIX-socket proxy",
            "remote": f"remote Docker tunnel ({args.remote_engine})",
            "local": "bubblewrap, UNIX-socket proxy",
            "inproc": "tunnel protocol alone (no engine, agent in-process)",
        }
        rows = [(labels[name], got[name]["small"], got[name]["big"]) for name in ["direct", *names]]
        base_small = got["direct"]["small"]
        base = p50_ms(base_small)
        print(f"{'path':<58s} {'small GET':>20s} {'vs direct':>10s} {'1 MiB GET':>20s}")
        for label, small, big in rows:
            q = statistics.quantiles(small, n=10)[-1] * 1e3 if len(small) > 1 else p50_ms(small)
            qb = statistics.quantiles(big, n=10)[-1] * 1e3 if len(big) > 1 else p50_ms(big)
            print(
                f"{label:<58s} {p50_ms(small):8.2f} ({q:7.2f}) ms {p50_ms(small) / base:9.1f}x "
                f"{p50_ms(big):8.2f} ({qb:7.2f}) ms"
            )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
