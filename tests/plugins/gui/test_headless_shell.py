"""The browser tools launch Debian's ``chromium-headless-shell``, not the full ``chromium``: it is
cheaper to start and to open a context in, and what the model sees must not change with it. The
same tool calls, in two sandboxes of the browser image, one per executable, give the same text
observations and the same screenshot pixels on the test site's pages and a WebShop session."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.plugins.gui.helpers import Browser, decode_png
from toolgym.core.env.contract import EpisodeContext
from toolgym.plugins.gui import BROWSER_TOOLS, BrowserConfig, browser_tools
from toolgym.plugins.gui.testsite import TestSite
from toolgym.plugins.webshop.server import WebShopServer
from toolgym.sandboxes.pool import PooledBackend

pytestmark = pytest.mark.docker

FULL = "/usr/bin/chromium"
"""Debian's launcher script of the full browser, which runs ``/usr/lib/chromium/chromium``."""


def _running(browser: Browser) -> str:
    """The command lines of the sandbox's browser processes (run after the pages: a command ends
    the sandbox's kept browser at release, which this test does not need)."""
    out = browser.runner.run(browser.sandbox.run(["ps", "-eo", "args"]))
    return "\n".join(line for line in out.stdout.splitlines() if "--remote-debugging-pipe" in line)


def test_the_headless_shell_shows_what_the_full_chromium_shows(
    backend: PooledBackend, runner: asyncio.Runner, site: TestSite, webshop: WebShopServer, tmp_path: Path
) -> None:
    assert BrowserConfig().chromium.endswith("chromium-headless-shell")
    pages = [
        f"{site.url}/",
        f"{site.url}/form",
        f"{site.url}/links",
        f"{site.url}/long",
        f"{webshop.url}/s/3/",
    ]
    seen: dict[str, list[tuple[str, bytes]]] = {}
    processes: dict[str, str] = {}
    for name, tools in (
        ("shell", list(BROWSER_TOOLS)),
        ("full", browser_tools(BrowserConfig(chromium=FULL))),
    ):
        sandbox = runner.run(backend.acquire("browser", episode_id=f"shell-{name}"))
        ctx = EpisodeContext(episode_id=name, artifacts_dir=str(tmp_path / name / "artifacts"))
        browser = Browser(runner, sandbox, ctx, tools)
        try:
            for url in pages:
                page = browser.call("browser_goto", url=url)
                assert not page.error, page.text
                shot = browser.call("browser_screenshot", full_page=True)
                assert not shot.error and shot.files, shot.text
                pixels = decode_png((tmp_path / name / shot.files[0]).read_bytes())
                seen.setdefault(name, []).append((page.text, repr(pixels[:3]).encode() + pixels[3]))
            processes[name] = _running(browser)
        finally:
            runner.run(backend.release(sandbox))
    # each sandbox ran the executable it was given (else the comparison proves nothing)
    assert "chromium-headless-shell" in processes["shell"], processes
    assert "/usr/lib/chromium/chromium " not in processes["shell"], processes
    assert "/usr/lib/chromium/chromium " in processes["full"], processes
    assert "headless-shell" not in processes["full"], processes
    for url, (shell_text, shell_px), (full_text, full_px) in zip(
        pages, seen["shell"], seen["full"], strict=True
    ):
        assert shell_text == full_text, url
        assert shell_px == full_px, f"{url}: the screenshots differ"
