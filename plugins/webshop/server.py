"""The WebShop site over HTTP (stdlib ``http.server``, loopback by default), for browser agents.

Pages are the environment's own ``html`` rendering, and every link applies the same rules as a
``click[...]`` in the text environment, so a browser agent and a text agent shop in one store.
The browser's place is in the URL (as on the original site), so reloading and the back button
work:

- ``/s/<session>/`` start page (a session whose name is a number N shops for the goal a text
  episode with seed N gets; any other name is hashed to a goal);
- ``/s/<session>/search?keywords=...&page=N`` results;
- ``/s/<session>/item/<ASIN>?keywords=...&page=N&options=<json>`` item page, ``.../item/<ASIN>/<Sub>``
  its Description / Features / Reviews page;
- ``/s/<session>/buy/<ASIN>?options=<json>`` buys, scores and ends the session;
- ``/s/<session>/state`` the session as JSON (goal, page, ``done``, ``score``) for harnesses.

Run: ``python -m toolgym.plugins.webshop.server --port 3000`` (``--split``, ``--data``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from .pages import SUB_PAGES, Node, View
from .session import ShopSession, transition
from .shop import Shop, ShopConfig, get_shop


def view_url(session_id: str, view: View) -> str:
    """The URL of ``view`` in session ``session_id`` (the inverse of ``parse_view``)."""
    base = f"/s/{quote(session_id, safe='')}"
    query = {"keywords": " ".join(view.keywords), "page": str(view.page)}
    if view.kind == "start":
        return f"{base}/"
    if view.kind == "results":
        return f"{base}/search?{urlencode(query)}"
    query["options"] = json.dumps(dict(view.options), separators=(",", ":"))
    asin = quote(view.asin or "", safe="")
    if view.kind == "item":
        return f"{base}/item/{asin}?{urlencode(query)}"
    if view.kind == "sub":
        return f"{base}/item/{asin}/{view.sub}?{urlencode(query)}"
    return f"{base}/buy/{asin}?{urlencode(query)}"


def parse_view(parts: list[str], query: dict[str, list[str]]) -> View | None:
    """URL path parts after ``/s/<session>`` and its query → the view, or None if malformed."""
    keywords = (
        tuple((query.get("keywords", [""])[0]).lower().split(" ")) if query.get("keywords", [""])[0] else ()
    )
    try:
        page = max(1, int(query.get("page", ["1"])[0]))
        options = json.loads(query.get("options", ["{}"])[0] or "{}")
    except (ValueError, json.JSONDecodeError):
        return None
    if not isinstance(options, dict):
        return None
    chosen = tuple((str(k), str(v)) for k, v in options.items())
    if not parts:
        return View()
    if parts[0] == "search" and len(parts) == 1:
        return View("results", keywords, page) if keywords else View()
    if parts[0] == "item" and len(parts) == 2:
        return View("item", keywords, page, parts[1], chosen)
    if parts[0] == "item" and len(parts) == 3 and parts[2] in SUB_PAGES:
        return View("sub", keywords, page, parts[1], chosen, parts[2])
    if parts[0] == "buy" and len(parts) == 2:
        return View("done", keywords, page, parts[1], chosen)
    return None


class WebShopServer:
    """Serves one shop to any number of browser sessions. ``start()`` runs it in a thread."""

    def __init__(self, shop: Shop, *, split: str = "test", host: str = "127.0.0.1", port: int = 0) -> None:
        self.shop = shop
        self.split = split
        self.indices = shop.split(split)
        self.sessions: dict[str, ShopSession] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def goal_for(self, session_id: str) -> int:
        """Goal index of a session: numbers as episode seeds, other names by hash."""
        n = (
            int(session_id)
            if session_id.isdigit()
            else int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest(), "big")
        )
        return self.indices[n % len(self.indices)]

    def session(self, session_id: str, *, restart: bool = False) -> ShopSession:
        with self._lock:
            s = self.sessions.get(session_id)
            if s is None or restart:
                s = self.sessions[session_id] = ShopSession(self.shop, self.goal_for(session_id))
            return s

    def start(self) -> WebShopServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="webshop-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> WebShopServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- requests --------------------------------------------------------------------------------

    def handle(self, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for a GET of ``path``."""
        split = urlsplit(path)
        parts = [p for p in split.path.split("/") if p]
        if not parts:
            return HTTPStatus.OK, "text/html; charset=utf-8", _index(self)
        if parts[0] != "s" or len(parts) < 2:
            return (
                HTTPStatus.NOT_FOUND,
                "text/plain; charset=utf-8",
                "not found: pages live under /s/<session>/\n",
            )
        sid, rest = parts[1], parts[2:]
        if rest == ["state"]:
            session = self.session(sid)
            with self._lock:
                body = json.dumps(
                    {
                        **session.describe(),
                        "goal_asin": session.goal["asin"],
                        "reward_info": session.reward_info,
                    }
                )
            return HTTPStatus.OK, "application/json", body
        view = parse_view(rest, parse_qs(split.query))
        if view is None:
            return HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", f"no such page: {split.path}\n"
        session = self.session(sid, restart=view.kind == "start")
        with self._lock:
            return self._render(sid, session, view)

    def _render(self, sid: str, session: ShopSession, view: View) -> tuple[int, str, str]:
        if view.asin is not None and view.asin not in self.shop.catalog.by_asin:
            return HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", f"no product {view.asin}\n"
        if view.kind == "done":
            if not session.done:
                session.view = View("item", view.keywords, view.page, view.asin, view.options)
                session.buy()
        elif not session.done:
            if view.kind == "item" and view.asin:
                session.visited.add(view.asin)
            session.view = view
        page = session.render(session.view if view.kind == "done" else view)

        def href(node: Node) -> str:
            target = transition(view, node)
            return view_url(sid, target) if target is not None else "#"

        search_action = f"/s/{quote(sid, safe='')}/search"
        return HTTPStatus.OK, "text/html; charset=utf-8", page.html(href, search_action)


def _index(server: WebShopServer) -> str:
    links = "".join(f'<li><a id="session-{i}" href="/s/{i}/">session {i}</a></li>' for i in range(5))
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>WebShop</title></head><body>'
        f"<h1>WebShop</h1><p>{len(server.shop.catalog)} products, {len(server.indices)} goals in split "
        f"{server.split!r}. Open /s/&lt;session&gt;/ to shop; a numeric session N gets the goal of seed N.</p>"
        f"<ul>{links}</ul></body></html>"
    )


def _handler_for(server: WebShopServer) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                status, ctype, body = server.handle(self.path)
            except Exception as exc:  # keep serving; report the failure to this client
                status, ctype, body = (
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    f"error: {exc}\n",
                )
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the WebShop site on this machine.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--split", default="test", help="goals to serve: train, eval, test or all")
    parser.add_argument(
        "--data", default="builtin", help="'builtin', 'env' or a folder with the published files"
    )
    parser.add_argument("--synthetic-goals", action="store_true", help="use synthetic instead of human goals")
    args = parser.parse_args(argv)
    shop = get_shop(ShopConfig(data=args.data, human_goals=not args.synthetic_goals))
    server = WebShopServer(shop, split=args.split, host=args.host, port=args.port)
    print(f"WebShop at {server.url}/ ({len(shop.catalog)} products); Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
