"""The browser tools: a headless Chromium in the episode's ``browser`` sandbox, a fresh browser
context per episode.

Every tool returns the active tab as accessibility-tree text (``[id] role 'name'`` lines, see
``axtree.py``), headed by notes (a dialog, a new tab), the tab list when there are several, the
URL and the scroll position, capped at ``BrowserConfig.max_chars``. Elements are addressed by
those ids. Failures come back as ``Error: ...`` with the observation below it.

How it runs: the host never imports Playwright. The first call in a sandbox sends ``driver.py``,
``pagejs.py``, ``pwstack.py`` and ``axtree.py`` into the sandbox's **kept** Python session (``driver_session``; the
``toolgym/sandbox-browser`` image has Debian's Chromium and Playwright); every call after that is
one cell, ``_toolgym_browser.call(op, args, limits)``, answered with JSON. A call the driver cannot
finish within ``BrowserConfig.cell_timeout_s`` restarts the session (tabs are lost, the tool says so).

Between episodes a pooled sandbox keeps that session, Playwright and Chromium (``RENEW``: every
browser context is closed and the browser is checked to hold none; the next episode's first call
opens a new context); a browser that crashed, an episode that ran code of its own in the sandbox,
or a renewal that fails gets the sandbox's full reset instead, and the next call starts a new
browser (``AgentSandbox.kept_python``, docs/scaling.md "Browser sandboxes keep their browser").

Screenshots (``browser_screenshot``, or every step with ``screenshot_every_step``) are PNG files
copied out of the sandbox to ``<artifacts_dir>/<episode>/browser-NNN.png`` and recorded in the
call's ``files`` relative to the dataset directory (the artifacts directory's parent).
"""

from __future__ import annotations

import ast
import asyncio
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from toolgym import (
    PythonResult,
    Sandbox,
    SandboxBrokenError,
    Tool,
    ToolArgumentError,
    ToolExecutionError,
    ToolOutput,
    tool,
)

HERE = Path(__file__).resolve().parent
DRIVER = "_toolgym_browser"
"""The driver's name in the sandbox's Python session."""
CHROMIUM_ARGS = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-breakpad",
    "--mute-audio",
    "--no-sandbox",
)
"""``--no-sandbox``: the container is the sandbox; Chromium's own needs namespaces and capabilities
that the hardened container does not grant. /dev/shm is sized by the browser profile
(``shm_bytes``), so ``--disable-dev-shm-usage`` is not needed."""


@dataclass(frozen=True, slots=True)
class BrowserConfig:
    """Settings of one set of browser tools. Times are seconds, sizes pixels or characters."""

    width: int = 1280
    height: int = 720
    nav_timeout_s: float = 15.0
    """Longest wait for a page to load (``goto``, ``back``, a click that navigates)."""
    action_timeout_s: float = 5.0
    """Longest wait for an element to become clickable, fillable or selectable."""
    launch_timeout_s: float = 30.0
    max_chars: int = 12_000
    """Observation text cap; whole lines are kept from the top and the cut is announced."""
    call_timeout_s: float | None = None
    """Bound of one driver call in the sandbox (None: derived from the timeouts above); past it the
    browser's session is restarted."""
    screenshot_every_step: bool = False
    """Also store a screenshot after every successful call, not only ``browser_screenshot``."""
    chromium: str = "/usr/lib/chromium/chromium-headless-shell"
    """The browser executable inside the sandbox: Debian's headless shell in the browser image, which
    renders and reads pages as the full ``/usr/bin/chromium`` (also there) does, for less CPU. The
    binary itself, not Debian's ``/usr/bin`` launcher, a shell that would stay as its parent."""
    chromium_args: tuple[str, ...] = CHROMIUM_ARGS
    sandbox: str = "browser"
    """Sandbox kind the tools run in (its profile holds the network allowlist)."""

    @property
    def cell_timeout_s(self) -> float:
        """Bound of one driver call: a first call launches the browser; a click may load two pages."""
        if self.call_timeout_s is not None:
            return self.call_timeout_s
        return self.launch_timeout_s + 2 * self.nav_timeout_s + self.action_timeout_s + 10.0

    def driver_config(self) -> dict[str, Any]:
        return {
            "chromium": self.chromium,
            "args": list(self.chromium_args),
            "width": self.width,
            "height": self.height,
            "launch_ms": int(self.launch_timeout_s * 1000),
        }

    def limits(self, *, screenshot: bool = False) -> dict[str, Any]:
        return {
            "nav_ms": int(self.nav_timeout_s * 1000),
            "action_ms": int(self.action_timeout_s * 1000),
            "max_chars": self.max_chars,
            "screenshot": screenshot or self.screenshot_every_step,
        }


