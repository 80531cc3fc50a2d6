"""The host end of egress tunnels over an agent's channel (engines on other machines).

On a remote engine nothing is shared with the sandbox but the agent's channel (the container's
attach stream), so the agent relays each connection to its proxy port as a tunnel of frames (see
``toolgym.sandboxes.agent.protocol``). ``EgressTunnels`` turns each tunnel into a reader and a
writer with the interface of asyncio's streams and hands them to ``EgressProxy.handle``: the
same decision code as on local engines, where the same connection arrives on a UNIX socket.

Flow control is by credit: either side has at most ``TUNNEL_WINDOW`` bytes unacknowledged per
tunnel; the receiver acknowledges what it has passed on (here: what the proxy read). A peer that
sends beyond the window loses the tunnel. Closing either end closes the tunnel; the channel's end
closes them all.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym.sandboxes.agent import protocol
from toolgym.sandboxes.channel import AgentChannel
from toolgym.sandboxes.netproxy import MAX_HEAD, ByteSink, ByteSource

Handler = Callable[[ByteSource, ByteSink], Awaitable[None]]


class TunnelReader:
    """What the sandbox sent on one tunnel, read like an ``asyncio.StreamReader``; ``ack(n)`` is
    called as the reader takes bytes out (a quarter window at a time)."""

    def __init__(self, ack: Callable[[int], None]) -> None:
        self._buffer = bytearray()
        self._eof = False
        self._more = asyncio.Event()
        self._ack = ack
        self._taken = 0

    def feed(self, data: bytes) -> bool:
        """Add bytes; False when the peer overran the window (the tunnel must go)."""
        self._buffer += data
        self._more.set()
        return len(self._buffer) <= protocol.TUNNEL_BUFFER_CAP

    def feed_eof(self) -> None:
        self._eof = True
        self._more.set()

    async def _wait(self) -> None:
        self._more.clear()
        await self._more.wait()

    def _take(self, n: int) -> bytes:
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        self._taken += n
        if self._taken >= protocol.TUNNEL_WINDOW // 4:
            self._ack(self._taken)
            self._taken = 0
        return data

    async def read(self, n: int = -1) -> bytes:
        while not self._buffer and not self._eof:
            await self._wait()
        return self._take(len(self._buffer) if n < 0 else min(n, len(self._buffer)))

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        while True:
            at = self._buffer.find(separator)
            if at >= 0:
                return self._take(at + len(separator))
            if len(self._buffer) > MAX_HEAD:
                raise asyncio.LimitOverrunError("separator not found within the limit", len(self._buffer))
            if self._eof:
                partial = self._take(len(self._buffer))
                raise asyncio.IncompleteReadError(partial, None)
            await self._wait()


class TunnelWriter:
    """Bytes for the sandbox on one tunnel, written like an ``asyncio.StreamWriter``: ``drain``
    waits while the agent has a full window unacknowledged."""

    def __init__(self, hub: EgressTunnels, tid: int) -> None:
        self._hub = hub
        self._tid = tid
        self._unacked = 0
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False
        self._eof_sent = False

    def write(self, data: bytes) -> None:
        if self.closed or self._eof_sent:
            raise ConnectionResetError("the tunnel is closed")
        view = memoryview(data)
        for start in range(0, len(view), protocol.TUNNEL_CHUNK):
            chunk = view[start : start + protocol.TUNNEL_CHUNK]
            self._hub.channel.post_frame(protocol.encode_tunnel_data(self._tid, chunk))
            self._unacked += len(chunk)
        if self._unacked >= protocol.TUNNEL_WINDOW:
            self._room.clear()

    async def drain(self) -> None:
        while not self.closed and self._unacked >= protocol.TUNNEL_WINDOW:
            await self._room.wait()
        if self.closed:
            raise ConnectionResetError("the tunnel is closed")
        await self._hub.channel.drain()

    def acked(self, n: int) -> None:
        self._unacked -= n
        if self._unacked < protocol.TUNNEL_WINDOW:
            self._room.set()

    def write_eof(self) -> None:
        if not self.closed and not self._eof_sent:
            self._eof_sent = True
            self._hub.post({"tun": self._tid, "ev": "eof"})

    def close(self) -> None:
        """End the tunnel from this side (the agent closes the sandbox's connection)."""
        if not self.closed:
            self._hub.end(self._tid, tell_agent=True)

    def aborted(self) -> None:
        self.closed = True
        self._room.set()


class EgressTunnels:
    """Serves the tunnels of one sandbox's channel with ``handler`` (``EgressProxy.handle``)."""

    def __init__(
        self, channel: AgentChannel, handler: Handler, *, max_tunnels: int = protocol.MAX_TUNNELS
    ) -> None:
        self.channel = channel
        self.handler = handler
        self.max_tunnels = max_tunnels
        self.refused = 0
        """Tunnels refused because ``max_tunnels`` were open, or dropped for breaking the protocol."""
        self._open: dict[int, tuple[TunnelReader, TunnelWriter, asyncio.Task[None]]] = {}
        channel.tunnel_sink = self._on_frame
        channel.on_close(lambda _reason: self.close_all())

    @property
    def open_count(self) -> int:
        return len(self._open)

    def post(self, message: dict[str, Any]) -> None:
        self.channel.post(message)

    def _on_frame(self, frame: dict[str, Any]) -> None:
        tid, ev = frame.get("tun"), frame.get("ev")
        if not isinstance(tid, int):
            return
        if ev == "open":
            if tid in self._open or len(self._open) >= self.max_tunnels or self.channel.closed:
                self.refused += 1
                self.post({"tun": tid, "ev": "close"})
                return
            writer = TunnelWriter(self, tid)
            reader = TunnelReader(lambda n: self.post({"tun": tid, "ev": "ack", "n": n}))
            task = asyncio.get_running_loop().create_task(
                self._serve(reader, writer), name=f"egress-tunnel-{tid}"
            )
            self._open[tid] = (reader, writer, task)
            return
        entry = self._open.get(tid)
        if entry is None:
            return
        reader, writer, _ = entry
        try:
            if ev == "data":
                if not reader.feed(base64.b64decode(frame["data_b64"], validate=True)):
                    raise ValueError("the agent overran the tunnel's window")
            elif ev == "ack":
                writer.acked(int(frame["n"]))
            elif ev == "eof":
                reader.feed_eof()
            elif ev == "close":
                self.end(tid, tell_agent=False)
        except (KeyError, TypeError, ValueError, binascii.Error):
            self.refused += 1
            self.end(tid, tell_agent=True)

    async def _serve(self, reader: TunnelReader, writer: TunnelWriter) -> None:
        try:
            await self.handler(reader, writer)
        finally:
            writer.close()

    def end(self, tid: int, *, tell_agent: bool) -> None:
        """Drop tunnel ``tid``: its proxy connection stops (and its upstream closes)."""
        entry = self._open.pop(tid, None)
        if entry is None:
            return
        reader, writer, task = entry
        writer.aborted()
        reader.feed_eof()
        if tell_agent:
            with contextlib.suppress(Exception):
                self.post({"tun": tid, "ev": "close"})
        if task is not asyncio.current_task():
            task.cancel()

    def close_all(self) -> None:
        for tid in list(self._open):
            self.end(tid, tell_agent=False)
