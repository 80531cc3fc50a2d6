"""The agent channel over a Docker attach stream: the agent's stdin and stdout, carried by the
engine's API connection, so it works with an engine on any host (``DOCKER_HOST=tcp://...``).

How: the container is created with ``OpenStdin`` and ``StdinOnce``; before it starts, the host
opens ``POST /containers/{id}/attach?stream=1&stdin=1&stdout=1&stderr=1`` with ``Upgrade: tcp``
on a raw connection (asyncio, TLS when the host uses it). After the ``101`` answer the connection
is a raw stream: bytes written are the agent's stdin; bytes read are the engine's multiplexed
frames (8-byte header: stream 1 = stdout, 2 = stderr; 4-byte big-endian length) which are split
here, stdout feeding the channel and stderr a capped buffer for error messages. The agent speaks
the same length-prefixed protocol as over the UNIX socket (``toolgym.sandboxes.agent.protocol``),
hello and token included, so ``AgentChannel`` serves both.

Closing the connection closes the agent's stdin (``StdinOnce``), so the agent kills everything and
exits, and the container removes itself: a sandbox never outlives its orchestrator's connection,
as on the local path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from toolgym.core.errors import SandboxError
from toolgym.sandboxes.agent import protocol
from toolgym.sandboxes.channel import AgentChannel
from toolgym.sandboxes.remote.hosts import DockerHost

STDERR_KEEP = 8 * 1024
"""Bytes of the agent's stderr kept (the tail) for error messages."""
_HEADER_LIMIT = 64 * 1024


class AttachStream:
    """One hijacked attach connection: ``stdout`` (a StreamReader of the demultiplexed stdout),
    ``writer`` (the agent's stdin), ``stderr_tail()`` (what the agent wrote to stderr, capped)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, name: str) -> None:
        self.writer = writer
        self.stdout = asyncio.StreamReader(limit=protocol.MAX_FRAME)
        self._raw = reader
        self._stderr = bytearray()
        self._task = asyncio.get_running_loop().create_task(self._demux(), name=f"attach-demux-{name}")

    async def _demux(self) -> None:
        try:
            while True:
                header = await self._raw.readexactly(8)
                length = int.from_bytes(header[4:8], "big")
                data = await self._raw.readexactly(length) if length else b""
                if header[0] == 2:
                    self._stderr += data
                    del self._stderr[: max(0, len(self._stderr) - STDERR_KEEP)]
                else:  # 1: stdout (0, stdin echo, never comes without a TTY)
                    self.stdout.feed_data(data)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.stdout.feed_eof()

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        self._task.cancel()


async def open_attach(
    host: DockerHost, container_id: str, *, api_version: str, timeout_s: float = 30.0
) -> AttachStream:
    """Attach to the (not yet started) container's stdin, stdout and stderr."""
    parts = urlsplit(host.url)
    try:
        async with asyncio.timeout(timeout_s):
            if parts.scheme == "unix":
                reader, writer = await asyncio.open_unix_connection(parts.path, limit=_HEADER_LIMIT)
            else:
                ctx = host.ssl_context()
                hostname = parts.hostname or "localhost"
                port = parts.port or (2376 if ctx else 2375)
                reader, writer = await asyncio.open_connection(
                    hostname, port, ssl=ctx, server_hostname=hostname if ctx else None, limit=_HEADER_LIMIT
                )
            request = (
                f"POST /v{api_version}/containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
                f"Host: {parts.netloc or 'docker'}\r\nUpgrade: tcp\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n"
            )
            writer.write(request.encode("ascii"))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
    except TimeoutError:
        raise SandboxError(
            f"the Docker engine at {host.url} did not answer an attach within {timeout_s:g} s"
        ) from None
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise SandboxError(f"could not attach to a sandbox container on {host.url}: {exc}") from None
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or fields[1] not in ("101", "200"):
        with contextlib.suppress(Exception):
            body = await asyncio.wait_for(reader.read(2048), 2.0)
            status_line += f": {body.decode('utf-8', 'replace').strip()}"
        writer.close()
        raise SandboxError(
            f"the Docker engine at {host.url} refused to attach to container {container_id[:12]} ({status_line})"
        )
    return AttachStream(reader, writer, name=container_id[:12])


async def wait_hello(
    stream: AttachStream,
    *,
    token: str,
    name: str,
    timeout_s: float,
    alive: Callable[[], Awaitable[str | None]],
) -> AgentChannel:
    """The channel once the agent has said hello with ``token`` on its stdout. ``alive`` returns a
    reason when the container stopped before that (then the wait ends at once)."""
    deadline = time.monotonic() + timeout_s

    async def hello() -> dict[str, object]:
        header = await stream.stdout.readexactly(protocol.HEADER.size)
        (length,) = protocol.HEADER.unpack(header)
        if length > 64 * 1024:
            raise SandboxError(
                f"sandbox {name}: its agent's hello frame is {length} bytes; the image's python3 "
                "or its entry point wrote to stdout before the agent started"
            )
        return protocol.decode_body(await stream.stdout.readexactly(length))

    task = asyncio.create_task(hello())
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(
                    f"sandbox {name}: its agent did not say hello within {timeout_s:g} s "
                    f"(stderr: {stream.stderr_tail() or 'empty'})"
                )
            done, _ = await asyncio.wait({task}, timeout=min(remaining, 0.25))
            if done:
                try:
                    message = task.result()
                except (asyncio.IncompleteReadError, ValueError) as exc:
                    dead = await alive()
                    raise SandboxError(
                        f"sandbox {name} stopped before its agent connected: "
                        f"{dead or exc} (stderr: {stream.stderr_tail() or 'empty'})"
                    ) from None
                if message.get("op") != "hello" or message.get("token") != token:
                    raise SandboxError(
                        f"sandbox {name}: the first frame on its attach stream is not the agent's hello"
                    )
                return AgentChannel(stream.stdout, stream.writer, name=name, hello=message)
            dead = await alive()
            if dead:
                raise SandboxError(f"sandbox {name} stopped before its agent connected: {dead}")
    finally:
        task.cancel()
