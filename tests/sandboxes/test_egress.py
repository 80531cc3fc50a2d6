"""Egress policy, on local Docker, bubblewrap and a remote Docker engine (a second
dockerd on loopback TCP, where egress is tunnelled over the agent's attach channel).

From inside a sandbox whose kind allows one host: that host answers through the proxy (binary
bodies intact both ways, plain HTTP and CONNECT); everything else is refused, through the proxy
(403 saying why) and directly (no route, no DNS): other host loopback services, the Docker host's
bridge address and the engine's port, link-local metadata, another sandbox's listening port, and
an allowlisted name that resolves to loopback (DNS rebinding). Unit tests cover the decision with
a fake resolver; both ends of the tunnel (window, caps, closing) without a sandbox; which network each
registered kind declares.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import http.server
import ipaddress
import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.distributed.conftest import second_engine  # noqa: F401  (the remote engine, asked for by name)
from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.core.errors import ConfigError
from toolgym.core.sandbox_profiles import SandboxProfile
from toolgym.sandboxes.agent import AGENT_DIR
from toolgym.sandboxes.agent.protocol import TUNNEL_BUFFER_CAP as BUFFER_CAP
from toolgym.sandboxes.agent.protocol import TUNNEL_CHUNK as CHUNK
from toolgym.sandboxes.agent.protocol import TUNNEL_WINDOW as WINDOW
from toolgym.sandboxes.agent.protocol import decode_body
from toolgym.sandboxes.netproxy import EgressProxy, Refused, host_addresses
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.tunnel import EgressTunnels

BLOB = bytes(range(256)) * 8192  # 2 MiB, every byte value
REMOTE_IMAGE = "toolgym/base:bookworm"


class _Site(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        port = self.server.server_address[1]  # type: ignore[index]
        body = (
            BLOB
            if self.path == "/blob"
            else f"hello from {port}: {self.path} host={self.headers.get('Host')}".encode()
        )
        self._send(body)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._send(hashlib.sha256(data).hexdigest().encode())

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(host: str) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer((host, 0), _Site)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def sites() -> Iterator[dict[str, tuple[str, int]]]:
    """``allowed`` and ``other`` on the host's loopback; ``bridge`` on docker0's address when there is one."""
    servers = {"allowed": _serve("127.0.0.1"), "other": _serve("127.0.0.1")}
    gateway = _docker0()
    if gateway:
        servers["bridge"] = _serve(gateway)
    yield {name: (str(s.server_address[0]), int(s.server_address[1])) for name, s in servers.items()}
    for s in servers.values():
        s.shutdown()


def _docker0() -> str | None:
    done = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True)
    fields = done.stdout.split()
    return fields[fields.index("inet") + 1].split("/")[0] if "inet" in fields else None


EGRESS_BACKENDS = [*BACKENDS, pytest.param("remote", marks=[pytest.mark.docker, pytest.mark.slow])]


@pytest.fixture(scope="module", params=EGRESS_BACKENDS)
def web_backend(
    request: pytest.FixtureRequest, runner: asyncio.Runner, sites: dict[str, tuple[str, int]]
) -> Iterator[PooledBackend]:
    """Kind ``web`` may reach the ``allowed`` site (and ``localhost`` on the ``other`` site's port, a
    name that resolves to loopback); kind ``python`` has no network."""
    _, allowed = sites["allowed"]
    _, other = sites["other"]
    image = REMOTE_IMAGE if request.param == "remote" else "toolgym/sandbox-python:latest"
    base = dataclasses.replace(TEST_PROFILE, image=image)
    profiles = {
        "web": dataclasses.replace(base, network=(f"127.0.0.1:{allowed}", f"localhost:{other}")),
        "python": base,
    }
    if request.param == "remote":
        from toolgym.sandboxes.remote.backend import RemoteDockerBackend

        engine_url = request.getfixturevalue("second_engine")
        b: PooledBackend = RemoteDockerBackend(host=engine_url, profiles=profiles, max_idle=2)
        b.engine_port = int(engine_url.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    else:
        b = make_backend(request.param, profiles=profiles, max_idle=2)
    yield b
    runner.run(b.aclose())


PROBE = r"""
import hashlib, http.client, json, socket, sys, urllib.error, urllib.request
via = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"}))
out = {}
for name, kind, target in json.loads(sys.argv[1]):
    try:
        if kind in ("get", "post"):
            data = bytes(range(256)) * 4096 if kind == "post" else None
            with via.open(urllib.request.Request(target, data=data), timeout=20) as r:
                body = r.read()
            out[name] = {"status": r.status, "sha": hashlib.sha256(body).hexdigest(), "text": body[:300].decode("latin-1")}
        elif kind == "connect":
            host, port = target.rsplit(":", 1)
            c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=20)
            c.set_tunnel(host, int(port))
            c.request("GET", "/blob")
            body = c.getresponse().read()
            out[name] = {"status": 200, "sha": hashlib.sha256(body).hexdigest()}
        elif kind == "direct":
            host, port = target.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=3).close()
            out[name] = {"connected": True}
        elif kind == "dns":
            out[name] = {"resolved": socket.getaddrinfo(target, 80)[0][4][0]}
    except urllib.error.HTTPError as e:
        out[name] = {"status": e.code, "text": e.read()[:300].decode("latin-1")}
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
"""


def probe(runner: asyncio.Runner, sb: Any, checks: list[tuple[str, str, str]]) -> dict[str, dict[str, Any]]:
    r = runner.run(
        sb.run(
            ["python3", "-c", PROBE, json.dumps(checks)], timeout=120, env={"NO_PROXY": "", "no_proxy": ""}
        )
    )
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def refused(result: dict[str, Any], why: str = "not in this sandbox's network allowlist") -> bool:
    """Refused by the proxy with ``403`` and a line saying ``why``."""
    return result.get("status") == 403 and why in result.get("text", "")


def test_allowed_host_answers_and_everything_else_is_refused(
    web_backend: PooledBackend, runner: asyncio.Runner, sites: dict[str, tuple[str, int]]
) -> None:
    allowed, other = sites["allowed"][1], sites["other"][1]
    other_sb = runner.run(web_backend.acquire("python"))
    sb = runner.run(web_backend.acquire("web"))
    try:
        # another sandbox listens on its loopback, and reaches itself there (so the refusals below mean something)
        listening = runner.run(
            other_sb.run(
                "python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1.5; "
                "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8765/', timeout=5).status)\"",
                timeout=30,
            )
        )
        assert listening.stdout.strip().endswith("200"), listening.stderr

        checks = [
            ("page", "get", f"http://127.0.0.1:{allowed}/page?q=1"),
            ("blob", "get", f"http://127.0.0.1:{allowed}/blob"),
            ("upload", "post", f"http://127.0.0.1:{allowed}/sha"),
            ("tunnel", "connect", f"127.0.0.1:{allowed}"),
            ("not_listed", "get", "http://example.com/"),
            ("not_listed_tls", "connect", "example.com:443"),
            ("host_loopback", "get", f"http://127.0.0.1:{other}/"),
            ("rebinding", "get", f"http://localhost:{other}/"),
            ("metadata", "get", "http://169.254.169.254/latest/meta-data/"),
            ("metadata_tls", "connect", "169.254.169.254:443"),
            ("other_sandbox", "get", "http://127.0.0.1:8765/"),
            ("direct_allowed", "direct", f"127.0.0.1:{allowed}"),
            ("direct_metadata", "direct", "169.254.169.254:80"),
            ("direct_outside", "direct", "1.1.1.1:80"),
            ("direct_other_sandbox", "direct", "127.0.0.1:8765"),
            ("dns", "dns", "example.com"),
        ]
        if "bridge" in sites:
            gateway, port = sites["bridge"]
            checks += [
                ("bridge", "get", f"http://{gateway}:{port}/"),
                ("direct_bridge", "direct", f"{gateway}:{port}"),
            ]
        engine_port = getattr(web_backend, "engine_port", None)
        if engine_port:
            checks += [
                ("dockerd", "connect", f"127.0.0.1:{engine_port}"),
                ("direct_dockerd", "direct", f"127.0.0.1:{engine_port}"),
            ]
        got = probe(runner, sb, checks)

        assert (
            got["page"]["status"] == 200
            and got["page"]["text"] == f"hello from {allowed}: /page?q=1 host=127.0.0.1:{allowed}"
        )
        assert got["blob"]["sha"] == got["tunnel"]["sha"] == hashlib.sha256(BLOB).hexdigest(), (
            "binary bodies intact"
        )
        assert got["upload"]["text"] == hashlib.sha256(bytes(range(256)) * 4096).hexdigest(), "uploads intact"
        for name in (
            "not_listed",
            "host_loopback",
            "metadata",
            "other_sandbox",
            *(["bridge"] if "bridge" in sites else []),
        ):
            assert refused(got[name]), (name, got[name])
        assert refused(got["rebinding"], "a loopback address"), got["rebinding"]
        for name in ("not_listed_tls", "metadata_tls", *(["dockerd"] if engine_port else [])):
            assert "403" in got[name].get("error", ""), (name, got[name])
        for name in [n for n, kind, _ in checks if kind == "direct"]:
            assert "connected" not in got[name] and got[name]["error"], (name, got[name])
        assert "resolved" not in got["dns"], got["dns"]
        denied = sb.handle["proxy"].denied
        assert {
            "example.com:80",
            "example.com:443",
            f"127.0.0.1:{other}",
            f"localhost:{other}",
            "169.254.169.254:80",
            "127.0.0.1:8765",
        } <= set(denied)
    finally:
        runner.run(web_backend.release(sb))
        runner.run(web_backend.release(other_sb))


def test_kinds_without_an_allowlist_stay_offline(
    web_backend: PooledBackend, runner: asyncio.Runner, sites: dict[str, tuple[str, int]]
) -> None:
    sb = runner.run(web_backend.acquire("python"))
    try:
        env = runner.run(sb.run("env | grep -ci _proxy; true")).stdout.strip()
        assert env == "0" and sb.handle["proxy"] is None
        got = probe(
            runner,
            sb,
            [
                ("via_proxy", "get", f"http://127.0.0.1:{sites['allowed'][1]}/"),
                ("direct", "direct", f"127.0.0.1:{sites['allowed'][1]}"),
            ],
        )
        assert "error" in got["via_proxy"] and "error" in got["direct"], got
    finally:
        runner.run(web_backend.release(sb))


def test_many_tunnels_at_once_and_the_proxy_port_survives_a_reset(
    web_backend: PooledBackend, runner: asyncio.Runner, sites: dict[str, tuple[str, int]]
) -> None:
    allowed = sites["allowed"][1]
    sb = runner.run(web_backend.acquire("web"))
    try:
        fetch = (
            "import concurrent.futures as f, urllib.request as u\n"
            "import threading; threading.stack_size(256 * 1024)\n"
            "o = u.build_opener(u.ProxyHandler({'http': 'http://127.0.0.1:3128'}))\n"
            f"get = lambda i: len(o.open('http://127.0.0.1:{allowed}/blob', timeout=60).read())\n"
            "with f.ThreadPoolExecutor(8) as ex: print(sorted(set(ex.map(get, range(16)))))"
        )
        r = runner.run(sb.run(["python3", "-c", fetch], timeout=120, env={"NO_PROXY": "", "no_proxy": ""}))
        assert r.stdout.strip() == f"[{len(BLOB)}]", r.stderr
        runner.run(web_backend.release(sb))
        runner.run(web_backend.settle())
        sb = runner.run(web_backend.acquire("web"))
        got = probe(runner, sb, [("page", "get", f"http://127.0.0.1:{allowed}/again")])
        assert got["page"]["status"] == 200, got
    finally:
        runner.run(web_backend.release(sb))


# -- the decision, without a sandbox ------------------------------------------------------------


def _proxy(
    network: tuple[str, ...], names: dict[str, list[str]], blocked: tuple[str, ...] = ()
) -> EgressProxy:
    async def resolver(host: str, port: int) -> list[str]:
        if host not in names:
            raise OSError(f"no such name {host}")
        return names[host]

    return EgressProxy(None, SandboxProfile(network=network), name="t", blocked=blocked, resolver=resolver)


@pytest.mark.parametrize(
    ("name", "addresses", "why"),
    [
        ("rebind.test", ["127.0.0.1"], "a loopback address"),
        ("rebind.test", ["::1"], "a loopback address"),
        ("rebind.test", ["::ffff:127.0.0.1"], "a loopback address"),
        ("rebind.test", ["169.254.169.254"], "a link-local address"),
        ("rebind.test", ["fe80::1%2"], "a link-local address"),
        ("rebind.test", ["0.0.0.0"], "an unspecified address"),
        ("rebind.test", ["172.17.0.1"], "an address of the Docker host"),
        ("rebind.test", ["93.184.216.34", "169.254.169.254"], "a link-local address"),
    ],
)
def test_an_allowlisted_name_that_resolves_inside_is_refused(
    name: str, addresses: list[str], why: str
) -> None:
    proxy = _proxy(
        ("rebind.test", "public.test:443"),
        {name: addresses, "public.test": ["93.184.216.34"]},
        blocked=("172.17.0.1",),
    )
    with pytest.raises(Refused, match=why) as caught:
        asyncio.run(proxy.decide(name, 80))
    assert caught.value.status.startswith("403") and "only a network allowlist entry naming" in str(
        caught.value
    )
    assert asyncio.run(proxy.decide("public.test", 443)) == ["93.184.216.34"]


def test_this_hosts_own_addresses_are_refused_unless_named() -> None:
    own = sorted(str(ip) for ip in host_addresses() if not ip.is_loopback and not ip.is_link_local)
    if not own:
        pytest.skip("this host has no address but loopback")
    proxy = _proxy(("me.test", f"{own[0]}:8080"), {"me.test": [own[0]]})
    with pytest.raises(Refused, match="an address of this host"):
        asyncio.run(proxy.decide("me.test", 9090))
    assert asyncio.run(proxy.decide(own[0], 8080)) == [own[0]], "named literally: allowed"


def test_literal_entries_allow_internal_addresses_only_as_named() -> None:
    proxy = _proxy(("127.0.0.1:8080", "[::1]:81", "169.254.169.254:80"), {})
    assert asyncio.run(proxy.decide("127.0.0.1", 8080)) == ["127.0.0.1"]
    assert asyncio.run(proxy.decide("[::1]", 81)) == ["::1"]
    assert asyncio.run(proxy.decide("169.254.169.254", 80)) == ["169.254.169.254"]
    for host, port in (("127.0.0.1", 8081), ("127.0.0.2", 8080), ("localhost", 8080), ("::1", 80)):
        with pytest.raises(Refused, match="not in this sandbox's network allowlist"):
            asyncio.run(proxy.decide(host, port))


def test_the_proxy_connects_to_the_address_it_checked(tmp_path: Any) -> None:
    """A resolver that answers a checked address once and a metadata address afterwards (DNS
    rebinding between check and use): the proxy resolves once and connects where it checked."""
    server = _serve("127.0.0.1")
    port = int(server.server_address[1])
    calls: list[str] = []

    async def flipping(host: str, p: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["169.254.169.254"]

    async def main() -> bytes:
        proxy = EgressProxy(
            str(tmp_path / "p.sock"),
            SandboxProfile(network=(f"flip.test:{port}", f"127.0.0.1:{port}")),
            name="t",
            resolver=flipping,
        )
        await proxy.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "p.sock"))
            writer.write(f"GET http://flip.test:{port}/x HTTP/1.1\r\nHost: flip.test:{port}\r\n\r\n".encode())
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            proxy.stop()

    try:
        reply = asyncio.run(main())
    finally:
        server.shutdown()
    assert calls == ["flip.test"]
    assert (
        reply.startswith(b"HTTP/1.1 200") and f"hello from {port}: /x host=flip.test:{port}".encode() in reply
    ), reply


# -- non-global addresses: a wildcard reaches none; naming one literally does ------


@pytest.mark.parametrize(
    ("host", "resolves_to", "why"),
    [
        ("10.1.2.3", None, "RFC 1918"),
        ("172.17.0.3", None, "RFC 1918"),  # another container on Docker's default bridge
        ("192.168.1.10", None, "RFC 1918"),
        ("100.64.0.1", None, "RFC 6598"),
        ("100.100.100.200", None, "Alibaba Cloud's metadata"),
        ("fd00:ec2::254", None, "AWS's internal IPv6"),
        ("fd12:3456::1", None, "unique local IPv6"),
        ("198.18.0.1", None, "not globally reachable"),
        ("240.0.0.1", None, "not globally reachable"),
        ("::ffff:10.0.0.1", None, "RFC 1918"),
        ("::ffff:0:a00:1", None, "IPv4-translated"),
        ("::a00:1", None, "IPv4-compatible"),
        ("64:ff9b::a00:1", None, "NAT64"),
        ("64:ff9b::7f00:1", None, "loopback"),
        ("64:ff9b:1::a00:1", None, "local-use NAT64"),
        ("2002:a00:1::1", None, "6to4"),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", None, "Teredo"),
        ("2130706433", None, "a loopback address"),  # 127.0.0.1 as one decimal number
        ("0x7f.1", None, "a loopback address"),
        ("0177.0.0.1", None, "a loopback address"),
        ("167772161", None, "RFC 1918"),  # 10.0.0.1
        ("012.0.0.1", None, "RFC 1918"),  # octal 10.0.0.1
        ("0xa9fea9fe", None, "link-local"),  # 169.254.169.254
        ("internal.test", ["10.0.0.7"], "RFC 1918"),
        ("internal6.test", ["fd00::7"], "unique local IPv6"),
        ("meta6.test", ["fd00:ec2::254"], "AWS's internal IPv6"),
        ("mapped.test", ["::ffff:172.18.0.2"], "RFC 1918"),
        ("mixed.test", ["93.184.216.34", "172.18.0.2"], "RFC 1918"),
    ],
)
def test_a_wildcard_allowlist_reaches_no_non_global_address(
    host: str, resolves_to: list[str] | None, why: str
) -> None:
    """With ``*`` allowed, every address that is not globally reachable is refused, whatever name
    or spelling leads there; an entry naming that address itself lets it through."""
    names = {host: resolves_to} if resolves_to else {}
    with pytest.raises(Refused, match=why) as caught:
        asyncio.run(_proxy(("*",), names).decide(host, 80))
    assert caught.value.status.startswith("403") and "egress to" in str(caught.value), str(caught.value)
    addresses = resolves_to or [_canonical(host)]
    literal = tuple(f"[{a}]:80" if ":" in a else f"{a}:80" for a in addresses)
    assert asyncio.run(_proxy(("*", *literal), names).decide(host if resolves_to else addresses[0], 80)), (
        "named literally: allowed"
    )


def _canonical(host: str) -> str:
    """The address a literal host names, numeric IPv4 spellings (``0x7f.1``) read as ``inet_aton`` reads them."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return socket.inet_ntoa(socket.inet_aton(host))