def network_allowlist(*urls: str) -> tuple[str, ...]:
    """``host:port`` allowlist patterns for the sites at ``urls``, for the browser profile:
    ``open_backend(profiles={"browser": {"network": network_allowlist(server.url)}})``."""
    patterns = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ToolArgumentError(f"cannot allow {url!r}: give a full http:// or https:// URL")
        patterns.append(f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}")
    return tuple(patterns)


RENEW = f"{DRIVER}.renew()"
"""The kept session's renewal cell, run by the sandbox's reset (see the module docstring)."""

SHIPPED = ("axtree", "pagejs", "pwstack", "driver")
"""Modules sent into the sandbox, in import order, as ``toolgym_gui_<name>``."""


@functools.cache
def _sources() -> tuple[str, ...]:
    return tuple((HERE / f"{name}.py").read_text() for name in SHIPPED)


def loader_code(config: BrowserConfig) -> str:
    """The cell that installs the driver in a Python session (modules under private names)."""
    *helpers, driver_source = _sources()
    install = "".join(
        f"_toolgym_load('toolgym_gui_{name}', {source!r})\n"
        for name, source in zip(SHIPPED, helpers, strict=False)
    )
    return (
        "import json as _json, sys as _sys, types as _types\n"
        "def _toolgym_load(name, source):\n"
        "    module = _types.ModuleType(name)\n"
        "    module.__file__ = name + '.py'\n"
        "    _sys.modules[name] = module\n"
        "    exec(compile(source, module.__file__, 'exec'), module.__dict__)\n"
        "    return module\n"
        f"{install}"
        f"{DRIVER} = _toolgym_load('toolgym_gui_driver', {driver_source!r}).Driver("
        f"_json.loads({json.dumps(config.driver_config())!r}))\n"
        "del _toolgym_load, _json, _sys, _types\n"
    )


def _load_problem(result: PythonResult) -> str:
    if "No module named 'playwright'" in (result.error or ""):
        return (
            "this sandbox has no Playwright: the browser tools need the toolgym/sandbox-browser image "
            "on the Docker backend (`toolgym sandbox build browser`)"
        )
    return f"the browser driver could not be installed in the sandbox: {result.error}"


async def driver_session(sandbox: Sandbox) -> Any:
    """The Python session (``toolgym.core.sandbox.PythonSession``) that holds the driver: the
    sandbox's kept session when it has one (the pooled backends' ``AgentSandbox``), else its
    ordinary one (test doubles, third-party sandboxes)."""
    kept = getattr(sandbox, "kept_python", None)
    return await (kept(renew=RENEW) if kept is not None else sandbox.python())


async def call_driver(
    sandbox: Sandbox, config: BrowserConfig, op: str, args: dict[str, Any], *, screenshot: bool = False
) -> dict[str, Any]:
    """One driver operation in ``sandbox``; its JSON reply as a dict, plus ``notes`` from the host.
    Raises ``ToolExecutionError`` when the driver cannot answer (its message is for the model)."""
    session = await driver_session(sandbox)
    code = (
        f"{DRIVER}.call({op!r}, {json.dumps(args)!r}, {json.dumps(config.limits(screenshot=screenshot))!r})"
    )
    notes: list[str] = []
    for attempt in range(2):
        result = await session.execute(code, timeout=config.cell_timeout_s)
        if result.value is not None and result.error is None:
            reply = json.loads(ast.literal_eval(result.value))
            reply["notes"] = notes
            return reply
        if result.timed_out:
            await session.restart()
            raise ToolExecutionError(
                f"the browser did not answer within {config.cell_timeout_s:g} s and was "
                "restarted: its tabs are gone; open the page again with browser_goto"
            )
        if attempt == 0 and f"name '{DRIVER}' is not defined" in (result.error or ""):
            if result.restarted:
                notes.append("The browser had stopped and was started again: earlier tabs are gone.")
            loaded = await session.execute(loader_code(config), timeout=60.0)
            if loaded.error is not None:
                raise ToolExecutionError(_load_problem(loaded))
            continue
        if result.restarted:
            raise ToolExecutionError(f"the browser stopped ({result.error}); the next call starts a new one")
        break
    raise ToolExecutionError(f"the browser driver failed: {result.error}")


