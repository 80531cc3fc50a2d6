"""Egress checks, probed from inside: no interface besides loopback; public
addresses, the link-local metadata address, the host's gateway addresses and the host's loopback
services out of reach; and for a kind with an allowlist, the allowlisted host answering through
the host's proxy while everything else is refused with 403.

A direct connection must fail as *unreachable* (no route: the sandbox has no interface). A
refused connection or a timeout means packets left the sandbox and something answered or
dropped them, which a sandbox without a network never sees.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from toolgym.core.sandbox_profiles import SandboxProfile
from toolgym.sandboxes.audit import probes
from toolgym.sandboxes.audit.rows import Fail, Skip
from toolgym.sandboxes.audit.target import Target

LINK_LOCAL = ("169.254.169.254:80", "169.254.170.2:80")
"""Cloud metadata services (EC2/GCP/Azure, ECS task metadata)."""
PUBLIC = ("1.1.1.1:80", "8.8.8.8:53")
CONNECT_TIMEOUT_S = 3.0


async def _reach(t: Target, targets: list[str]) -> dict[str, str]:
    sb = await t.current()
    seen: dict[str, str] = await probes.run_probe(
        sb,
        probes.REACH,
        t.server.nonce,
        str(CONNECT_TIMEOUT_S),
        *targets,
        timeout=CONNECT_TIMEOUT_S * len(targets) + 20,
    )
    return seen


def _unreachable(seen: dict[str, str]) -> str:
    bad = {target: how for target, how in seen.items() if how != "unreachable"}
    if bad:
        raise Fail("reached: " + ", ".join(f"{target} ({how})" for target, how in bad.items()))
    hosts: dict[str, list[str]] = {}
    for target in seen:
        host, _, port = target.rpartition(":")
        hosts.setdefault(host, []).append(port)
    return "; ".join(f"{h}:{','.join(ports)}" for h, ports in hosts.items()) + ": unreachable"


async def interfaces(t: Target) -> str:
    names = await probes.run_probe(await t.current(), probes.INTERFACES)
    if names != ["lo"]:
        raise Fail(f"network interfaces {names}")
    return "only lo"


async def public(t: Target) -> str:
    detail = _unreachable(await _reach(t, list(PUBLIC)))
    dns = await probes.run_probe(await t.current(), probes.DNS, timeout=40)
    if dns == "resolved":
        raise Fail("example.com resolved")
    return f"{detail}; DNS {dns.split(':')[0]}"


async def link_local(t: Target) -> str:
    return _unreachable(await _reach(t, list(LINK_LOCAL)))


async def gateway(t: Target) -> str:
    if not t.gateways:
        raise Skip("this host shows no gateway or non-loopback address to probe")
    ports = (t.server.port, 22, 80, 2375, 2376)
    return _unreachable(await _reach(t, [f"{a}:{p}" for a in t.gateways for p in ports]))


async def host_loopback(t: Target) -> str:
    seen = await _reach(t, [f"127.0.0.1:{t.server.port}", f"[::1]:{t.server.port}"])
    answered = [target for target, how in seen.items() if how == "answered"]
    if answered:
        raise Fail(f"the host's loopback server answered at {', '.join(answered)}")
    return f"the host's server on 127.0.0.1:{t.server.port} not reached ({', '.join(sorted(set(seen.values())))})"


async def allowlist(t: Target) -> str:
    """A kind whose allowlist names only the audit's host server, made for this check."""
    port = t.server.port
    allowed = f"http://127.0.0.1:{port}/allowed"
    denied = [
        f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}/",
        "http://example.com/",
        "https://example.com/",
        *(f"http://{a.split(':')[0]}/" for a in LINK_LOCAL),
        *(f"http://{g}:{port}/" for g in t.gateways),
    ]
    sb = (
        await t.current()
    )  # a backend that cannot make it fails the check: the kinds that need a network cannot run
    no_bypass = {"NO_PROXY": "", "no_proxy": ""}  # the host's 127.0.0.1 stands for an outside server here
    seen: dict[str, Any] = await probes.run_probe(
        sb, probes.FETCH, allowed, *denied, env=no_bypass, timeout=120
    )
    problems = []
    if seen[allowed] != f"answered: {t.server.nonce} /allowed":
        problems.append(f"the allowlisted host did not answer: {seen[allowed][:120]}")
    problems += [f"{url} {how[:80]}" for url, how in seen.items() if url != allowed and "403" not in how]
    direct = await _reach(t, [f"127.0.0.1:{port}", PUBLIC[0]])
    if direct[f"127.0.0.1:{port}"] == "answered" or direct[PUBLIC[0]] != "unreachable":
        problems.append(f"direct connections got out: {direct}")
    if problems:
        raise Fail("; ".join(problems))
    return (
        f"127.0.0.1:{port} answered through the proxy; {len(denied)} others refused with 403; no direct route"
    )


