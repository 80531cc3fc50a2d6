"""Serving an ASGI app (FastAPI) with uvicorn: in the foreground, or in a background thread on a
loopback port — what toolgym's test model server and retrieval server both use.

FastAPI and uvicorn are imported only when a server starts (``pip install 'toolgym[dev]'`` or
``toolgym[search]``).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from toolgym.core.errors import ConfigError


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket whose accepted connections send without delay.

    Accepted sockets inherit TCP_NODELAY from the listener on Linux. Without it, a response that
    uvicorn writes in two parts (headers, then body) waits for the client's delayed ACK: about
    40 ms added to every request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


def uvicorn_server(app: Any, *, purpose: str = "serving") -> Any:
    try:
        import uvicorn
    except ImportError as exc:
        raise ConfigError(
            f"{purpose} needs uvicorn: pip install 'toolgym[dev]' (or pip install fastapi uvicorn)"
        ) from exc
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30)
    return uvicorn.Server(config)


def serve_forever(app: Any, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``app`` in the foreground until interrupted."""
    server = uvicorn_server(app)
    sock = listening_socket(host, port)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


class BackgroundServer:
    """Runs an ASGI app with uvicorn in a daemon thread (``port=0``: any free port).

    Use as a context manager, or ``start()`` / ``stop()``; ``url`` is its address.
    """

    name = "server"

    def __init__(self, app: Any = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self.port = app, host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def make_app(self) -> Any:
        """The app to serve (subclasses build theirs here)."""
        return self.app

    def start(self, timeout_s: float = 60.0) -> BackgroundServer:
        self._server = uvicorn_server(self.make_app(), purpose=f"the {self.name}")
        sock = listening_socket(self.host, self.port)
        self.port = sock.getsockname()[1]

        def run() -> None:
            try:
                self._server.run(sockets=[sock])
            except BaseException as exc:  # reported by start()
                self._error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name=f"toolgym-{self.name}-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the {self.name} did not start: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the {self.name} did not start within {timeout_s:g}s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> BackgroundServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