async def _store_screenshot(sandbox: Sandbox, ctx: Any, path: str) -> str | None:
    """Copy the sandbox's screenshot to the episode's artifacts; its dataset-relative path."""
    artifacts = getattr(ctx, "artifacts_dir", None)
    if not artifacts:
        return None
    data = await sandbox.read_file(path)
    episode = getattr(ctx, "episode_id", "") or "episode"
    folder = Path(artifacts) / episode

    def write() -> str:
        folder.mkdir(parents=True, exist_ok=True)
        n = len(list(folder.glob("browser-*.png"))) + 1
        name = f"browser-{n:03d}.png"
        (folder / name).write_bytes(data)
        return f"{Path(artifacts).name}/{episode}/{name}"

    return await asyncio.to_thread(write)


async def run_browser(
    config: BrowserConfig,
    sandbox: Sandbox,
    ctx: Any,
    op: str,
    args: dict[str, Any],
    *,
    screenshot: bool = False,
) -> ToolOutput:
    """Run one operation and make the tool's output: the observation, the error above it, files."""
    try:
        reply = await call_driver(sandbox, config, op, args, screenshot=screenshot)
    except SandboxBrokenError as exc:
        return ToolOutput(
            f"Error: the browser sandbox stopped working ({exc}). The next call runs in a fresh "
            "sandbox: open the page again.",
            error=True,
            metadata={"sandbox_broken": True},
        )
    text = "\n".join([*reply.pop("notes"), reply.get("text") or ""]).strip()
    files = []
    if reply.get("screenshot"):
        stored = await _store_screenshot(sandbox, ctx, reply["screenshot"])
        if stored:
            files.append(stored)
        if screenshot:
            text = (
                (
                    f"Screenshot saved as {stored}."
                    if stored
                    else "Screenshot taken (not stored: this run has no artifacts directory)."
                )
                + "\n"
                + text
            )
    if not reply.get("ok"):
        text = f"Error: {reply.get('error')}" + (f"\n\n{text}" if text else "")
    metadata: dict[str, Any] = {
        k: reply.get(k) for k in ("url", "title", "tab", "tabs", "truncated") if k in reply
    }
    return ToolOutput(text, error=not reply.get("ok"), files=files, metadata=metadata)


