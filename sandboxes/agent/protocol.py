"""Wire format between the host and the in-sandbox agent: length-prefixed JSON frames.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON (one
object). Requests carry ``id`` (an int chosen by the host) and ``op``; the agent answers each with
one frame carrying the same ``id`` and ``ok``: true with the op's fields, or false with
``error`` = ``{"type": ..., "message": ...}``. Binary payloads travel as base64 strings in fields
whose names end in ``_b64``. The agent opens the connection and speaks first, with
``{"op": "hello", "token": ..., "pid": ...}``.

Egress tunnels (sandboxes with a network allowlist on engines of other machines, where no
socket is shared): frames without ``id`` carrying ``tun`` (a tunnel id the agent chooses) and
``ev``. The agent sends ``open`` when code inside connects to its proxy port; then either side
sends ``data`` (``data_b64``), ``eof`` (it sends no more), ``ack`` (``n``: bytes it has passed
on, which lets the other side send that many more: a side writes only while fewer than
``TUNNEL_WINDOW`` bytes are unacknowledged, per tunnel and direction) and ``close`` (the tunnel is over; the other side drops
it). At most ``MAX_TUNNELS`` are open per sandbox.

Stdlib only: this module runs inside sandboxes (imported by the agent as a sibling script) and on
the host (imported as ``toolgym.sandboxes.agent.protocol``). It must import nothing else.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024
"""Largest frame either side accepts (bytes); bigger ones mean a broken peer."""
VERSION = 1

TUNNEL = "channel"
"""The ``proxy_socket`` value that tunnels egress over the agent's channel."""
TUNNEL_WINDOW = 256 * 1024
"""Bytes in flight per tunnel and direction (the receiver's buffer cap)."""
TUNNEL_CHUNK = 32 * 1024
"""Most bytes in one ``data`` frame."""
TUNNEL_BUFFER_CAP = 2 * TUNNEL_WINDOW
"""Bytes a receiver holds for one tunnel at most (a sender checks the window before each write of
at most 64 KiB); a peer that makes it hold more loses the tunnel."""
MAX_TUNNELS = 64
"""Tunnels open at once per sandbox; more connections wait in the listen backlog."""

# Error types the agent reports; the host maps them onto exceptions.
E_OUTSIDE = "outside"
E_NOT_FOUND = "not_found"
E_IS_DIR = "is_dir"
E_INVALID = "invalid"
E_OS = "os"
E_INTERNAL = "internal"


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return HEADER.pack(len(body)) + body


def encode_tunnel_data(tid: int, data: bytes | memoryview) -> bytes:
    """The ``data`` frame of tunnel ``tid`` (what ``encode`` would make, without walking the JSON
    encoder over the payload: base64 text needs no escaping)."""
    body = b'{"tun":%d,"ev":"data","data_b64":"%s"}' % (int(tid), base64.b64encode(data))
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    message = json.loads(body.decode("utf-8", "surrogatepass"))
    if not isinstance(message, dict):
        raise ValueError("a frame must hold a JSON object")
    return message


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Exactly ``n`` bytes from a blocking socket, or None at a clean end of stream."""
    chunks = []
    remaining = n
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            if remaining == n:
                return None
            raise ConnectionError("the peer closed the connection in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame from a blocking socket, or None when the peer closed the connection."""
    header = recv_exact(sock, HEADER.size)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ConnectionError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    body = recv_exact(sock, length)
    if body is None:
        raise ConnectionError("the peer closed the connection after a frame header")
    return decode_body(body)
