"""Wire format between the host and the in-sandbox agent: length-prefixed JSON frames.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON (one
object). Requests carry ``id`` (an int chosen by the host) and ``op``; the agent answers each with
one frame carrying the same ``id`` and ``ok``: true with the op's fields, or false with
``error`` = ``{"type": ..., "message": ...}``. Binary payloads travel as base64 strings in fields
whose names end in ``_b64``. The agent opens the connection and speaks first, with
``{"op": "hello", "token": ..., "pid": ...}``. The token never travels on the agent's command
line (``/proc/1/cmdline`` is readable by every process of the sandbox): the host hands it over in
an inherited pipe (``config["token_fd"]``) or in the environment variable ``TOKEN_ENV``, which
the agent wipes from its memory before anything else runs (``harden.take_token``).

Egress tunnels (sandboxes with a network allowlist on engines of other machines, where no
socket is shared): frames without ``id`` carrying ``tun`` (a tunnel id the agent chooses) and
``ev``. The agent sends ``open`` when code inside connects to its proxy port; then either side
sends ``data`` (``data_b64``), ``eof`` (it sends no more), ``ack`` (``n``: bytes it has passed
on, which lets the other side send that many more: a side writes only while fewer than
``TUNNEL_WINDOW`` bytes are unacknowledged, per tunnel and direction) and ``close`` (the tunnel is over; the other side drops
it). At most ``MAX_TUNNELS`` are open per sandbox.

Every reply is bounded in bytes: ``reply_limit`` gives the largest frame the agent may
send to a request (from its ``max_output`` or ``max_bytes``), the agent cuts each text field to
``max_output`` before it sends (a stream as it reads it, ``procs.Capture``; a text with
``cap_text``), and the host reads no frame longer than the limit of a request it is waiting for
(it closes the channel instead).

Stdlib only: this module runs inside sandboxes (imported by the agent as a sibling script) and on
the host (imported as ``toolgym.sandboxes.agent.protocol``). It must import nothing else. The
Python session's interpreter imports it before each episode (``pyworker``), so it imports at
module level only what that interpreter needs (``json``, ``struct``, ``traceback``): ``typing``
and ``types`` serve annotations only, and ``base64`` only the tunnels.
"""

from __future__ import annotations

import json
import struct
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: each of these costs the Python session's start-up
    import types
    from typing import Any, Protocol

    class Readable(Protocol):
        """What ``recv_frame`` reads from: a socket, or an object with its ``recv``."""

        def recv(self, n: int, /) -> bytes: ...


HEADER = struct.Struct(">I")
TOKEN_ENV = "TOOLGYM_AGENT_TOKEN"
"""The environment variable that carries the hello token where no pipe can be inherited (a container)."""
MAX_FRAME = 256 * 1024 * 1024
"""Largest request frame the agent accepts (bytes; the host is trusted, and a ``write_file`` of a
database copy takes 43 MiB). Replies have bounds of their own, per request (``reply_limit``)."""
VERSION = 1

# Reply bounds: every reply is capped where it is made, and the host refuses a bigger
# frame before reading it. Text fields (stdout, stderr, value, error, traceback) are cut to the
# request's ``max_output`` characters; in a frame a character takes at most 6 bytes (JSON writes a
# control character as ``\u00XX``; any other character is at most 4 bytes of UTF-8).
MARKER_CHARS = 512
"""Characters a cut text field may carry beyond its cap: the line saying what was cut, the shell's notes."""
ENVELOPE_BYTES = 64 * 1024
"""Bytes of a reply besides its capped fields: id, flags, numbers, a short error message."""
CONTROL_REPLY_BYTES = 4 * 1024 * 1024
"""Largest reply to an op without a bound of its own (``ping``, ``stats``, ``reset``, ``write_file``,
``prestart``, ...), and largest tunnel frame (``TUNNEL_CHUNK`` bytes as base64, and its envelope)."""
TEXT_FIELDS = {"run": 2, "sh_run": 2, "py_exec": 5}
"""How many capped text fields the reply to each op carries."""

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


def text_field_bytes(max_chars: int) -> int:
    """Most bytes one text field cut to ``max_chars`` characters takes in a frame."""
    return 6 * (max(0, max_chars) + MARKER_CHARS)