def browser_tools(config: BrowserConfig | None = None) -> list[Tool]:
    """The browser tool family, bound to ``config`` (defaults when None)."""
    cfg = config or BrowserConfig()
    browser_tool = functools.partial(tool, sandbox=cfg.sandbox, timeout_s=cfg.cell_timeout_s + 20.0)
    run = functools.partial(run_browser, cfg)

    @browser_tool
    async def browser_goto(url: str, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Open a web address in the active tab; returns the page as an accessibility tree whose
        elements carry [id] numbers for the other browser tools.

        Args:
            url: A full http:// or https:// address.
        """
        return await run(sandbox, ctx, "goto", {"url": url})

    @browser_tool
    async def browser_click(element_id: int, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Click an element (link, button, checkbox, radio button, tab) of the active page.

        Args:
            element_id: The element's [id] from the latest observation.
        """
        return await run(sandbox, ctx, "click", {"element_id": element_id})

    @browser_tool
    async def browser_type(
        element_id: int, text: str, submit: bool = False, *, sandbox: Sandbox, ctx: Any = None
    ) -> ToolOutput:
        """Replace the text of a text field with new text, and optionally press Enter to submit it.

        Args:
            element_id: The text field's [id] from the latest observation.
            text: The text to enter (replaces what the field held).
            submit: Press Enter afterwards (submits a search or a form).
        """
        return await run(sandbox, ctx, "type", {"element_id": element_id, "text": text, "submit": submit})

    @browser_tool
    async def browser_press(key: str, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Press a key or a key combination in the active page (sent to the focused element).

        Args:
            key: A key name such as Enter, Tab, Escape, Backspace, ArrowDown, PageDown, or a combination such as Control+A.
        """
        return await run(sandbox, ctx, "press", {"key": key})

    @browser_tool
    async def browser_scroll(
        direction: Literal["up", "down", "left", "right"] = "down",
        amount: int | None = None,
        element_id: int | None = None,
        *,
        sandbox: Sandbox,
        ctx: Any = None,
    ) -> ToolOutput:
        """Scroll the page, or one scrollable element of it.

        Args:
            direction: Which way to scroll.
            amount: Pixels to scroll; default most of one screen.
            element_id: Scroll inside this element instead of the page.
        """
        if amount is not None and amount <= 0:
            raise ToolArgumentError(f"amount must be a positive number of pixels, got {amount}")
        return await run(
            sandbox, ctx, "scroll", {"direction": direction, "amount": amount, "element_id": element_id}
        )

    @browser_tool
    async def browser_select(
        element_id: int, option: str, *, sandbox: Sandbox, ctx: Any = None
    ) -> ToolOutput:
        """Choose an option of a drop-down list (a combobox backed by <select>).

        Args:
            element_id: The drop-down's [id] from the latest observation.
            option: The option's text as shown (or its value).
        """
        return await run(sandbox, ctx, "select", {"element_id": element_id, "option": option})

    @browser_tool
    async def browser_back(*, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Go back to the previous page of the active tab."""
        return await run(sandbox, ctx, "back", {})

    @browser_tool
    async def browser_tabs(*, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """List the open tabs (numbered from 0) and show the active one."""
        return await run(sandbox, ctx, "tabs", {})

    @browser_tool
    async def browser_switch_tab(index: int, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Make another tab the active one.

        Args:
            index: The tab's number, from 0.
        """
        return await run(sandbox, ctx, "switch_tab", {"index": index})

    @browser_tool
    async def browser_new_tab(url: str = "", *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Open a new tab, make it active, and optionally load an address in it.

        Args:
            url: A full http:// or https:// address, or empty for a blank tab.
        """
        return await run(sandbox, ctx, "new_tab", {"url": url})

    @browser_tool
    async def browser_close_tab(index: int | None = None, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Close a tab (the active one by default); a blank tab replaces the last one.

        Args:
            index: The tab's number, from 0.
        """
        return await run(sandbox, ctx, "close_tab", {"index": index})

    @browser_tool
    async def browser_screenshot(full_page: bool = False, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Take a screenshot of the active tab (stored beside the trajectory) and return the page text.

        Args:
            full_page: Capture the whole page, not only the visible part.
        """
        return await run(sandbox, ctx, "screenshot", {"full_page": full_page}, screenshot=True)

    return [
        browser_goto,
        browser_click,
        browser_type,
        browser_press,
        browser_scroll,
        browser_select,
        browser_back,
        browser_tabs,
        browser_switch_tab,
        browser_new_tab,
        browser_close_tab,
        browser_screenshot,
    ]


def coordinate_tools(config: BrowserConfig | None = None) -> list[Tool]:
    """The tools that act at a point of the latest screenshot an environment showed (its pixels,
    mapped by the driver to the page; refused outside that screenshot or the viewport). GUI
    environments add them to ``browser_tools`` in their screenshot modes."""
    cfg = config or BrowserConfig()
    browser_tool = functools.partial(tool, sandbox=cfg.sandbox, timeout_s=cfg.cell_timeout_s + 20.0)
    run = functools.partial(run_browser, cfg)

    @browser_tool
    async def browser_click_at(x: int, y: int, *, sandbox: Sandbox, ctx: Any = None) -> ToolOutput:
        """Click at a point of the latest screenshot.

        Args:
            x: Pixels from the screenshot's left edge (0 is the first column).
            y: Pixels from the screenshot's top edge (0 is the first row).
        """
        return await run(sandbox, ctx, "click_at", {"x": x, "y": y})

    @browser_tool
    async def browser_type_at(
        x: int, y: int, text: str, submit: bool = False, *, sandbox: Sandbox, ctx: Any = None
    ) -> ToolOutput:
        """Click the text field at a point of the latest screenshot, replace its text, and
        optionally press Enter.

        Args:
            x: Pixels from the screenshot's left edge.
            y: Pixels from the screenshot's top edge.
            text: The text to enter (replaces what the field held).
            submit: Press Enter afterwards (submits a search or a form).
        """
        return await run(sandbox, ctx, "type_at", {"x": x, "y": y, "text": text, "submit": submit})

    return [browser_click_at, browser_type_at]


BROWSER_TOOLS = browser_tools()
"""The registered tools, with the default ``BrowserConfig``."""
