"""A fake SGLang ``/generate`` server that misbehaves on purpose, for fault-injection tests.

Raw asyncio HTTP/1.1 (keep-alive), so that faults can be made at the socket level: with probability
``rate`` a request gets one of

- ``5xx``: HTTP 503 with a JSON error (transient for the client);
- ``timeout``: no answer for ``stall_s`` seconds (past the client's per-call timeout);
- ``reset``: the connection is closed with a TCP reset, nothing sent;
- ``truncated``: a ``Content-Length`` longer than the body, then the connection closed;
- ``invalid_json``: a complete HTTP 200 whose body is not JSON (cut in half),

taken in turn; and after ``restart_after`` requests the server goes away (listener and open connections closed)
for ``down_s`` seconds and comes back on the same port, as a restarted server would. Every other
request is answered with ``output_ids`` (and their logprobs) fixed at construction; GETs (the client's
set-up probes: model info, context length) get a 404 and are neither counted nor faulted.

The server runs on its own event loop in a thread, as a real server runs in its own process: the
client's blocking set-up probes then get their answer at once instead of waiting out their timeout
on a loop they block.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
import threading
from collections import Counter
from typing import Any

KINDS = ("5xx", "timeout", "reset", "truncated", "invalid_json")


class FaultyServer:
    def __init__(
        self,
        output_ids: list[int],
        *,
        rate: float = 0.1,
        seed: int = 0,
        stall_s: float = 2.0,
        restart_after: int | None = None,
        down_s: float = 0.3,
    ) -> None:
        self.output_ids = output_ids
        self.rate = rate
        self.rng = random.Random(seed)
        self.stall_s = stall_s
        self.restart_after = restart_after
        self.down_s = down_s
        self.requests = 0
        self.injected: Counter[str] = Counter()
        self.restarts = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start listening (on ``port``, or a free one) on the server's own loop and thread."""
        loop = asyncio.new_event_loop()
        self._loop, self._thread = (
            loop,
            threading.Thread(target=loop.run_forever, name="faulty-server", daemon=True),
        )
        self._thread.start()
        await asyncio.wait_for(
            asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._listen(), loop)), 10
        )

    async def stop(self) -> None:
        """Close the listener and every open connection, then end the server's thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        await asyncio.wait_for(
            asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._shutdown(), loop)), 10
        )
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)
        loop.close()
        self._loop = self._thread = None

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        """``_close``, then end what is still running (stalled answers, a pending restart)."""
        await self._close()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _restart(self) -> None:
        self.restarts += 1
        await self._close()
        await asyncio.sleep(self.down_s)
        await self._listen()

    def _answer(self) -> bytes:
        meta = {
            "id": f"r{self.requests}",
            "finish_reason": {"type": "stop"},
            "prompt_tokens": 1,
            "completion_tokens": len(self.output_ids),
            "output_token_logprobs": [[-0.1, t, None] for t in self.output_ids],
        }
        return json.dumps({"text": "", "output_ids": self.output_ids, "meta_info": meta}).encode()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                await reader.readexactly(length)
                if head.startswith(b"GET "):
                    writer.write(
                        b"HTTP/1.1 404 X\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                    )
                    await writer.drain()
                    continue
                self.requests += 1
                if self.restart_after is not None and self.requests == self.restart_after:
                    asyncio.get_running_loop().create_task(self._restart())
                    return
                kind = None
                if self.rng.random() < self.rate:  # which fault: in turn, so that a short run sees every kind
                    kind = KINDS[sum(self.injected.values()) % len(KINDS)]
                    self.injected[kind] += 1
                if kind == "reset":
                    sock = writer.get_extra_info("socket")
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if kind == "timeout":
                    await asyncio.sleep(self.stall_s)
                status, body = 200, self._answer()
                if kind == "5xx":
                    status, body = 503, b'{"error": "server overloaded"}'
                elif kind == "invalid_json":
                    body = body[: len(body) // 2]
                declared = len(body) * 2 if kind == "truncated" else len(body)
                if kind == "truncated":
                    body = body[: len(body) // 2]
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if kind == "truncated":
                    writer.close()
                    return
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
        ):
            # a cancelled handler (at stop) ends quietly: asyncio's stream callback would report it as an error
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def summary(self) -> dict[str, Any]:
        return {"requests": self.requests, "injected": dict(self.injected), "restarts": self.restarts}
