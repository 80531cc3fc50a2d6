"""MCP's stdio transport to a server that runs inside a sandbox.

The server is a process of the episode's sandbox, started by a small helper (``HELPER``, stdlib
only) that the host installs in the sandbox's Python session: it holds the server's pipes, reads
its stdout into a bounded buffer on a thread and keeps the tail of its stderr. The host speaks to
it in cells: each :meth:`SandboxProcess.exchange` writes the messages the client has queued to the
server's stdin and brings back what the server has written since (base64, at most
``CHUNK_BYTES`` a cell, so a reply always fits the sandbox's output cap), waiting up to a poll
interval for the first byte. Nothing of the server runs on the host.

:func:`sandbox_stdio_client` turns that into the pair of streams the SDK's ``ClientSession``
takes, as ``mcp.client.stdio.stdio_client`` does for a local process. Limits: one message from
the server is at most ``max_message_bytes``; a longer one is read to its end and dropped, and
the request it answered gets a JSON-RPC error that says so (the id is read from the message's
head). The server process outlives the streams: closing them stops nothing, so one server
serves every call of an episode (:meth:`SandboxProcess.stop` ends it; the sandbox's reset kills
it in any case).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types
from mcp.shared.message import SessionMessage

from toolgym import ToolExecutionError

CHUNK_BYTES = 96 * 1024
"""Server output brought back by one cell: 128 KiB as base64, under every profile's output cap."""
POLL_S = 0.5
"""Longest one cell waits for the server's first byte while a request is in flight."""
BUFFER_BYTES = 4 * 1024 * 1024
"""Server output the helper holds before it stops reading (the server then blocks on its pipe)."""

HELPER = r"""
import base64 as _b64, collections as _col, json as _json, os as _os, signal as _sig
import subprocess as _sp, threading as _th, time as _time

class _ToolgymMcpServer:
    def __init__(self, argv, env, cwd, limit):
        full = dict(_os.environ)
        full.update(env)
        self.proc = _sp.Popen(argv, stdin=_sp.PIPE, stdout=_sp.PIPE, stderr=_sp.PIPE, cwd=cwd or None,
                              env=full, start_new_session=True, bufsize=0)
        self.buf, self.err, self.eof, self.limit = bytearray(), bytearray(), False, limit
        self.cond = _th.Condition()
        _th.Thread(target=self._out, daemon=True).start()
        self.err_reader = _th.Thread(target=self._errs, daemon=True)
        self.err_reader.start()

    def _out(self):
        fd = self.proc.stdout.fileno()
        while True:
            with self.cond:
                while len(self.buf) >= self.limit:
                    self.cond.wait()
            chunk = _os.read(fd, 65536)
            with self.cond:
                if not chunk:
                    self.eof = True
                    self.cond.notify_all()
                    return
                self.buf += chunk
                self.cond.notify_all()

    def _errs(self):
        fd = self.proc.stderr.fileno()
        while True:
            chunk = _os.read(fd, 65536)
            if not chunk:
                return
            self.err = (self.err + chunk)[-4096:]

    def exchange(self, out, wait, budget, fresh):
        data = memoryview(out.encode())
        try:
            while data:
                data = data[_os.write(self.proc.stdin.fileno(), data):]
        except OSError:
            pass
        deadline = _time.monotonic() + wait
        with self.cond:
            if fresh:  # what an earlier call left unread: notifications, never an answer to this call
                cut = self.buf.rfind(b"\n") + 1
                del self.buf[:cut]
            while not self.buf.count(b"\n") and not self.eof and len(self.buf) < budget:
                left = deadline - _time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            data = bytes(self.buf[:budget])
            del self.buf[:budget]
            self.cond.notify_all()
            ended = self.eof and not self.buf
        code = None
        if ended:
            try:
                code = self.proc.wait(2)
            except _sp.TimeoutExpired:
                pass
            self.err_reader.join(1)  # its last words: stdout's end can be read before stderr's
        return {"data": _b64.b64encode(data).decode(), "more": bool(self.buf), "ended": ended, "code": code,
                "stderr": self.err[-2000:].decode("utf-8", "replace") if ended else ""}

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(1)
        except Exception:
            pass
        try:
            _os.killpg(self.proc.pid, _sig.SIGKILL)
        except OSError:
            pass
        self.proc.wait()

try:
    _toolgym_mcp
except NameError:
    _toolgym_mcp = {}

def _toolgym_mcp_call(token, op, *args):
    server = _toolgym_mcp.get(token)
    if server is None:
        return {"gone": True}
    if op == "stop":
        _toolgym_mcp.pop(token).stop()
        return {"stopped": True}
    return server.exchange(*args)
"""


