"""The coordinate tools on the test site (Docker: the browser needs its image): points are taken
in the latest screenshot an environment showed, and refused before one was shown or where the
point would fall off the visible page."""

from __future__ import annotations

from tests.plugins.gui.helpers import Browser
from toolgym.plugins.gui.observation import snapshot
from toolgym.plugins.gui.testsite import TestSite
from toolgym.plugins.gui.tools import BrowserConfig, coordinate_tools

COORDS = coordinate_tools()


def test_no_point_before_a_screenshot_was_shown(browser: Browser, site: TestSite) -> None:
    browser.call("browser_goto", url=f"{site.url}/form")
    out = browser.call("browser_click_at", COORDS, x=5, y=5)
    assert out.error and "no screenshot has been shown" in out.text


def test_a_point_off_the_visible_page_is_refused(browser: Browser, site: TestSite) -> None:
    """A screenshot of an element taller than the viewport (the whole long list, half size): its
    lower part is in the image but not on screen, so a point there is refused, not scrolled to."""
    browser.call("browser_goto", url=f"{site.url}/long")
    _, reply = browser.runner.run(
        snapshot(browser.ctx, browser.sandbox, BrowserConfig(), marks=False, selector="#items", scale=0.5)
    )
    frame = reply["frame"]
    assert frame["png_height"] > BrowserConfig().height  # the element is taller than the viewport
    assert (frame["width"], frame["height"]) == (
        round(frame["png_width"] / 2),
        round(frame["png_height"] / 2),
    )
    below = browser.call("browser_click_at", COORDS, x=10, y=frame["height"] - 2)
    assert below.error and "not on the visible part of the page" in below.text
    inside = browser.call("browser_click_at", COORDS, x=10, y=2)
    assert not inside.error, inside.text