PEER = r"""
import json, socket, subprocess, sys, time
server = ("import socket, sys, threading\n"
          "def serve(s):\n"
          "    while True:\n"
          "        c, _ = s.accept(); c.sendall(sys.argv[1].encode()); c.close()\n"
          "t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(('0.0.0.0', 4243)); t.listen()\n"
          "u = socket.socket(socket.AF_UNIX); u.bind('\\0tg-audit-peer'); u.listen()\n"
          "threading.Thread(target=serve, args=(u,), daemon=True).start()\n"
          "serve(t)\n")
subprocess.Popen([sys.executable, '-c', server, sys.argv[1]], start_new_session=True)
time.sleep(1.0)
addresses, last = set(), None
for line in open('/proc/net/fib_trie'):
    parts = line.split()
    if parts[:1] == ['|--']:
        last = parts[1]
    elif '/32 host LOCAL' in line and last and not last.startswith('127.'):
        addresses.add(last)
print(json.dumps(sorted(addresses)))
"""
"""A detached server in one sandbox answering ``nonce`` on TCP 4243 (all addresses) and on the
abstract UNIX socket ``tg-audit-peer``; prints the sandbox's own non-loopback addresses."""

PEER_UNIX = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(3)
try:
    s.connect('\0tg-audit-peer')
    print(json.dumps('answered' if sys.argv[1].encode() in s.recv(100) else 'connected'))
except OSError as exc:
    print(json.dumps('refused: %s' % exc))
"""


async def other_sandboxes(t: Target) -> str:
    """Two sandboxes of the same kind at once: the second cannot reach the first's listeners."""
    first = await t.current()
    addresses = await probes.run_probe(first, PEER, t.server.nonce)
    targets = [f"{a}:4243" for a in ["127.0.0.1", *addresses]]
    second = await t.acquire()
    try:
        if second.id == first.id:
            raise Fail("the backend handed out one sandbox twice")
        seen = await probes.run_probe(second, probes.REACH, t.server.nonce, str(CONNECT_TIMEOUT_S), *targets)
        unix = await probes.run_probe(second, PEER_UNIX, t.server.nonce)
        listing = (await second.run(["ps", "-eo", "args"])).stdout
    finally:
        await t.backend.release(second)
    problems = [f"TCP {target} {how}" for target, how in seen.items() if how in ("answered", "connected")]
    if unix in ("answered", "connected"):
        problems.append(f"abstract UNIX socket {unix}")
    if "tg-audit-peer" in listing:
        problems.append("the other sandbox's processes are visible")
    if problems:
        raise Fail("the second sandbox reached the first's: " + "; ".join(problems))
    tcp = ", ".join(f"{target} {how}" for target, how in seen.items())
    return f"a listener in one sandbox not reached from another (TCP {tcp}; UNIX {unix.split(':')[0]}; not in ps)"


def allowlist_profile(profile: SandboxProfile, kind: str, port: int) -> SandboxProfile:
    """``profile`` of ``kind`` with an allowlist naming only ``127.0.0.1:port``, on the same image."""
    return dataclasses.replace(profile, network=(f"127.0.0.1:{port}",), image=profile.image_for(kind))