class ServerGone(ToolExecutionError):
    """The sandbox no longer runs the server (the sandbox was reset, or the server was stopped)."""


class SandboxProcess:
    """One MCP server process inside a sandbox, reached through its Python session."""

    def __init__(self, session: Any, token: str, label: str) -> None:
        self.session = session
        self.token = token
        self.label = label
        self.ended = False
        """The server has exited (its stdout closed)."""
        self.exit_code: int | None = None
        self.stderr = ""
        self.sent = False
        """Messages of the current call have reached the server (a retry could repeat the call)."""
        self.failure: Exception | None = None
        """Why the link to the server failed during the last call (``ServerGone``, a cell's error)."""

    @classmethod
    async def start(
        cls,
        sandbox: Any,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        label: str = "the MCP server",
        timeout_s: float = 30.0,
    ) -> SandboxProcess:
        """Start ``argv`` in ``sandbox`` (raises ``ToolExecutionError`` when it cannot be run)."""
        session = await sandbox.python()
        if type(session).__module__.endswith(".inprocess"):
            raise ToolExecutionError(
                f"{label} is not started in an in-process sandbox (the memory test double): it would run "
                "on this host; use the docker or local sandbox backend"
            )
        token = secrets.token_hex(8)
        code = (
            HELPER + f"\n_toolgym_mcp[{token!r}] = _ToolgymMcpServer({list(argv)!r}, {dict(env or {})!r}, "
            f"{cwd!r}, {BUFFER_BYTES})\nprint('started')"
        )
        result = await session.execute(code, timeout=timeout_s)
        if result.error or "started" not in result.stdout:
            raise ToolExecutionError(
                f"{label} could not be started in the sandbox: {result.error or result.output or 'no reply'}"
            )
        return cls(session, token, label)

    async def _cell(self, op: str, *args: Any, timeout_s: float) -> dict[str, Any]:
        call = ", ".join(repr(a) for a in (self.token, op, *args))
        result = await self.session.execute(
            f"import json as _j\nprint(_j.dumps(_toolgym_mcp_call({call})))", timeout=timeout_s
        )
        if result.restarted or (result.error and "NameError" in result.error):
            raise ServerGone(f"{self.label} is no longer running in the sandbox (it was reset)")
        if result.error or result.timed_out:
            raise ToolExecutionError(
                f"the sandbox's link to {self.label} failed: {result.error or 'timed out'}"
            )
        try:
            reply: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ToolExecutionError(f"the sandbox's link to {self.label} sent no reply") from None
        if reply.get("gone"):
            raise ServerGone(f"{self.label} is no longer running in the sandbox")
        return reply

    async def exchange(self, out: str, *, wait_s: float, fresh: bool = False) -> tuple[bytes, bool, bool]:
        """Write ``out`` to the server; ``(bytes it wrote since, more waiting, it has exited)``."""
        reply = await self._cell("x", out, wait_s, CHUNK_BYTES, fresh, timeout_s=wait_s + 30.0)
        if reply["ended"]:
            self.ended = True
            self.exit_code = reply.get("code")
            self.stderr = reply.get("stderr") or ""
        return base64.b64decode(reply["data"]), bool(reply["more"]), bool(reply["ended"])

    async def stop(self) -> None:
        """End the server (stdin closed, then its process group killed)."""
        try:
            await self._cell("stop", timeout_s=10.0)
        except ToolExecutionError:
            pass

    def exit_note(self) -> str:
        """``exited with code N: <stderr tail>`` for messages, once it has exited."""
        tail = self.stderr.strip().splitlines()[-3:]
        code = "" if self.exit_code is None else f" with code {self.exit_code}"
        return f"{self.label} exited{code}" + (f"; its last stderr: {' | '.join(tail)}" if tail else "")