@pytest.mark.parametrize(
    "host", ["93.184.216.34", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1", "public.test"]
)
def test_a_wildcard_allowlist_still_reaches_global_addresses(host: str) -> None:
    assert asyncio.run(_proxy(("*",), {"public.test": ["93.184.216.34"]}).decide(host, 443))


def test_naming_a_host_exactly_reaches_its_private_addresses_but_never_strict_ones() -> None:
    """A user's own service on a private network, named exactly, is reachable; a wildcard that
    matches it is not, and no name reaches loopback, link-local or metadata addresses."""
    names = {
        "search.corp.test": ["10.20.0.5"],
        "ula.corp.test": ["fd00:1::5"],
        "meta.corp.test": ["fd00:ec2::254"],
        "loop.corp.test": ["127.0.0.1"],
        "link.corp.test": ["169.254.169.254"],
    }
    exact = _proxy(tuple(names), names)
    assert asyncio.run(exact.decide("search.corp.test", 80)) == ["10.20.0.5"]
    assert asyncio.run(exact.decide("ula.corp.test", 80)) == ["fd00:1::5"]
    for host, why in (
        ("meta.corp.test", "AWS"),
        ("loop.corp.test", "loopback"),
        ("link.corp.test", "link-local"),
    ):
        with pytest.raises(Refused, match=why):
            asyncio.run(exact.decide(host, 80))
    for wildcard in (("*.corp.test",), ("search.*",), ("search.corp.tes?",), ("*",)):
        with pytest.raises(Refused, match=r"RFC 1918.*or search\.corp\.test:80 exactly"):
            asyncio.run(_proxy(wildcard, names).decide("search.corp.test", 80))
    with pytest.raises(Refused, match="RFC 1918"):  # the port is part of the name
        asyncio.run(_proxy(("search.corp.test:8080", "*"), names).decide("search.corp.test", 80))


def _docker_run(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"docker {' '.join(args[:2])}: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture(scope="module")
def bridge_peer() -> Iterator[tuple[str, int]]:
    """A web server in a second container on Docker's default bridge (another job's container, a
    database next to the trainer): its bridge address and port, reachable from this host."""
    from tests.sandboxes.helpers import ensure_images, require

    require("docker")
    ensure_images("python")
    cid = _docker_run(
        "run",
        "-d",
        "--rm",
        "--network",
        "bridge",
        "--label",
        "toolgym.test=egress-peer",
        "--entrypoint",
        "python3",
        "toolgym/sandbox-python:latest",
        "-m",
        "http.server",
        "8000",
        "--bind",
        "0.0.0.0",
    )
    try:
        address = _docker_run("inspect", "-f", "{{.NetworkSettings.IPAddress}}", cid)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((address, 8000), timeout=2).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    pytest.skip(f"this host cannot reach a container on the bridge at {address}:8000 ({exc})")
                time.sleep(0.3)
        yield address, 8000
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=60)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_sandbox_reaches_another_container_on_the_bridge_only_when_named(
    backend_name: str, bridge_peer: tuple[str, int], runner: asyncio.Runner
) -> None:
    """End to end, from inside a sandbox through the real proxy: with ``*`` allowed, a container on
    the bridge is refused with the reason; with its address named literally it answers."""
    address, port = bridge_peer
    base = dataclasses.replace(TEST_PROFILE, image="toolgym/sandbox-python:latest")
    profiles = {
        "anyweb": dataclasses.replace(base, network=("*",)),
        "named": dataclasses.replace(base, network=("*", f"{address}:{port}")),
    }
    backend = make_backend(backend_name, profiles=profiles, max_idle=0)
    try:
        got: dict[str, dict[str, Any]] = {}
        for kind in ("anyweb", "named"):
            sb = runner.run(backend.acquire(kind))
            try:
                checks = [
                    ("get", "get", f"http://{address}:{port}/"),
                    ("tunnel", "connect", f"{address}:{port}"),
                    ("direct", "direct", f"{address}:{port}"),
                ]
                got[kind] = probe(runner, sb, checks)
            finally:
                runner.run(backend.release(sb))
        anyweb, named = got["anyweb"], got["named"]
        assert refused(anyweb["get"], f"it resolves to {address}, a private address (RFC 1918"), anyweb["get"]
        assert "403" in anyweb["tunnel"].get("error", ""), anyweb["tunnel"]
        assert named["get"]["status"] == 200 and "Directory listing" in named["get"]["text"], named["get"]
        assert named["tunnel"]["status"] == 200, named["tunnel"]
        for result in (anyweb["direct"], named["direct"]):
            assert "connected" not in result, "no route but the proxy"
    finally:
        runner.run(backend.aclose())


def test_allowlist_patterns() -> None:
    p = SandboxProfile(network=("example.com", "*.wikipedia.org", "api.test:8443", "[::1]:81", "10.0.0.5"))
    assert p.allows("example.com", 443) and p.allows("EXAMPLE.com.", 80)
    assert not p.allows("evil-example.com", 443) and not p.allows("sub.example.com", 443)
    assert p.allows("en.wikipedia.org", 443) and p.allows("wikipedia.org", 443)
    assert p.allows("api.test", 8443) and not p.allows("api.test", 443)
    assert p.allows("::1", 81) and p.allows("[::1]", 81) and not p.allows("::1", 80)
    assert (
        p.names_address("::1", 81)
        and p.names_address("10.0.0.5", 1)
        and p.names_address("::ffff:10.0.0.5", 2)
    )
    assert not p.names_address("93.184.216.34", 443), "a name in the list does not name its addresses"
    assert not SandboxProfile().allows("example.com", 443) and not SandboxProfile().names_address(
        "127.0.0.1", 80
    )


def test_a_plugin_can_register_a_profile_for_its_kind() -> None:
    from toolgym.core.sandbox_profiles import resolve_profiles
    from toolgym.sandboxes import DEFAULT_PROFILES, register_profile

    register_profile("unit-test-search", SandboxProfile(network=("api.example.org",)))
    try:
        resolved = resolve_profiles({"unit-test-search": {"cpus": 0.5}})
        assert (
            resolved["unit-test-search"].network == ("api.example.org",)
            and resolved["unit-test-search"].cpus == 0.5
        )
    finally:
        DEFAULT_PROFILES.pop("unit-test-search")
    with pytest.raises(ConfigError, match="unknown fields \\['memroy'\\]"):
        resolve_profiles({"python": {"memroy": 1}})


# -- the tunnel over the agent's channel, both ends, without a sandbox ---------------------------


class _FakeChannel:
    """What ``EgressTunnels`` uses of an ``AgentChannel``; frames it posts land in ``posted``."""

    def __init__(self) -> None:
        self.tunnel_sink: Any = None
        self.closed = False
        self.posted: list[dict[str, Any]] = []
        self.closers: list[Any] = []

    def post(self, message: dict[str, Any]) -> None:
        self.posted.append(message)

    def post_frame(self, frame: bytes) -> None:
        self.posted.append(decode_body(frame[4:]))

    async def drain(self) -> None:
        pass

    def on_close(self, callback: Any) -> None:
        self.closers.append(callback)

    def sent(self, tid: int) -> bytes:
        return b"".join(
            base64.b64decode(m["data_b64"]) for m in self.posted if m["tun"] == tid and m["ev"] == "data"
        )

    def events(self, tid: int) -> list[str]:
        return [m["ev"] for m in self.posted if m["tun"] == tid and m["ev"] != "data"]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_host_end_keeps_to_the_window_caps_tunnels_and_closes_both_ways() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    handled: list[str] = []

    async def handler(reader: Any, writer: Any) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        handled.append(head.decode())
        if head.startswith(b"BIG"):
            for at in range(0, len(payload), 1 << 16):
                writer.write(payload[at : at + (1 << 16)])
                await writer.drain()
        elif head.startswith(b"WAIT"):
            await reader.read(1)  # until the agent closes
        writer.write_eof()

    async def main() -> None:
        ch = _FakeChannel()
        tunnels = EgressTunnels(ch, handler, max_tunnels=2)  # type: ignore[arg-type]
        feed = ch.tunnel_sink
        feed({"tun": 1, "ev": "open"})
        feed({"tun": 1, "ev": "data", "data_b64": base64.b64encode(b"BIG / HTTP/1.1\r\n\r\n").decode()})
        await _settle()
        assert WINDOW <= len(ch.sent(1)) < WINDOW + (1 << 16), "stops at the window until acknowledged"
        acked = 0
        while "close" not in ch.events(1):
            sent = len(ch.sent(1))
            assert sent - acked <= WINDOW + (1 << 16)
            feed({"tun": 1, "ev": "ack", "n": sent - acked})
            acked = sent
            await _settle()
            assert len(ch.sent(1)) > sent or "close" in ch.events(1)
        assert ch.sent(1) == payload and ch.events(1) == ["eof", "close"], (
            "binary intact, then the host closes"
        )

        feed({"tun": 2, "ev": "open"})
        feed({"tun": 3, "ev": "open"})
        feed({"tun": 4, "ev": "open"})  # a third at once: over the cap
        await _settle()
        assert ch.events(4) == ["close"] and tunnels.refused == 1 and tunnels.open_count == 2
        feed({"tun": 2, "ev": "data", "data_b64": base64.b64encode(b"WAIT\r\n\r\n").decode()})
        await _settle()
        feed({"tun": 2, "ev": "close"})  # the sandbox side hangs up: the handler stops
        await _settle()
        assert ch.events(2) == [] and tunnels.open_count == 1
        feed({"tun": 3, "ev": "data", "data_b64": base64.b64encode(b"x" * (BUFFER_CAP + 1)).decode()})
        await _settle()
        assert ch.events(3) == ["close"] and tunnels.refused == 2, (
            "an agent that overruns the window loses the tunnel"
        )
        feed({"tun": 5, "ev": "open"})
        feed({"tun": 5, "ev": "data", "data_b64": "not base64!"})
        feed({"tun": 6, "ev": "open"})
        for closer in ch.closers:  # the channel ends: every tunnel with it
            closer("gone")
        await _settle()
        assert tunnels.open_count == 0 and tunnels.refused == 3

    asyncio.run(main())
    assert handled[:2] == ["BIG / HTTP/1.1\r\n\r\n", "WAIT\r\n\r\n"]


def test_agent_end_relays_within_the_window_and_closes_both_ways() -> None:
    sys.path.insert(0, str(AGENT_DIR))
    import netfwd  # type: ignore[import-not-found]  # the agent's sibling module, on sys.path above

    frames: queue.Queue[dict[str, Any]] = queue.Queue()
    hub = netfwd.TunnelHub(frames.put)
    with socket.socket() as probe_port:
        probe_port.bind(("127.0.0.1", 0))
        port = probe_port.getsockname()[1]
    hub.start(port)

    def next_frame(ev: str) -> dict[str, Any]:
        while True:
            frame = frames.get(timeout=10)
            if frame["ev"] == ev:
                return frame

    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    tid = next_frame("open")["tun"]
    sent = bytes(range(256)) * 4096  # 1 MiB, more than the window
    threading.Thread(target=client.sendall, args=(sent,), daemon=True).start()
    got = b""
    deadline = time.monotonic() + 10
    while len(got) < WINDOW and time.monotonic() < deadline:
        got += base64.b64decode(next_frame("data")["data_b64"])
    time.sleep(0.3)
    while not frames.empty():
        got += base64.b64decode(next_frame("data")["data_b64"])
    time.sleep(0.3)
    assert frames.empty() and WINDOW <= len(got) < WINDOW + CHUNK, "no more until the host acknowledges"
    while len(got) < len(sent):
        hub.dispatch({"tun": tid, "ev": "ack", "n": WINDOW})
        got += base64.b64decode(next_frame("data")["data_b64"])
    assert got == sent

    back = bytes(reversed(range(256))) * 1024
    hub.dispatch({"tun": tid, "ev": "data", "data_b64": base64.b64encode(back).decode()})
    hub.dispatch({"tun": tid, "ev": "close"})
    received = b""
    while chunk := client.recv(1 << 16):
        received += chunk
    assert received == back, "what the host sent arrives before its close"
    assert next_frame("ack")["n"] == len(back)
    deadline = time.monotonic() + 5  # the relay thread forgets the tunnel just after the socket's close
    while tid in hub.tunnels and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tid not in hub.tunnels

    other = socket.create_connection(("127.0.0.1", port), timeout=10)
    tid2 = next_frame("open")["tun"]
    other.close()  # the sandbox side hangs up
    assert next_frame("eof")["tun"] == tid2
    hub.dispatch({"tun": tid2, "ev": "close"})
    hub.close_all()
    client.close()


# -- which network each kind declares ------------------------------------------------------------

CODE_KINDS = ("python", "shell", "sql")
"""Kinds that run model-written code: no network at all, whatever plugins are loaded."""


def test_every_registered_kind_declares_its_network() -> None:
    """Every kind a loaded tool or environment uses, with its network: code kinds none; the browser
    an empty allowlist (the user names the sites); the browser environments exactly their own site;
    SWE task images and stdio MCP servers none. A new kind fails here until it is added to this table."""
    from types import SimpleNamespace

    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox_profiles import sandbox_env
    from toolgym.plugins.miniwob.site import shared_site as miniwob_site
    from toolgym.plugins.swe.env import SWEEnv
    from toolgym.plugins.webshop.web import shared_site as webshop_site
    from toolgym.sandboxes import DEFAULT_PROFILES

    def site(url: str) -> tuple[str, ...]:
        return (url.removeprefix("http://"),)

    # kinds registered on first use: the two browser environments' sites, one SWE task image
    expected: dict[str, tuple[str, ...] | None] = {
        "python": None,
        "shell": None,
        "sql": None,
        "browser": (),
        "mcp": None,  # stdio MCP servers: no network of their own
        "miniwob": site(miniwob_site().url),
        "webshop-web": site(webshop_site().url),
    }
    swe_kind = SWEEnv._kind(None, SimpleNamespace(shipped=False, image="example.org/swe-task:1"))  # type: ignore[arg-type]
    expected[swe_kind] = None
    used = {t.sandbox for t in get_registry().tools.values() if t.sandbox} | {"sql", "miniwob", "webshop-web"}
    assert used <= set(DEFAULT_PROFILES), (
        f"kinds without a declared profile: {sorted(used - set(DEFAULT_PROFILES))}"
    )
    declared = {
        kind: DEFAULT_PROFILES[kind].network for kind in DEFAULT_PROFILES if not kind.startswith("unit-test")
    }
    print("\n".join(f"{kind:>24}: {net!r}" for kind, net in sorted(declared.items())))
    # every SWE task image is a kind of its own (other tests in this process may have registered more): none has network
    swe_declared = {kind: net for kind, net in declared.items() if kind.startswith("swe.")}
    assert swe_declared and all(net is None for net in swe_declared.values()), swe_declared
    assert {k: v for k, v in declared.items() if k not in swe_declared or k == swe_kind} == expected
    for kind in (*CODE_KINDS, swe_kind):
        profile = DEFAULT_PROFILES[kind]
        assert profile.network is None and not profile.allows("example.com", 443)
        assert not any("proxy" in name.lower() for name in sandbox_env(profile)[1]), kind
    for kind in ("miniwob", "webshop-web"):
        entries = list(DEFAULT_PROFILES[kind].network or [])
        assert len(entries) == 1
        host, port = entries[0].rsplit(":", 1)
        assert DEFAULT_PROFILES[kind].names_address(host, int(port)), (
            "the site's own address, named literally"
        )