def reply_limit(op: str, *, max_output: int = 0, max_bytes: int = 0) -> int:
    """Largest reply frame the agent may send to ``op`` (with the request's ``max_output`` or, for
    ``read_file``, ``max_bytes``); the host takes a bigger one for a broken agent."""
    if op == "read_file":
        return 4 * (max(0, max_bytes) // 3 + 1) + ENVELOPE_BYTES
    if op in TEXT_FIELDS:
        return TEXT_FIELDS[op] * text_field_bytes(max_output) + ENVELOPE_BYTES
    return CONTROL_REPLY_BYTES


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, the line saying what was cut included (the first and
    last halves kept, that line between them), and whether it was cut. Cutting a cut text again to
    the same limit changes nothing, so the line is never lost to a second cut."""
    if len(text) <= limit:
        return text, False

    def line(half: int) -> str:
        return (
            f"\n[... {len(text) - 2 * half} characters omitted: output truncated to {2 * half} of {len(text)} "
            f"characters (the first and last {half} shown) ...]\n"
        )

    half = max(limit // 2, 1)
    for _ in range(3):  # the numbers' widths change with the halves: settles in two steps
        half = max((limit - len(line(half))) // 2, 1)
    return f"{text[:half]}{line(half)}{text[-half:]}", True


def _cap_messages(te: traceback.TracebackException, limit: int, seen: set[int]) -> None:
    """Cut the messages and notes ``te`` holds, and those of its chained exceptions, before it is
    formatted: formatting a 100 MB message would copy it several times over."""
    if id(te) in seen:
        return
    seen.add(id(te))
    message = getattr(te, "_str", None)  # the message, as TracebackException keeps it (3.8 to 3.13)
    if isinstance(message, str):
        te._str = cap_text(message, limit)[0]  # type: ignore[attr-defined]
    notes = getattr(te, "__notes__", None)
    if isinstance(notes, list):
        te.__notes__ = [cap_text(str(n), limit)[0] for n in notes[:64]]
    for chained in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if chained is not None:
            _cap_messages(chained, limit, seen)


def capped_exception(exc: BaseException, tb: types.TracebackType | None, limit: int) -> tuple[str, str, bool]:
    """(``ExcType: message``, the traceback from ``tb``, whether either was cut) of a cell's
    exception, each cut to ``limit`` characters; the message is cut before the traceback is
    formatted (a cell may raise 100 MB)."""
    # a quarter of the limit: the message then fits whole in the traceback's kept tail, frames before it
    quarter = max(limit // 4, 1)
    try:
        message, cut = cap_text(str(exc), quarter)
    except Exception:  # a broken __str__ is the cell's error, not the interpreter's
        message, cut = f"<{type(exc).__name__}.__str__ raised an exception>", False
    error, cut_error = cap_text(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, limit)
    te = traceback.TracebackException(type(exc), exc, tb, compact=True)
    _cap_messages(te, quarter, set())
    lines = te.format_exception_only() if isinstance(exc, SyntaxError) else te.format()
    text, cut_text = cap_text("".join(lines), limit)
    return error, text, cut or cut_error or cut_text


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return HEADER.pack(len(body)) + body


def encode_tunnel_data(tid: int, data: bytes | memoryview) -> bytes:
    """The ``data`` frame of tunnel ``tid`` (what ``encode`` would make, without walking the JSON
    encoder over the payload: base64 text needs no escaping)."""
    import base64  # tunnels only (the agent has it already); kept out of the interpreter's start-up

    body = b'{"tun":%d,"ev":"data","data_b64":"%s"}' % (int(tid), base64.b64encode(data))
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    message = json.loads(body.decode("utf-8", "surrogatepass"))
    if not isinstance(message, dict):
        raise ValueError("a frame must hold a JSON object")
    return message


def recv_exact(sock: Readable, n: int) -> bytes | None:
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


def recv_frame(sock: Readable, *, max_frame: int = MAX_FRAME) -> dict[str, Any] | None:
    """The next frame from a blocking socket, or None when the peer closed the connection; a frame
    longer than ``max_frame`` bytes raises ``ConnectionError`` before any of it is read."""
    header = recv_exact(sock, HEADER.size)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    if length > max_frame:
        raise ConnectionError(f"frame of {length} bytes exceeds the {max_frame}-byte limit")
    body = recv_exact(sock, length)
    if body is None:
        raise ConnectionError("the peer closed the connection after a frame header")
    return decode_body(body)
