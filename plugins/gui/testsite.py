"""A small web site on loopback for checking a browser set-up: the GUI tests and benchmark drive it.

Pages: ``/`` (links to the rest), ``/form`` (a text field, a drop-down, a checkbox, a submit
button, a disabled button) submitting to ``/result``, ``/links`` (a link, a link that opens a new
tab, a link to an outside host, an alert), ``/second``, ``/tab``, ``/long`` (a list that grows
when scrolled to its end, and a scrollable box), ``/red`` (a 400 x 300 px red block at the
top-left corner of a white page), ``/slow?s=N`` (answers after N seconds), ``/hang`` (a script
that never ends: the page's renderer stops answering).

Run: ``python -m toolgym.plugins.gui.testsite --port 8000``.
"""

from __future__ import annotations

import argparse
import html
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

RED_BLOCK = (400, 300)
"""Width and height in CSS pixels of ``/red``'s block, drawn from (0, 0)."""


def _page(title: str, body: str, head: str = "") -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{head}</head>"
        f"<body>{body}</body></html>"
    )


_FORM = _page(
    "Order form",
    """
<h1>Order form</h1>
<form action="/result" method="get">
  <label for="q">Query</label> <input id="q" name="q" type="text" placeholder="what to find">
  <label for="colour">Colour</label>
  <select id="colour" name="colour"><option value="r">Red</option><option value="g">Green</option>
    <option value="b">Blue</option></select>
  <label><input type="checkbox" name="gift" value="yes"> Gift wrap</label>
  <button type="submit">Send</button>
  <button type="button" disabled>Not now</button>
</form>""",
)

_LINKS = _page(
    "Links",
    """
<h1>Links</h1>
<p><a href="/second">Second page</a></p>
<p><a href="/tab" target="_blank">Open in new tab</a></p>
<p><a href="http://example.com/">Outside site</a></p>
<p><button onclick="alert('hello from the page'); document.getElementById('said').textContent = 'alerted'">
Alert me</button> <span id="said">quiet</span></p>""",
)

_LONG = _page(
    "Long list",
    """
<h1>Long list</h1>
<div id="box" style="height:120px; width:300px; overflow:auto; border:1px solid #000">
"""
    + "".join(f"<p>Box line {i}</p>" for i in range(1, 21))
    + """</div>
<ol id="items">"""
    + "".join(f"<li style='height:100px'>Item {i}</li>" for i in range(1, 41))
    + """</ol>""",
    head="""<script>
let more = 40;
window.addEventListener('scroll', () => {
  if (more < 50 && window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 200) {
    const list = document.getElementById('items');
    for (let i = 0; i < 5; i++) { more++; const li = document.createElement('li'); li.textContent = 'Item ' + more;
      li.style.height = '100px'; list.appendChild(li); }
  }
});
</script>""",
)

_RED = _page(
    "Red block",
    f"""<div style="position:absolute; left:0; top:0; width:{RED_BLOCK[0]}px;
height:{RED_BLOCK[1]}px; background:#ff0000"></div><p style="position:absolute; top:400px">Below the block</p>""",
    head="<style>html, body {margin:0; background:#ffffff}</style>",
)

_INDEX = _page(
    "toolgym test site",
    "<h1>Test site</h1><ul>"
    + "".join(f"<li><a href='/{p}'>{p}</a></li>" for p in ("form", "links", "long", "red"))
    + "</ul>",
)

_STATIC = {
    "/": _INDEX,
    "/form": _FORM,
    "/links": _LINKS,
    "/long": _LONG,
    "/red": _RED,
    "/second": _page("Second page", "<h1>Second page</h1><p><a href='/links'>Back to links</a></p>"),
    "/tab": _page("Tab page", "<h1>Tab page</h1>"),
    "/hang": _page("Hang", "<h1>Hang</h1><script>while (true) {}</script>"),
    "/late": _page(
        "Late",
        "<h1>Late</h1><p id='state'>loading</p><img src='/slow?s=0.5' alt='slow picture'>"
        "<script>addEventListener('load', () => { document.getElementById('state').textContent = 'loaded'; })"
        "</script>",
    ),
}


def _result(query: dict[str, list[str]]) -> str:
    q = query.get("q", [""])[0]
    colour = {"r": "Red", "g": "Green", "b": "Blue"}.get(query.get("colour", [""])[0], "none")
    gift = "yes" if query.get("gift") else "no"
    return _page(
        "Result", f"<h1>Result</h1><p id='summary'>query={html.escape(q)}; colour={colour}; gift={gift}</p>"
    )


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        status, body = 200, _STATIC.get(url.path)
        if url.path == "/result":
            body = _result(parse_qs(url.query))
        elif url.path == "/slow":
            try:
                time.sleep(min(float(parse_qs(url.query).get("s", ["5"])[0]), 60.0))
            except ValueError:
                pass
            body = _page("Slow page", "<h1>Finally</h1>")
        if body is None:
            status, body = 404, _page("Not found", f"<h1>No page {html.escape(url.path)}</h1>")
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser gave up (a timeout test)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class TestSite:
    """The site on ``host:port`` (0: any free port) in a daemon thread; ``url`` once started."""

    __test__ = False  # not a pytest test class

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="gui-test-site", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> TestSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the browser tools' test site on this machine.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    with TestSite(args.host, args.port) as site:
        print(f"test site at {site.url}/ ; Ctrl-C stops it", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
