"""Egress for sandboxes with a network allowlist: a TCP listener on the sandbox's loopback that
forwards each connection to the host's filtering proxy, over a UNIX socket in the state directory
(``start``) or as a tunnel over the agent's own channel (``TunnelHub``, for engines on other
machines; frames in ``protocol``).

The sandbox itself has no network (only loopback), so the proxy named in ``HTTP(S)_PROXY`` is
the only way out, and the host decides which hosts it reaches. Stdlib only.
"""

from __future__ import annotations

import base64
import collections
import itertools
import socket
import threading
from collections.abc import Callable
from typing import Any

import protocol


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _serve_one(client: socket.socket, unix_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(unix_path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _accept_loop(server: socket.socket, unix_path: str) -> None:
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return
        try:
            threading.Thread(target=_serve_one, args=(client, unix_path), daemon=True).start()
        except (
            RuntimeError
        ):  # no thread to be had (pids or memory limit): this connection fails, not the port
            client.close()


def start(port: int, unix_path: str) -> None:
    """Listen on 127.0.0.1:``port`` in a background thread."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    threading.Thread(target=_accept_loop, args=(server, unix_path), daemon=True).start()


_EOF = b"eof"  # markers in a tunnel's outgoing queue, told apart from data by identity
_CLOSE = b"close"
Send = Callable[[dict[str, Any]], None]


class _Tunnel:
    """One accepted connection, relayed as frames: ``pump_in`` (client -> host, within the
    host's window) and ``pump_out`` (host -> client, acknowledging what the client took)."""

    def __init__(self, tid: int, sock: socket.socket, hub: TunnelHub) -> None:
        self.tid, self.sock, self.hub = tid, sock, hub
        self.cond = threading.Condition()
        self.out: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.unacked = 0
        self.closed = False

    def on_frame(self, ev: str, frame: dict[str, Any]) -> None:
        """A frame from the host; never blocks (called from the agent's read loop)."""
        with self.cond:
            if ev == "data":
                data = base64.b64decode(frame["data_b64"])
                self.queued += len(data)
                if self.queued > protocol.TUNNEL_BUFFER_CAP:
                    self.out.clear()
                    self.out.append(_CLOSE)  # the host overran the window: drop the tunnel
                else:
                    self.out.append(data)
            elif ev == "ack":
                self.unacked -= int(frame["n"])
            elif ev == "eof":
                self.out.append(_EOF)
            elif ev == "close":
                self.out.append(_CLOSE)
            self.cond.notify_all()

    def pump_out(self) -> None:
        consumed = 0
        while True:
            with self.cond:
                while not self.out and not self.closed:
                    self.cond.wait()
                if self.closed:
                    return
                item = self.out.popleft()
                if item is not _EOF and item is not _CLOSE:
                    self.queued -= len(item)
            if item is _CLOSE:
                self.finish(tell_host=False)
                return
            try:
                if item is _EOF:
                    self.sock.shutdown(socket.SHUT_WR)
                    continue
                self.sock.sendall(item)
            except OSError:
                self.finish(tell_host=True)
                return
            consumed += len(item)
            if consumed >= protocol.TUNNEL_WINDOW // 4:
                self.hub.send({"tun": self.tid, "ev": "ack", "n": consumed})
                consumed = 0

    def pump_in(self) -> None:
        while True:
            try:
                data = self.sock.recv(protocol.TUNNEL_CHUNK)
            except OSError:
                self.finish(tell_host=True)
                return
            with self.cond:
                while data and self.unacked >= protocol.TUNNEL_WINDOW and not self.closed:
                    self.cond.wait()
                if self.closed:
                    return
                self.unacked += len(data)
            if not data:
                self.hub.send({"tun": self.tid, "ev": "eof"})
                return
            self.hub.send_frame(protocol.encode_tunnel_data(self.tid, data))

    def finish(self, *, tell_host: bool) -> None:
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
        if tell_host:
            self.hub.send({"tun": self.tid, "ev": "close"})
        for step in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                step()
            except OSError:
                pass
        self.hub.forget(self.tid)


class TunnelHub:
    """The proxy port of a sandbox whose egress crosses the agent's channel: each connection
    becomes a tunnel (``open``, then frames both ways); ``send`` puts one message on the channel,
    ``send_frame`` one frame already encoded (``data``)."""

    def __init__(self, send: Send, send_frame: Callable[[bytes], None] | None = None) -> None:
        self.send = send
        self.send_frame = send_frame or (
            lambda frame: send(protocol.decode_body(frame[protocol.HEADER.size :]))
        )
        self.tunnels: dict[int, _Tunnel] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.slots = threading.BoundedSemaphore(protocol.MAX_TUNNELS)

    def start(self, port: int) -> None:
        """Listen on 127.0.0.1:``port`` in a background thread."""
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(64)
        threading.Thread(target=self._accept_loop, args=(server,), daemon=True).start()

    def _accept_loop(self, server: socket.socket) -> None:
        while True:
            self.slots.acquire()  # at the cap, connections wait in the backlog
            try:
                client, _ = server.accept()
            except OSError:
                return
            tunnel = _Tunnel(next(self.ids), client, self)
            with self.lock:
                self.tunnels[tunnel.tid] = tunnel
            self.send({"tun": tunnel.tid, "ev": "open"})
            try:
                threading.Thread(target=tunnel.pump_out, daemon=True).start()
                threading.Thread(target=tunnel.pump_in, daemon=True).start()
            except RuntimeError:  # no thread to be had (pids or memory limit): this connection only fails
                tunnel.finish(tell_host=True)

    def dispatch(self, frame: dict[str, Any]) -> None:
        """A tunnel frame from the host (frames of tunnels already gone are dropped)."""
        with self.lock:
            tunnel = self.tunnels.get(frame.get("tun", -1))
        if tunnel is None:
            return
        try:
            tunnel.on_frame(str(frame.get("ev")), frame)
        except (KeyError, ValueError, TypeError):
            tunnel.finish(tell_host=True)

    def forget(self, tid: int) -> None:
        with self.lock:
            if self.tunnels.pop(tid, None) is not None:
                self.slots.release()

    def close_all(self) -> None:
        """End every tunnel (a reset: nothing of an episode's connections survives it)."""
        with self.lock:
            open_now = list(self.tunnels.values())
        for tunnel in open_now:
            tunnel.finish(tell_host=True)
