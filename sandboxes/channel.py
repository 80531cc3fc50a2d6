"""The host end of the agent channel: one UNIX-socket connection per sandbox, many requests in
flight, matched to replies by id.

The host listens on a socket in the sandbox's state directory (mounted read-only into the
sandbox) and accepts exactly one connection, the agent's, checked by its hello token; then the
listening socket is closed and removed, so nothing else in the sandbox can connect later. A
channel is never re-opened: if the connection drops or a reply does not come in time, the
channel is closed, every waiting request fails with ``SandboxBrokenError``, and the sandbox must
be replaced.

Replies are bounded: each request names the largest reply it accepts
(``protocol.reply_limit``: a Python cell's five capped text fields, a file read's ``max_bytes`` as
base64), and the reader takes no frame longer than the largest bound of the requests waiting, or
``protocol.CONTROL_REPLY_BYTES`` when none waits for more. A longer frame is not read: the channel
closes and the sandbox is replaced, so an agent can never make the host hold more than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym.core.errors import SandboxBrokenError, SandboxError
from toolgym.sandboxes.agent import protocol


class AgentChannel:
    """A connected agent. ``request`` is safe to call from many coroutines at once."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, name: str, hello: dict[str, Any]
    ) -> None:
        self.name = name
        self.hello = hello
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reply_limits: dict[int, int] = {}
        """The largest reply each waiting request accepts (bytes)."""
        self._closed_reason: str | None = None
        self._on_close: list[Callable[[str], Any]] = []
        self.tunnel_sink: Callable[[dict[str, Any]], None] | None = None
        """Gets every frame the agent sends with ``tun`` (egress tunnels); None drops them."""
        self.last_heard = time.monotonic()
        """``time.monotonic()`` when the agent's last frame arrived (its hello, at first)."""
        self._reader_task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"agent-reader-{name}"
        )

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    @property
    def agent_pid(self) -> int:
        return int(self.hello.get("pid", 0))

    def on_close(self, callback: Callable[[str], Any]) -> None:
        """Call ``callback(reason)`` once when the channel closes."""
        self._on_close.append(callback)

    async def request(
        self, op: str, *, reply_timeout_s: float, max_reply_bytes: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Send one request and wait for its reply (the reply's fields, ``ok`` checked by caller).

        ``reply_timeout_s`` is how long the host waits for the agent; it must exceed any time limit the
        request itself carries. When it passes, the agent is taken for hung and the channel closed.
        ``max_reply_bytes``: the largest reply frame accepted (default ``protocol.reply_limit`` of
        ``op`` and the request's ``max_output`` / ``max_bytes``); a longer one closes the channel.
        """
        if self._closed_reason is not None:
            raise SandboxBrokenError(f"sandbox {self.name}: {self._closed_reason}; acquire a new sandbox")
        rid = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self._reply_limits[rid] = max_reply_bytes or protocol.reply_limit(
            op, max_output=int(fields.get("max_output") or 0), max_bytes=int(fields.get("max_bytes") or 0)
        )
        try:
            self._writer.write(protocol.encode({"id": rid, "op": op, **fields}))
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._pending.pop(rid, None)
            self._reply_limits.pop(rid, None)
            self.close(f"the connection to its agent failed ({exc})")
            raise SandboxBrokenError(
                f"sandbox {self.name}: {self._closed_reason}; acquire a new sandbox"
            ) from None
        try:
            return await asyncio.wait_for(future, reply_timeout_s)
        except TimeoutError:
            self.close(f"its agent did not answer {op!r} within {reply_timeout_s:g} s")
            raise SandboxBrokenError(
                f"sandbox {self.name}: {self._closed_reason}; acquire a new sandbox"
            ) from None
        finally:
            self._pending.pop(rid, None)
            self._reply_limits.pop(rid, None)

    def reply_limit(self) -> int:
        """The longest frame the reader takes now: the largest bound of the waiting requests."""
        return max([protocol.CONTROL_REPLY_BYTES, *self._reply_limits.values()])

    def post(self, message: dict[str, Any]) -> None:
        """Queue one frame that wants no reply (a tunnel's); ``drain`` waits for the transport."""
        self.post_frame(protocol.encode(message))

    def post_frame(self, frame: bytes) -> None:
        """``post`` for a frame already encoded."""
        if self._closed_reason is None:
            self._writer.write(frame)

    async def drain(self) -> None:
        if self._closed_reason is not None:
            raise ConnectionResetError(f"sandbox {self.name}: {self._closed_reason}")
        await self._writer.drain()

    async def _read_loop(self) -> None:
        reason = "its agent closed the connection (the agent died or was killed)"
        try:
            while True:
                header = await self._reader.readexactly(protocol.HEADER.size)
                (length,) = protocol.HEADER.unpack(header)
                limit = self.reply_limit()
                if length > limit:
                    reason = f"its agent sent an oversized frame ({length} bytes, more than the {limit} a reply may take)"
                    break
                reply = protocol.decode_body(await self._reader.readexactly(length))
                self.last_heard = time.monotonic()
                if "tun" in reply:
                    if self.tunnel_sink is not None:
                        self.tunnel_sink(reply)
                    continue
                future = self._pending.get(reply.get("id", -1))
                if future is not None and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except ValueError as exc:
            reason = f"its agent sent a malformed frame ({exc})"
        except asyncio.CancelledError:
            reason = "the channel was closed"
        self.close(reason)

    def close(self, reason: str = "the channel was closed") -> None:
        """Close the connection; idempotent. Waiting requests fail with ``SandboxBrokenError``."""
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    SandboxBrokenError(f"sandbox {self.name}: {reason}; acquire a new sandbox")
                )
        self._pending.clear()
        self._reply_limits.clear()
        with contextlib.suppress(Exception):
            self._writer.close()
        try:
            inside_reader = asyncio.current_task() is self._reader_task
        except RuntimeError:  # closed from outside the event loop
            inside_reader = False
        if not inside_reader:
            self._reader_task.cancel()
        for callback in self._on_close:
            with contextlib.suppress(Exception):
                callback(reason)


class AgentListener:
    """Waits for one sandbox's agent to connect on ``path`` and say hello with ``token``."""

    def __init__(self, path: str, *, token: str, name: str, owner_uid: int | None = None) -> None:
        self.path = path
        self.token = token
        self.name = name
        self.owner_uid = owner_uid
        self._server: asyncio.AbstractServer | None = None
        self._connected: asyncio.Future[AgentChannel] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._connected = loop.create_future()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._server = await asyncio.start_unix_server(self._on_connect, path=self.path)
        os.chmod(self.path, 0o600)
        if self.owner_uid is not None and self.owner_uid != os.geteuid():
            os.chown(self.path, self.owner_uid, -1)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._connected is not None
        try:
            header = await asyncio.wait_for(reader.readexactly(protocol.HEADER.size), 10.0)
            (length,) = protocol.HEADER.unpack(header)
            if length > 64 * 1024:
                raise ValueError("hello frame too large")
            hello = protocol.decode_body(await asyncio.wait_for(reader.readexactly(length), 10.0))
            if hello.get("op") != "hello" or hello.get("token") != self.token:
                raise ValueError("wrong hello")
        except (TimeoutError, asyncio.IncompleteReadError, ValueError, OSError):
            writer.close()
            return
        if self._connected.done():
            writer.close()
            return
        self._connected.set_result(AgentChannel(reader, writer, name=self.name, hello=hello))
        self.stop()

    async def wait(
        self, timeout_s: float, *, alive: Callable[[], Awaitable[str | None]] | None = None
    ) -> AgentChannel:
        """The connected channel. ``alive`` is polled and returns a reason when the sandbox died
        before its agent could connect (so the wait ends at once with that reason)."""
        assert self._connected is not None
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SandboxError(
                        f"sandbox {self.name}: its agent did not connect within {timeout_s:g} s; "
                        "check `toolgym sandbox doctor`"
                    )
                with contextlib.suppress(asyncio.TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(self._connected), min(remaining, 0.25))
                dead = await alive() if alive is not None else None
                if dead:
                    raise SandboxError(f"sandbox {self.name} stopped before its agent connected: {dead}")
        finally:
            self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
