"""Which addresses sandbox egress may reach: the egress proxy's classification of one IP address.

Only globally reachable addresses (``ipaddress``' ``is_global``) are outside. Everything else is
internal, in two tiers:

- **strict** (loopback, link-local, unspecified, multicast, cloud metadata addresses, this host's
  and the Docker host's own addresses): reached only through an allowlist entry that names the IP
  itself (``10.1.2.3:80``, ``[fd00::5]``);
- **private** (RFC 1918 — other containers on a Docker bridge —, RFC 6598 100.64.0.0/10, IPv6 unique
  local fc00::/7, and every other reserved range): also reached through an entry that names the
  host exactly (``search.corp.internal:8080``: no ``*``, no wildcard), for a user's own internal
  service. A wildcard (``*``, ``*.example.com``) never reaches an internal address of either tier.

An IPv6 address that carries an IPv4 one to an IPv4 host (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-translated, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo)
is judged by the IPv4 address it carries. Host names spelled as numbers (``2130706433``,
``0x7f.1``, ``0177.0.0.1``: what ``inet_aton`` and browsers accept) are IP addresses, never names.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from dataclasses import dataclass

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_V4, _V6 = ipaddress.IPv4Network, ipaddress.IPv6Network
METADATA: list[tuple[Network, str]] = [
    (_V4("100.100.100.200/32"), "Alibaba Cloud's metadata service"),
    (_V4("192.0.0.192/32"), "Oracle Cloud's metadata service"),
    (_V6("fd00:ec2::/32"), "AWS's internal IPv6 services (fd00:ec2::254: instance metadata)"),
]
"""Cloud metadata services outside the link-local ranges (those are strict anyway)."""

_PRIVATE: list[tuple[Network, str]] = [
    (_V4("10.0.0.0/8"), "a private address (RFC 1918: another container or machine of a private network)"),
    (
        _V4("172.16.0.0/12"),
        "a private address (RFC 1918: another container on a Docker bridge, or a private network)",
    ),
    (_V4("192.168.0.0/16"), "a private address (RFC 1918: a machine of a private network)"),
    (
        _V4("100.64.0.0/10"),
        "a shared address (RFC 6598 100.64.0.0/10: carrier-grade NAT and clouds' internal services)",
    ),
    (_V6("fc00::/7"), "a unique local IPv6 address (fc00::/7: a private network)"),
    (_V6("fec0::/10"), "a site-local IPv6 address (fec0::/10)"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address (64:ff9b:1::/48)"),
]
_NOT_GLOBAL_EXTRA: tuple[Network, ...] = (_V6("64:ff9b:1::/48"),)
"""Ranges Python 3.11's ``is_global`` still calls global (RFC 8215 made this one local-use)."""

_NAT64 = _V6("64:ff9b::/96")
_TRANSLATED = _V6("::ffff:0:0:0/96")  # RFC 2765 IPv4-translated
_COMPATIBLE = _V6("::/96")  # deprecated IPv4-compatible (:: and ::1 are checked as themselves)


@dataclass(frozen=True, slots=True)
class Internal:
    """Why an address is internal, and what in the allowlist lets egress reach it anyway."""

    reason: str
    """What the address is, for the refusal's one line (``"a loopback address"``)."""
    by_name: bool
    """True: an allowlist entry naming the host exactly also reaches it (private tier); False: only
    an entry naming the IP itself (strict tier)."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address ``ip`` reaches an IPv4 host at, with the mechanism's name; None when it carries none."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _TRANSLATED:
        return low32, "IPv4-translated"
    if ip in _NAT64:
        return low32, "NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    if ip.teredo is not None:
        return ip.teredo[1], "Teredo"
    if ip in _COMPATIBLE and int(ip) > 1:
        return low32, "IPv4-compatible"
    return None


def classify(ip: IP, *, blocked: Collection[IP] = (), own: Collection[IP] = ()) -> Internal | None:
    """Whether ``ip`` is internal (see the module docstring), or None for a globally reachable one.
    ``blocked``: the Docker host's addresses; ``own``: this host's."""
    if isinstance(ip, ipaddress.IPv6Address) and (inner := embedded_ipv4(ip)) is not None:
        v4, how = inner
        found = classify(v4, blocked=blocked, own=own)
        if found is not None:
            return Internal(f"{found.reason}, carried in an IPv6 address ({how})", found.by_name)
    if ip.is_loopback:
        return Internal("a loopback address", False)
    if ip.is_link_local:
        return Internal("a link-local address (where cloud metadata services answer)", False)
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _V4("0.0.0.0/8")):
        return Internal("an unspecified address (this host)", False)
    if ip.is_multicast:
        return Internal("a multicast address", False)
    for net, what in METADATA:
        if ip in net:
            return Internal(f"a cloud metadata address ({what})", False)
    if ip in blocked:
        return Internal("an address of the Docker host", False)
    if ip in own:
        return Internal("an address of this host", False)
    if ip.is_global and not any(ip in net for net in _NOT_GLOBAL_EXTRA):
        return None
    for net, what in _PRIVATE:
        if ip in net:
            return Internal(what, True)
    return Internal("a reserved address that is not globally reachable", True)


_NUMBER = r"(?:0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*)"
_NUMERIC_HOST = re.compile(rf"{_NUMBER}(?:\.{_NUMBER}){{0,3}}\.?", re.IGNORECASE)


def parse_host_ip(host: str) -> IP | None:
    """``host`` as an IP address when it is one in any spelling: standard IPv4/IPv6 (brackets and a
    zone dropped, IPv4-mapped IPv6 as IPv4), or the numeric IPv4 forms ``inet_aton`` accepts
    (``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``); None for a host name."""
    text = host.strip().strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return _numeric_ipv4(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _numeric_ipv4(text: str) -> ipaddress.IPv4Address | None:
    if not _NUMERIC_HOST.fullmatch(text):
        return None
    parts = [
        int(p, 16) if p[:2].lower() == "0x" else int(p, 8) if p[0] == "0" else int(p)
        for p in text.rstrip(".").split(".")
    ]
    *head, last = parts
    if any(p > 255 for p in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    value = 0
    for p in head:
        value = value << 8 | p
    return ipaddress.IPv4Address(value << (8 * (4 - len(head))) | last)
