"""The browser driver: runs inside the browser sandbox's persistent Python session, never on the host.

The host tools send this file's source (with ``axtree.py``, ``pagejs.py`` and ``pwstack.py``) into the session
once per sandbox; after that each tool call is one cell, ``_toolgym_browser.call(op, args_json,
limits_json)``, whose value is a JSON reply. One headless Chromium (Playwright's sync API, ``executable_path`` from the config,
Debian's ``/usr/lib/chromium/chromium-headless-shell`` in the ``toolgym/sandbox-browser`` image) and its tabs live in
the session between calls, so a page keeps its state across an episode. Each episode gets its own
browser context (Playwright's ``new_context``: Chromium's off-the-record profile, nothing on disk);
between episodes of a pooled sandbox ``renew`` closes it and opens the next episode's, and the
browser keeps running (``toolgym.plugins.gui.tools``).

Network: the sandbox has no interface. When its profile has an allowlist, ``HTTP_PROXY`` names
a loopback port the agent forwards to the host's filtering proxy; Chromium sends everything
there, loopback URLs included (Playwright adds ``<-loopback>`` to the bypass list), so
``http://127.0.0.1:PORT`` reaches the host's server when ``127.0.0.1:PORT`` is allowed.

Site names: an environment opening its own site (``goto`` with ``site=[prefix, name]``) names it for the
episode: observations, errors and replies show URLs under ``prefix`` (the host's server, whose port
differs in every process; WebShop's also holds the episode's session) under ``name``, and the agent's
URLs under ``name`` open ``prefix``'s. The model's tokens then do not depend on which port the server got.

Replies: ``{"ok", "error", "text", "screenshot", "url", "title", "tab", "tabs", "truncated"}``
(``"fatal": true`` when Chromium could not start);
``text`` is the observation (tabs, page, scroll position, the accessibility tree) and comes
with errors too, so the model sees where it is. Times in the config are milliseconds.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import toolgym_gui_axtree as axtree  # shipped beside this module by the host
import toolgym_gui_pagejs as pagejs
import toolgym_gui_pwstack as pwstack
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import sync_playwright

pwstack.install()  # Playwright's per-call stack capture costs more than most calls themselves

PROXY_DENIED = "network allowlist"
PROXY_UNREACHABLE = "toolgym sandbox proxy: cannot reach"
SHOT = ".toolgym-browser/screenshot.png"
RENEW_SETTLE_S = 2.0
"""How long ``renew`` waits for the closed contexts' workers to go: a service worker's target can
outlive its context by a few ms (the headless shell stops it after the context's close returns)."""
_LISTED = re.compile(r"^\s*\[(\d+)\]", re.MULTILINE)
"""An element line of the observation: ``[id] role 'name'``, indented by depth."""
KEY_HINT = (
    "use key names such as Enter, Tab, Escape, Backspace, ArrowDown, PageDown, Home, or "
    "combinations such as Control+A"
)


class BrowserError(Exception):
    """A failed action, worded for the model."""


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _loaded(page: Any) -> bool:
    """Whether ``page``'s main frame has fired "load", from Playwright's own record of it:
    ``page.wait_for_load_state("load")`` sends three protocol messages even when it need not wait.
    False when this Playwright keeps no such record (the caller then waits the public way)."""
    states = getattr(getattr(page.main_frame, "_impl_obj", None), "_load_states", None)
    return isinstance(states, set) and "load" in states


@functools.cache
def _send_takes_timeout(send: Any) -> bool:
    """Whether Playwright's internal ``CDPSession.send`` takes a timeout (newer Playwright does),
    asked once per Playwright."""
    return "timeout" in inspect.signature(send).parameters


def _send_both(cdp: Any, first: tuple[str, Any], second: tuple[str, Any]) -> tuple[Any, Any]:
    """Two DevTools commands on one session, sent together: Chromium answers them in order, and
    the caller waits for one round trip instead of two (Playwright's sync API has no public way
    to have two requests in flight; without its internals, they go one after the other)."""
    impl, sync = getattr(cdp, "_impl_obj", None), getattr(cdp, "_sync", None)
    if impl is None or sync is None:
        return cdp.send(*first), cdp.send(*second)

    more = (None,) if _send_takes_timeout(type(impl).send) else ()

    async def both() -> tuple[Any, Any]:
        return await asyncio.gather(
            impl.send(*first, *more), impl.send(*second, *more), return_exceptions=True
        )

    one, two = sync(both())
    for answer in (one, two):  # both are awaited, so neither failure goes unretrieved
        if isinstance(answer, BaseException):
            raise answer
    return one, two


@dataclass
class _Tree:
    """An observation's accessibility tree as read: whose page, its marking (``pagejs.MARK_JS``'s
    ``gen``), the nodes by node id, the element ids by backend node id."""

    page: Any
    gen: str
    nodes: dict[str, Any]
    ids: dict[int, str]


class Driver:
    """One browser with its tabs; ``call`` is the only entry point."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.root = os.getcwd()
        self.pages: list[Any] = []
        self.active = 0
        self.notes: list[str] = []
        self._opened: list[Any] = []
        self._nav: dict[Any, tuple[int, str]] = {}
        self._cdp: dict[Any, Any] = {}
        self._pw: Any = None
        self.browser: Any = None
        self.context: Any = None
        self.limits: dict[str, Any] = {"action_ms": 5000, "nav_ms": 15000}
        self.shot: str | None = None
        self._snap: dict[str, Any] | None = None
        """``op_snapshot``'s request: a screenshot taken after the observation (marks need its ids)."""
        self._view: tuple[Any, dict[str, Any]] | None = None
        """(page, what MARK_JS answered) when an action's settling already marked that page."""
        self.env_page: Any = None
        """The environment's own page (see ``evaluate``), whichever tab is active."""
        self.frame: dict[str, Any] | None = None
        """Where the latest ``op_snapshot`` image lies on the page (see ``_frame``); the coordinate
        operations map through it."""
        self._box: dict[str, float] | None = None
        self._listed: tuple[Any, frozenset[int]] | None = None
        """(page, the element ids in its latest observation's tree): an action on one of them skips
        the look-up round trip (``_element``)."""
        self._unverified: int | None = None
        """The id ``_element`` took as there without asking the page, in this call."""
        self.settled_by = ""
        """What the latest action's settling waited for: ``frame``, ``task``, ``none`` (nothing was
        queued), or ``navigation`` (the page navigated meanwhile)."""
        self._tree: _Tree | None = None
        """The latest observation's accessibility tree, kept for the next one after typing (``_patched``)."""
        self._calm: dict[str, Any] | None = None
        """This call's settling after typing: ``CALM_JS``'s answer and the field's id, or None."""
        self.observed_by = ""
        """How the latest observation read the tree: ``tree`` (the whole of it) or ``field`` (only
        the typed field and its kin, the rest kept from the observation before; ``_patched``)."""
        self.check_patched = False
        """Tests: read the whole tree as well after each ``field`` observation and fail on any difference."""
        self.sites: list[tuple[str, str]] = []
        """The episode's named sites, ``(prefix, name)`` (see the module docstring); renew forgets them."""
        self.shortcuts = True
        """Save round trips where the answer is known (an id the latest observation listed, a page
        Playwright saw load, the two snapshot commands sent together); False takes the long way
        everywhere, for tests that check the observation comes out the same either way."""

    # -- set-up ---------------------------------------------------------------------------------

    def _start(self) -> None:
        cfg = self.config
        self._pw = sync_playwright().start()
        proxy = os.environ.get("HTTP_PROXY")
        self.browser = self._pw.chromium.launch(
            executable_path=cfg["chromium"],
            headless=True,
            args=list(cfg["args"]),
            timeout=cfg["launch_ms"],
            proxy={"server": proxy} if proxy else None,
        )
        self._new_context()

    def _new_context(self) -> None:
        cfg = self.config
        self.context = self.browser.new_context(
            viewport={"width": cfg["width"], "height": cfg["height"]},
            device_scale_factor=1,
            locale="en-US",
            timezone_id="UTC",
            accept_downloads=False,
            service_workers="block",
            reduced_motion="reduce",
        )
        self.context.add_init_script(pagejs.POPUP_HOOK_JS)
        self.context.on("page", self._on_page)
        self.context.new_page()
        self._opened.clear()
        self.frame, self._listed, self._tree = None, None, None

    def close(self) -> None:
        """Stop the browser and Playwright (the next call starts them again)."""
        try:
            if self._pw is not None:
                self._pw.stop()
        except PlaywrightError:
            pass
        self._pw = self.browser = self.context = self.env_page = self.frame = None
        self.pages, self.active, self._cdp, self._nav = [], 0, {}, {}

    def renew(self) -> bool:
        """Between two episodes (the sandbox's reset runs this in the kept session): close every
        browser context, check that Chromium holds none and no page or worker, and forget the
        episode's tabs; the next episode's first call opens its context (not here: the sandbox
        goes back to the pool sooner). True when the browser is ready for the next episode; False
        (the reset then kills this session and the browser with it) when it crashed, never
        started, or does not answer as it should."""
        browser = self.browser
        self.env_page, self.pages, self.active, self._cdp, self._nav = None, [], 0, {}, {}
        self.frame, self._listed, self.sites, self._tree = None, None, [], None
        self._opened, self.context = [], None
        if browser is None or not browser.is_connected():
            return False
        try:
            for context in list(browser.contexts):
                context.close()
            cdp = browser.new_browser_cdp_session()
            try:
                deadline = time.monotonic() + RENEW_SETTLE_S
                while True:
                    contexts = cdp.send("Target.getBrowserContexts")["browserContextIds"]
                    targets = [
                        t for t in cdp.send("Target.getTargets")["targetInfos"] if t["type"] != "browser"
                    ]
                    if not (contexts or targets or browser.contexts):
                        return True
                    if contexts or browser.contexts or time.monotonic() > deadline:
                        return False  # a context that outlived its close, or a worker still running
                    time.sleep(0.02)
            finally:
                cdp.detach()
        except PlaywrightError:
            return False

    def _on_page(self, page: Any) -> None:
        page.set_default_timeout(self.limits["action_ms"])
        page.set_default_navigation_timeout(self.limits["nav_ms"])
        self.pages.append(page)
        self._opened.append(page)
        page.on("close", self._on_close)
        page.on("dialog", self._on_dialog)
        page.on("response", lambda response: self._on_response(page, response))

    def _on_close(self, page: Any) -> None:
        if page in self.pages:
            index = self.pages.index(page)
            self.pages.remove(page)
            if self.active > index or self.active >= len(self.pages):
                self.active = max(self.active - 1, 0)
        self._cdp.pop(page, None)
        self._nav.pop(page, None)

    def _on_dialog(self, dialog: Any) -> None:
        self.notes.append(f"A dialog ({dialog.type}) said {axtree.clean(dialog.message)!r}; it was accepted.")
        dialog.accept()

    def _on_response(self, page: Any, response: Any) -> None:
        if response.request.is_navigation_request() and response.frame == page.main_frame:
            self._nav[page] = (response.status, response.headers.get("content-type", ""))

    @property
    def page(self) -> Any:
        if not self.pages:
            self.context.new_page()
            self._opened.clear()
            self.active = 0
        return self.pages[self.active]

    # -- the entry point ------------------------------------------------------------------------

    def call(self, op: str, args_json: str, limits_json: str) -> str:
        """Run ``op`` with ``args``; the JSON reply (see the module docstring)."""
        limits = self.limits = json.loads(limits_json)
        self.notes, self.shot, self._view, self._snap, self._unverified = [], None, None, None, None
        self._calm = None
        reply: dict[str, Any] = {"ok": True, "error": None, "screenshot": None}
        if self.context is None:
            try:
                if self.browser is not None and self.browser.is_connected():
                    self._new_context()
                else:
                    self.close()
                    self._start()
            except Exception as exc:  # a missing binary, a crash at start: say so, stay usable
                self.close()
                return json.dumps(
                    {
                        "ok": False,
                        "fatal": True,
                        "text": "",
                        "error": f"Chromium could not start ({self.config['chromium']}): {_first_line(exc)}",
                    }
                )
        try:
            for page in self.pages:
                page.set_default_timeout(limits["action_ms"])
                page.set_default_navigation_timeout(limits["nav_ms"])
            handler = getattr(self, "op_" + op, None)
            if handler is None:
                raise BrowserError(f"unknown browser operation {op!r}")
            handler(**json.loads(args_json))
            self._check_blocked()
        except BrowserError as exc:
            reply.update(ok=False, error=str(exc))
        except PlaywrightTimeoutError as exc:
            reply.update(ok=False, error=f"timed out: {_first_line(exc)}")
        except PlaywrightError as exc:
            reply.update(ok=False, error=self._explain(exc))
        try:
            reply["text"], reply["truncated"] = self._observe(limits["max_chars"])
            if self._snap is not None:
                marks = [int(i) for i in _LISTED.findall(reply["text"])] if self._snap["marks"] else None
                reply["screenshot"] = self._screenshot(False, marks=marks, selector=self._snap["selector"])
                reply["frame"] = self.frame = self._frame(reply["screenshot"], self._snap["scale"])
            elif reply["ok"] and (self.shot or limits.get("screenshot")):
                reply["screenshot"] = self.shot or self._screenshot(False)
        except PlaywrightError as exc:
            reply.update(text=f"(the page cannot be read: {_first_line(exc)})", truncated=False)
        page = self.pages[self.active] if self.pages else None
        title = axtree.clean(self._view[1]["title"], 100) if self._view and self._view[0] is page else None
        reply.update(
            url=page.url if page else "",
            tab=self.active,
            tabs=len(self.pages),
            title=title if title is not None else self._title(page) if page else "",
        )
        for key in ("text", "error", "url"):
            if reply.get(key):
                reply[key] = self._shown(reply[key])
        return json.dumps(reply)

    # -- site names -------------------------------------------------------------------------------

    def _name_site(self, prefix: str, name: str) -> None:
        for url in (prefix, name):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
                raise BrowserError(
                    f"a site's prefix and name must be http(s) URLs without a query, got {url!r}"
                )
        prefix, name = prefix.rstrip("/"), name.rstrip("/")
        self.sites = [(p, n) for p, n in self.sites if p != prefix and n != name]  # the latest naming wins
        self.sites.append((prefix, name))

    def _shown(self, text: str) -> str:
        """``text`` with every URL under a named site's prefix written under its name."""
        for prefix, name in self.sites:
            text = re.sub(re.escape(prefix) + r"(?![0-9A-Za-z_.~-])", name.replace("\\", r"\\"), text)
        return text

    def _real(self, url: str) -> str:
        """The address ``url`` names: under a site's name, the same path under its prefix."""
        for prefix, name in self.sites:
            if url == name or url.startswith((name + "/", name + "?", name + "#")):
                return prefix + url[len(name) :]
        return url

    def _explain(self, exc: PlaywrightError) -> str:
        text = _first_line(exc)
        if "ERR_TUNNEL_CONNECTION_FAILED" in text:
            return (
                f"{text}: the host is not in this browser sandbox's network allowlist, or it does not answer"
            )
        if any(
            code in text
            for code in (
                "ERR_NAME_NOT_RESOLVED",
                "ERR_PROXY_CONNECTION_FAILED",
                "ERR_ADDRESS_UNREACHABLE",
                "ERR_INTERNET_DISCONNECTED",
                "ERR_NETWORK_ACCESS_DENIED",
            )
        ):
            return f"{text}: this browser sandbox has no route there (only hosts in its network allowlist are reachable)"
        if "ERR_CONNECTION_REFUSED" in text:
            return f"{text}: nothing is listening at that address"
        return text

    def _check_blocked(self) -> None:
        """Raise when the active tab shows the sandbox proxy's refusal instead of a page."""
        page = self.page
        status, ctype = self._nav.pop(page, (200, ""))
        if status not in (403, 502) or not ctype.startswith("text/plain"):
            return
        body = page.evaluate("() => document.body ? document.body.innerText : ''")
        where = urlsplit(page.url)
        host = f"{where.hostname}:{where.port or (443 if where.scheme == 'https' else 80)}"
        if PROXY_DENIED in body:
            raise BrowserError(
                f"blocked: {host} is not in this browser sandbox's network allowlist; "
                "only the environment's own sites can be opened"
            )
        if PROXY_UNREACHABLE in body:
            raise BrowserError(f"the server at {host} does not answer")

    # -- observation ----------------------------------------------------------------------------

    def _title(self, page: Any) -> str:
        try:
            return axtree.clean(page.title(), 100)
        except PlaywrightError:
            return ""

    def _session(self, page: Any) -> Any:
        if page not in self._cdp:
            self._cdp[page] = self.context.new_cdp_session(page)
        return self._cdp[page]

    def _observe(self, max_chars: int) -> tuple[str, bool]:
        page = self.page
        if self._view is not None and self._view[0] is page:
            view = self._view[1]
        else:
            try:
                view = page.evaluate(pagejs.MARK_JS)
            except PlaywrightError:  # the document changed under us: wait for the new one once
                page.wait_for_load_state("domcontentloaded")
                view = page.evaluate(pagejs.MARK_JS)
            self._view = (page, view)
        cdp = self._session(page)
        kept, self._tree = self._tree, None
        nodes = self._patched(cdp, page, kept) if self.shortcuts else None
        if nodes is None:
            self.observed_by = "tree"
            nodes, ids = self._whole_tree(cdp)
        else:
            self.observed_by, ids = "field", kept.ids if kept is not None else {}
            if self.check_patched:
                whole = self._whole_tree(cdp)
                got, want = axtree.render(nodes.values(), ids), axtree.render(whole[0].values(), whole[1])
                if got != want:
                    raise AssertionError(f"patched tree differs from the whole one:\n{got}\n---\n{want}")
        if view.get("gen"):
            self._tree = _Tree(page, str(view["gen"]), nodes, ids)
        lines = axtree.render(nodes.values(), ids, scrollable=set(view["scrollable"]))
        self._listed = (page, frozenset(int(i) for i in _LISTED.findall("\n".join(lines))))
        head = [*self.notes]
        if len(self.pages) > 1:
            titles = [axtree.clean(view["title"], 100) if p is page else self._title(p) for p in self.pages]
            head += [
                f"Tab {i}{' (active)' if i == self.active else ''}: {titles[i]!r} {p.url}"
                for i, p in enumerate(self.pages)
            ]
        head.append(f"URL: {page.url}")
        bottom = max(view["sh"], view["y"] + view["h"])
        head.append(
            f"Scroll: showing y {view['y']}-{view['y'] + view['h']} of {bottom} px"
            + (
                f", x {view['x']}-{view['x'] + view['w']} of {view['sw']} px"
                if view["sw"] > view["w"]
                else ""
            )
        )
        return axtree.cap_lines(head + lines, max_chars)

    def _whole_tree(self, cdp: Any) -> tuple[dict[str, Any], dict[int, str]]:
        """The page's accessibility tree (node id → node) and element ids (backend node id → id)."""
        dom: tuple[str, Any] = ("DOMSnapshot.captureSnapshot", {"computedStyles": []})
        tree: tuple[str, Any] = ("Accessibility.getFullAXTree", None)
        snapshot, ax = _send_both(cdp, dom, tree) if self.shortcuts else (cdp.send(*dom), cdp.send(*tree))
        nodes = {n["nodeId"]: n for n in ax["nodes"] if "nodeId" in n}
        return nodes, axtree.ids_from_snapshot(snapshot)

    def _patched(self, cdp: Any, page: Any, kept: _Tree | None) -> dict[str, Any] | None:
        """After typing into a field of a page on which nothing else changed since its latest
        observation (the settling's ``calm``, see ``pagejs.CALM_JS``): that observation's tree with
        the field, its children, ancestors and siblings read afresh, and the element that had the
        focus before; the field's deeper descendants (the text of its value, which only repeats
        it) are left out. Two commands in one round trip instead of the whole tree's larger one.
        None where it cannot be done so (the caller reads the whole tree)."""
        calm = self._calm
        if calm is None or kept is None or kept.page is not page or kept.gen != calm["gen"]:
            return None
        backend = {element: node for node, element in kept.ids.items()}
        field = backend.get(str(calm["field"]))
        before = calm["focus"]
        if field is None or (before is not None and before != str(calm["field"]) and before not in backend):
            return None
        asks = [("Accessibility.getPartialAXTree", {"backendNodeId": field, "fetchRelatives": True})]
        if before is not None and before != str(calm["field"]):
            asks.append(
                (
                    "Accessibility.getPartialAXTree",
                    {"backendNodeId": backend[before], "fetchRelatives": False},
                )
            )
        replies = _send_both(cdp, asks[0], asks[1]) if len(asks) == 2 else (cdp.send(*asks[0]),)
        fresh = [n for reply in replies for n in reply.get("nodes", []) if "nodeId" in n]
        own = [n for n in fresh if n.get("backendDOMNodeId") == field]
        if len(own) != 1 or own[0]["nodeId"] not in kept.nodes:
            return None
        nodes = dict(kept.nodes)
        gone = list(kept.nodes[own[0]["nodeId"]].get("childIds", []))
        while gone:  # the field's descendants as they were
            node = nodes.pop(gone.pop(), None)
            if node is not None:
                gone.extend(node.get("childIds", []))
        for node in fresh:
            if node["nodeId"] not in nodes and node.get("parentId") != own[0]["nodeId"]:
                return None  # a node the kept tree did not have: something else changed after all
            nodes[node["nodeId"]] = node
        for node in fresh:
            if node.get("parentId") != own[0]["nodeId"] and any(
                c not in nodes for c in node.get("childIds", [])
            ):
                return None
        return nodes

    def _screenshot(
        self, full_page: bool, *, marks: list[int] | None = None, selector: str | None = None
    ) -> str:
        path = os.path.join(self.root, SHOT)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        page = self.page
        if marks:
            page.evaluate(pagejs.MARKS_JS, marks)
        self._box = {"x": 0.0, "y": 0.0}
        try:
            region = page.locator(selector).first if selector else None
            if region is not None and region.count() and region.is_visible():
                region.screenshot(path=path, animations="disabled")
                box = region.bounding_box()  # after the screenshot, which scrolls it into view
                if box is not None:
                    self._box = {"x": float(box["x"]), "y": float(box["y"])}
            else:
                page.screenshot(path=path, full_page=full_page, animations="disabled")
        finally:
            if marks:
                page.evaluate(pagejs.UNMARKS_JS)
        return SHOT

    def _frame(self, shot: str, scale: float) -> dict[str, Any]:
        """Where the screenshot ``shot`` lies on the page: its top-left corner in the viewport's
        CSS pixels (``left``, ``top``), its size as taken (``png_width``, ``png_height``: CSS
        pixels, the device scale factor being 1) and as shown to the model (``width``,
        ``height``: times ``scale``, which the host resizes it to)."""
        with open(os.path.join(self.root, shot), "rb") as f:
            header = f.read(24)
        png_w, png_h = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
        box = self._box or {"x": 0.0, "y": 0.0}
        return {
            "left": box["x"],
            "top": box["y"],
            "png_width": png_w,
            "png_height": png_h,
            "width": max(1, round(png_w * float(scale))),
            "height": max(1, round(png_h * float(scale))),
        }

    def _point(self, x: Any, y: Any) -> tuple[float, float]:
        """The viewport point (CSS pixels) of pixel (``x``, ``y``) of the latest screenshot the
        environment showed. Refuses what is not a whole number, a point when no screenshot was
        shown in this browser context, and one outside that screenshot or the viewport: a
        coordinate reaches only the page as shown, never the browser around it."""
        if type(x) is not int or type(y) is not int:
            raise BrowserError(f"x and y must be whole numbers of screenshot pixels, got {x!r}, {y!r}")
        frame = self.frame
        if frame is None:
            raise BrowserError(
                "no screenshot has been shown in this browser yet, so there is nothing to point at; "
                "act by element id"
            )
        view = self.page.viewport_size or {"width": self.config["width"], "height": self.config["height"]}
        width, height = frame["width"], frame["height"]
        if not (0 <= x < width and 0 <= y < height):
            raise BrowserError(
                f"({x}, {y}) is outside the screenshot, which is {width}x{height} pixels: "
                f"x must be 0 to {width - 1} and y 0 to {height - 1}"
            )
        px = frame["left"] + (x + 0.5) * frame["png_width"] / width
        py = frame["top"] + (y + 0.5) * frame["png_height"] / height
        if not (0 <= px < view["width"] and 0 <= py < view["height"]):
            raise BrowserError(
                f"({x}, {y}) is not on the visible part of the page (scrolled away); scroll, then use "
                "the new screenshot's coordinates"
            )
        return px, py

    # -- helpers for actions --------------------------------------------------------------------

    def _element(self, element_id: int, *, listed_ok: bool = False) -> Any:
        """The element with id ``element_id``; raises when the page has none. ``listed_ok``: an id
        the latest observation of this page showed is taken as there without asking the page (the
        caller's ``_act`` still words a vanished element as missing, after the action's timeout)."""
        found = self.page.locator(f'[{axtree.ID_ATTRIBUTE}="{int(element_id)}"]')
        listed = self._listed
        if (
            listed_ok
            and self.shortcuts
            and listed is not None
            and listed[0] is self.page
            and int(element_id) in listed[1]
        ):
            self._unverified = int(element_id)
            return found.first
        if found.count() == 0:
            raise self._missing(element_id)
        return found.first

    @staticmethod
    def _missing(element_id: int) -> BrowserError:
        return BrowserError(
            f"there is no element [{element_id}] on this page (ids change when the page "
            "changes); use an id from the latest observation"
        )

    def _settle(self, *, frame: bool = False, typed: int | None = None) -> None:
        """Let the action's effects land: loads it started, scripts it woke, tabs it opened.
        ``frame``: wait for a rendered frame even where the page asked for none. ``typed``: the
        element text was just typed into (the observation may then read only what it changed)."""
        page = self.page
        try:
            if not (self.shortcuts and _loaded(page)):
                page.wait_for_load_state("load")
        except PlaywrightTimeoutError:
            self._stop_loading(page)
            self.notes.append(
                f"The page did not finish loading within {self.limits['nav_ms'] / 1000:g} s; "
                "loading was stopped."
            )
        try:
            quick = self.shortcuts and not frame
            settled = page.evaluate(
                pagejs.SETTLE_JS, [quick, str(typed) if quick and typed is not None else None]
            )
            popups, self._view = settled["popups"], (page, settled["view"])
            self.settled_by = str(settled["wait"])
            calm = settled.get("calm")  # from the page's own world: taken only in the shape CALM_JS gives
            if (
                isinstance(calm, dict)
                and isinstance(calm.get("gen"), str)
                and isinstance(calm.get("focus"), str | None)
                and not popups
            ):
                self._calm = {"gen": calm["gen"], "focus": calm["focus"], "field": typed}
        except PlaywrightError:
            popups = 0  # it navigated meanwhile; the observation waits for the new document
            self.settled_by = "navigation"
        if popups and not self._opened:
            try:
                self.context.wait_for_event("page", timeout=self.limits["action_ms"])
            except PlaywrightTimeoutError:
                pass  # a script stopped it: no tab after all
        if self._opened:
            newest, self._opened = self._opened[-1], []
            if newest in self.pages:
                self.active = self.pages.index(newest)
                self.notes.append(f"A new tab opened (tab {self.active}); it is now the active tab.")
                try:
                    newest.wait_for_load_state("load")
                except PlaywrightTimeoutError:
                    self.notes.append("The new tab is still loading.")

    def _stop_loading(self, page: Any) -> None:
        """Cancel a navigation still waiting for its server, so that the page can be read."""
        try:
            self._session(page).send("Page.stopLoading")
        except PlaywrightError:
            pass

    def _act(self, element_id: int, what: str, target: Any, action: Any) -> None:
        try:
            action()
            self._unverified = None  # it was there: as good as looked up
        except PlaywrightTimeoutError as exc:
            seconds = self.limits["action_ms"] / 1000
            try:
                if self._unverified == element_id and target.count() == 0:
                    raise self._missing(element_id) from None
                if not target.is_visible():
                    why = "it is not visible (hidden, or outside any scrollable area)"
                elif target.is_disabled():
                    why = "it is disabled"
                else:
                    log = [
                        ln.strip("- ").strip() for ln in str(exc).splitlines() if ln.strip().startswith("-")
                    ]
                    why = next(
                        (ln for ln in reversed(log) if "element" in ln or "intercepts" in ln),
                        log[-1] if log else _first_line(exc),
                    )
            except PlaywrightError:
                why = _first_line(exc)
            raise BrowserError(
                f"could not {what} element [{element_id}] within {seconds:g} s: {why}"
            ) from None

    # -- operations (one per tool) --------------------------------------------------------------

    def op_goto(self, url: str, site: list[str] | None = None) -> None:
        """Open ``url``; ``site`` (``[prefix, name]``, from an environment opening its own site, never
        from a tool) names a site first (see the module docstring)."""
        if site is not None:
            self._name_site(*site)
        shown, url = url, self._real(url)
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https") and url != "about:blank":
            raise BrowserError(f"cannot open {shown!r}: give a full http:// or https:// URL")
        try:
            self.page.goto(url, wait_until="load")
        except PlaywrightTimeoutError:
            self._stop_loading(self.page)
            raise BrowserError(
                f"{shown} did not finish loading within {self.limits['nav_ms'] / 1000:g} s; "
                "loading was stopped and the page below is what there is"
            ) from None
        self._opened.clear()

    def op_click(self, element_id: int) -> None:
        target = self._element(element_id, listed_ok=True)
        self._act(element_id, "click", target, target.click)
        self._settle()

    def op_click_at(self, x: int, y: int) -> None:
        px, py = self._point(x, y)
        self.page.mouse.click(px, py)
        self._settle()

    def op_type_at(self, x: int, y: int, text: str, submit: bool = False) -> None:
        px, py = self._point(x, y)
        self.page.mouse.click(px, py)
        if not self.page.evaluate(pagejs.EDITABLE_JS):
            raise BrowserError(
                f"the click at ({x}, {y}) did not reach a text field; type where a text field is shown"
            )
        self.page.keyboard.press("Control+A")  # replace what the field held, as browser_type does
        self.page.keyboard.press("Delete")
        if text:
            self.page.keyboard.insert_text(text)
        if submit:
            self.page.keyboard.press("Enter")
        self._settle()

    def op_type(self, element_id: int, text: str, submit: bool = False) -> None:
        target = self._element(element_id, listed_ok=True)
        try:
            self._act(element_id, "type into", target, lambda: target.fill(text))
        except PlaywrightError as exc:
            if "not an <input>" in str(exc) or "Cannot type" in str(exc) or "not fillable" in str(exc):
                raise BrowserError(
                    f"element [{element_id}] is not a text field; type into a textbox, searchbox or combobox"
                ) from None
            raise
        if submit:
            self._act(element_id, "press Enter in", target, lambda: target.press("Enter"))
        self._settle(typed=None if submit else element_id)

    def op_press(self, key: str) -> None:
        try:
            self.page.keyboard.press(key)
        except PlaywrightError as exc:
            if "Unknown key" in str(exc):
                raise BrowserError(f"unknown key {key!r}: {KEY_HINT}") from None
            raise
        self._settle()

    def op_scroll(self, direction: str, amount: int | None, element_id: int | None = None) -> None:
        step = amount or int(
            0.8 * (self.config["width"] if direction in ("left", "right") else self.config["height"])
        )
        dx = {"left": -step, "right": step}.get(direction, 0)
        dy = {"up": -step, "down": step}.get(direction, 0)
        target = self._element(element_id).element_handle() if element_id is not None else None
        before = self.page.evaluate("() => [scrollX, scrollY]")
        self.page.evaluate(pagejs.SCROLL_JS, [target, dx, dy])
        self._settle(frame=True)  # a scroll's own event comes with the next frame
        if target is None and self.page.evaluate("() => [scrollX, scrollY]") == before:
            self.notes.append(
                f"The page did not move {direction}: it is already at that end, or it does not scroll."
            )

    def op_select(self, element_id: int, option: str) -> None:
        target = self._element(element_id)
        info = target.evaluate(pagejs.SELECT_INFO_JS)
        if info["tag"] != "select":
            raise BrowserError(
                f"element [{element_id}] is a <{info['tag']}>, not a drop-down list; "
                "use browser_click for links, buttons and radio buttons"
            )
        options = info["options"]
        chosen = (
            next((o for o in options if o["label"] == option), None)
            or next((o for o in options if o["value"] == option), None)
            or next((o for o in options if o["label"].strip().lower() == option.strip().lower()), None)
        )
        if chosen is None:
            listed = ", ".join(repr(o["label"]) for o in options) or "none"
            raise BrowserError(f"element [{element_id}] has no option {option!r}; its options are {listed}")
        self._act(
            element_id, "select an option of", target, lambda: target.select_option(value=chosen["value"])
        )
        self._settle()

    def op_back(self) -> None:
        history = self._session(self.page).send("Page.getNavigationHistory")
        index, entries = history["currentIndex"], history["entries"]
        if index == 0 or (index == 1 and entries[0]["url"] == "about:blank"):  # a new tab's blank start
            raise BrowserError("there is no earlier page in this tab's history")
        self.page.go_back(wait_until="load")

    def op_tabs(self) -> None:
        """Nothing to do: the observation lists the tabs."""

    def op_observe(self) -> None:
        """Nothing to do: the reply is the observation (for environments, never a tool)."""

    # -- for environments, never reachable from a tool ----------------------------------------------

    def evaluate(self, script: str, pin: bool = False) -> str:
        """Run ``script`` (a JavaScript function expression) in the environment's page; JSON
        ``{"ok": true, "value": ...}``. ``pin`` first makes the active tab that page: an environment
        pins its task page once, then reads its state there whatever the agent does with tabs.
        ``{"ok": false, "closed": true}`` when the pinned page was closed or the browser is gone."""
        if pin:
            self.env_page = self.page if self.context is not None else None
        page = self.env_page
        if page is None or page.is_closed():
            return json.dumps({"ok": False, "closed": True, "error": "the environment's page is closed"})
        try:
            return json.dumps({"ok": True, "value": page.evaluate(script)})
        except PlaywrightError as exc:
            return json.dumps({"ok": False, "closed": False, "error": _first_line(exc)})

    def op_switch_tab(self, index: int) -> None:
        if not 0 <= index < len(self.pages):
            raise BrowserError(f"there is no tab {index}; tabs are numbered 0 to {len(self.pages) - 1}")
        self.active = index
        self.page.bring_to_front()

    def op_new_tab(self, url: str = "") -> None:
        self.context.new_page()
        self._opened.clear()
        self.active = len(self.pages) - 1
        if url:
            self.op_goto(url)

    def op_close_tab(self, index: int | None = None) -> None:
        index = self.active if index is None else index
        if not 0 <= index < len(self.pages):
            raise BrowserError(f"there is no tab {index}; tabs are numbered 0 to {len(self.pages) - 1}")
        self.pages[index].close()

    def op_snapshot(self, marks: bool = False, selector: str | None = None, scale: float = 1.0) -> None:
        """For environments, never a tool: the observation and a screenshot of the viewport (of
        ``selector``'s element when it is visible), with the observation's [id]s drawn on it when
        ``marks`` (set-of-marks: an agent that sees only the image can still name elements). The
        reply's ``frame`` (see ``_frame``) places it on the page, for the coordinate operations."""
        self._snap = {"marks": marks, "selector": selector, "scale": scale}

    def op_screenshot(self, full_page: bool = False) -> None:
        self.shot = self._screenshot(full_page)