_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')


@asynccontextmanager
async def sandbox_stdio_client(
    process: SandboxProcess, *, max_message_bytes: int
) -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` for ``ClientSession``, over ``process``'s stdin and stdout."""
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](64)
    pending: set[Any] = set()
    done = anyio.Event()

    async def deliver(line: bytes) -> None:
        try:
            raw = json.loads(line)
            message = mcp_types.jsonrpc_message_adapter.validate_python(raw, by_name=False)
        except ValueError as exc:
            await read_send.send(exc)
            return
        if isinstance(raw, dict) and ("result" in raw or "error" in raw):
            pending.discard(raw.get("id"))
        await read_send.send(SessionMessage(message))

    async def oversized(head: bytes, size: int) -> None:
        found = _ID.search(head)
        if found is None:
            return  # not an answer we can name: the call it answered times out
        request_id = json.loads(found.group(1))
        pending.discard(request_id)
        error = {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": mcp_types.INTERNAL_ERROR,
                "message": f"{process.label} sent a reply of more than {size} bytes, over toolgym's "
                f"limit of {max_message_bytes} bytes a message; ask for less",
            },
        }
        await read_send.send(SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(error)))

    async def pump() -> None:
        async with read_send:
            try:
                await loop()
            finally:
                done.set()

    async def loop() -> None:
        line = bytearray()
        skipped = 0  # bytes of an oversized message dropped so far (0: not dropping)
        head = b""
        fresh = True
        more = False
        while True:
            out: list[str] = []
            if not pending and not more and not fresh:
                try:
                    out.append(_dump(await write_recv.receive()))
                except anyio.EndOfStream:
                    return
            while True:
                try:
                    out.append(_dump(write_recv.receive_nowait()))
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            for text in out:
                sent = json.loads(text)
                if "method" in sent and "id" in sent:
                    pending.add(sent["id"])
            try:
                data, more, ended = await process.exchange(
                    "".join(t + "\n" for t in out), wait_s=0.0 if more or not pending else POLL_S, fresh=fresh
                )
            except ToolExecutionError as exc:
                process.failure = exc
                return  # closing the read stream fails what is in flight
            process.sent = process.sent or bool(out)
            fresh = False
            while data:
                cut = data.find(b"\n")
                piece, data = (data, b"") if cut < 0 else (data[:cut], data[cut + 1 :])
                if skipped:
                    skipped += len(piece)
                elif len(line) + len(piece) > max_message_bytes:
                    head, skipped = bytes(line[:512] + piece[:512]), len(line) + len(piece)
                    line.clear()
                else:
                    line += piece
                if cut < 0:
                    break
                if skipped:
                    await oversized(head, skipped)
                    skipped = 0
                elif line.strip():
                    await deliver(bytes(line))
                line.clear()
            if ended:
                return  # closing the read stream fails what is in flight: the caller reads exit_note()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield read_recv, write_send
        except BaseException:
            tg.cancel_scope.cancel()  # a failed or timed-out call: the caller stops the server
            raise
        else:
            await write_send.aclose()  # the pump finishes the exchange under way, then ends
            with anyio.move_on_after(POLL_S + 5.0):
                await done.wait()
            tg.cancel_scope.cancel()
        finally:
            await write_send.aclose()
            await read_recv.aclose()


def _dump(message: SessionMessage) -> str:
    return message.message.model_dump_json(by_alias=True, exclude_unset=True)
