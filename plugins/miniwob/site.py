"""The MiniWoB++ task pages, served as shipped by the ``miniwob`` package (Farama), on loopback.

The pages (``miniwob/<task>.html``) load ``core/core.js`` and friends by relative paths, so the
package's ``html/`` folder is served as it is, read-only, by one server per process. The browser
sandbox of a MiniWoB episode reaches exactly this server: its sandbox kind (``miniwob``) is the
browser image with a network allowlist of this server's address and nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from toolgym import DEFAULT_PROFILES, ConfigError, register_profile
from toolgym.plugins.gui import network_allowlist

SANDBOX_KIND = "miniwob"
"""The sandbox kind of MiniWoB episodes: the browser image, egress only to the task server."""


@functools.cache
def html_dir() -> Path:
    """The ``html/`` folder of the installed ``miniwob`` package (found without importing it:
    the package's own import pulls in gymnasium and selenium, which serving needs neither of)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the MiniWoB++ environment needs the `miniwob` package: pip install 'toolgym[gui]'")
    root = Path(next(iter(spec.submodule_search_locations))) / "html"
    if not (root / "core" / "core.js").is_file():
        raise ConfigError(
            f"the installed miniwob package has no html/core/core.js under {root}; reinstall it"
        )
    return root


class _Handler(SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def list_directory(self, path: Any) -> None:  # type: ignore[override]
        self.send_error(404, "no listing")
        return None

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MiniWoBSite:
    """A read-only HTTP server of the MiniWoB++ pages on loopback, in a daemon thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        handler = functools.partial(_Handler, directory=str(html_dir()))
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="miniwob-site", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}" if isinstance(host, str) else f"http://{host.decode()}:{port}"

    def task_url(self, task: str) -> str:
        return f"{self.url}/miniwob/{task}.html"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_lock = threading.Lock()
_shared: MiniWoBSite | None = None


def shared_site() -> MiniWoBSite:
    """This process's MiniWoB server, started on first use; its sandbox profile is registered then
    (the browser profile with an allowlist of exactly this server), before any sandbox is made."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = MiniWoBSite()
            browser = DEFAULT_PROFILES["browser"]
            register_profile(
                SANDBOX_KIND,
                dataclasses.replace(
                    browser, image=browser.image_for("browser"), network=network_allowlist(_shared.url)
                ),
            )
        return _shared
