"""Egress checks (issue 17 §2), probed from inside: no interface besides loopback; public
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

from toolgym.sandboxes.audit import probes
from toolgym.sandboxes.audit.rows import Fail, Skip
from toolgym.sandboxes.audit.target import Target
from toolgym.sandboxes.profiles import SandboxProfile

LINK_LOCAL = ("169.254.169.254:80", "169.254.170.2:80")
"""Cloud metadata services (EC2/GCP/Azure, ECS task metadata)."""
PUBLIC = ("1.1.1.1:80", "8.8.8.8:53")
CONNECT_TIMEOUT_S = 3.0


async def _reach(t: Target, targets: list[str]) -> dict[str, str]:
    sb = await t.current()
    seen: dict[str, str] = await probes.run_probe(sb, probes.REACH, t.server.nonce, str(CONNECT_TIMEOUT_S), *targets,
                                                  timeout=CONNECT_TIMEOUT_S * len(targets) + 20)
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
    denied = [f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}/", "http://example.com/",
              "https://example.com/", *(f"http://{a.split(':')[0]}/" for a in LINK_LOCAL),
              *(f"http://{g}:{port}/" for g in t.gateways)]
    sb = await t.current()  # a backend that cannot make it fails the check: the kinds that need a network cannot run
    no_bypass = {"NO_PROXY": "", "no_proxy": ""}  # the host's 127.0.0.1 stands for an outside server here
    seen: dict[str, Any] = await probes.run_probe(sb, probes.FETCH, allowed, *denied, env=no_bypass, timeout=120)
    problems = []
    if seen[allowed] != f"answered: {t.server.nonce} /allowed":
        problems.append(f"the allowlisted host did not answer: {seen[allowed][:120]}")
    problems += [f"{url} {how[:80]}" for url, how in seen.items() if url != allowed and "403" not in how]
    direct = await _reach(t, [f"127.0.0.1:{port}", PUBLIC[0]])
    if direct[f"127.0.0.1:{port}"] == "answered" or direct[PUBLIC[0]] != "unreachable":
        problems.append(f"direct connections got out: {direct}")
    if problems:
        raise Fail("; ".join(problems))
    return f"127.0.0.1:{port} answered through the proxy; {len(denied)} others refused with 403; no direct route"


def allowlist_profile(profile: SandboxProfile, kind: str, port: int) -> SandboxProfile:
    """``profile`` of ``kind`` with an allowlist naming only ``127.0.0.1:port``, on the same image."""
    return dataclasses.replace(profile, network=(f"127.0.0.1:{port}",), image=profile.image_for(kind))
