"""The browser tools in a real browser sandbox (Docker, Debian's Chromium, Playwright) against pages
this suite serves itself: forms, links, tabs, scrolling, dialogs, screenshots (pixels checked),
the network allowlist, timeouts, argument errors, and a WebShop purchase end to end."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.gui.helpers import Browser, decode_png, pixel
from toolgym.plugins.gui import BrowserConfig, browser_tools
from toolgym.plugins.gui.testsite import RED_BLOCK, TestSite
from toolgym.plugins.webshop.oracle import oracle_step
from toolgym.plugins.webshop.server import WebShopServer
from toolgym.plugins.webshop.session import ShopSession

pytestmark = pytest.mark.docker


def test_form_fill_select_check_and_submit(browser: Browser, site: TestSite) -> None:
    page = browser.call("browser_goto", url=f"{site.url}/form")
    assert not page.error and page.metadata["title"] == "Order form"
    assert "RootWebArea 'Order form'" in page.text and "[" in page.text
    assert "combobox 'Colour' value='Red'" in page.text and "checkbox 'Gift wrap' checked=false" in page.text
    assert "button 'Not now' disabled" in page.text
    query = browser.id_of("textbox 'Query'")
    typed = browser.call("browser_type", element_id=query, text="blue shoes")
    assert f"[{query}] textbox 'Query' value='blue shoes' focused" in typed.text
    assert browser.id_of("textbox 'Query'") == query  # ids are stable within a page
    picked = browser.call("browser_select", element_id=browser.id_of("combobox 'Colour'"), option="Green")
    assert "combobox 'Colour' value='Green'" in picked.text
    checked = browser.call("browser_click", element_id=browser.id_of("checkbox 'Gift wrap'"))
    assert "checkbox 'Gift wrap' checked=true" in checked.text
    sent = browser.call("browser_type", element_id=query, text="red boots", submit=True)
    assert not sent.error and sent.metadata["url"].startswith(f"{site.url}/result?")
    assert "query=red boots; colour=Green; gift=yes" in sent.text
    back = browser.call("browser_back")
    assert back.metadata["url"] == f"{site.url}/form" and "heading 'Order form'" in back.text


def test_links_dialogs_and_tabs(browser: Browser, site: TestSite) -> None:
    browser.call("browser_goto", url=f"{site.url}/links")
    alerted = browser.call("browser_click", element_id=browser.id_of("button 'Alert me'"))
    assert "A dialog (alert) said 'hello from the page'; it was accepted." in alerted.text
    assert "StaticText 'alerted'" in alerted.text
    opened = browser.call("browser_click", element_id=browser.id_of("link 'Open in new tab'"))
    assert "A new tab opened (tab 1); it is now the active tab." in opened.text
    assert (opened.metadata["tab"], opened.metadata["tabs"]) == (1, 2) and "heading 'Tab page'" in opened.text
    assert f"Tab 0: 'Links' {site.url}/links" in opened.text and "Tab 1 (active): 'Tab page'" in opened.text
    first = browser.call("browser_switch_tab", index=0)
    assert first.metadata["tab"] == 0 and "heading 'Links'" in first.text
    second = browser.call("browser_click", element_id=browser.id_of("link 'Second page'"))
    assert second.metadata["url"] == f"{site.url}/second" and second.metadata["tabs"] == 2
    fresh = browser.call("browser_new_tab", url=f"{site.url}/form")
    assert (fresh.metadata["tab"], fresh.metadata["tabs"]) == (2, 3)
    listed = browser.call("browser_tabs")
    assert listed.text.count("\nTab ") + listed.text.startswith("Tab ") == 3
    closed = browser.call("browser_close_tab", index=1)
    assert closed.metadata["tabs"] == 2 and "Tab page" not in closed.text
    closed = browser.call("browser_close_tab")
    closed = browser.call("browser_close_tab")
    assert closed.metadata["tabs"] == 1 and closed.metadata["url"] == "about:blank"  # never zero tabs


def test_scrolling_the_page_and_a_box(browser: Browser, site: TestSite) -> None:
    top = browser.call("browser_goto", url=f"{site.url}/long")
    assert "Scroll: showing y 0-720 of" in top.text and "Item 45" not in top.text
    box = browser.id_of("generic '' scrollable")
    inner = browser.call("browser_scroll", element_id=box, amount=100)
    assert "Scroll: showing y 0-720" in inner.text  # the page itself did not move
    for _ in range(8):
        down = browser.call("browser_scroll", direction="down")
    assert "StaticText 'Item 45'" in down.text  # the list grew when its end came into view
    assert "did not move down" in down.text or "Item 50" in down.text
    up = browser.call("browser_scroll", direction="up", amount=100_000)
    assert "Scroll: showing y 0-720" in up.text
    again = browser.call("browser_scroll", direction="up")
    assert "The page did not move up" in again.text


def test_screenshot_pixels_and_artifacts(browser: Browser, site: TestSite, tmp_path: Path) -> None:
    browser.call("browser_goto", url=f"{site.url}/red")
    shot = browser.call("browser_screenshot")
    assert not shot.error and shot.files == ["artifacts/ep-1/browser-001.png"]
    assert shot.text.startswith("Screenshot saved as artifacts/ep-1/browser-001.png.")
    image = decode_png((tmp_path / shot.files[0]).read_bytes())
    assert image[:2] == (1280, 720)
    width, height = RED_BLOCK
    for x, y in ((5, 5), (width // 2, height // 2), (width - 5, height - 5)):
        assert pixel(image, x, y) == (255, 0, 0), (x, y)
    for x, y in ((width + 20, 20), (20, height + 20), (1000, 600)):
        assert pixel(image, x, y) == (255, 255, 255), (x, y)
    full = browser.call("browser_screenshot", full_page=True)
    assert full.files == ["artifacts/ep-1/browser-002.png"]
    every = browser_tools(BrowserConfig(screenshot_every_step=True))
    step = browser.call("browser_goto", tools=every, url=f"{site.url}/form")
    assert step.files == ["artifacts/ep-1/browser-003.png"] and "Screenshot" not in step.text


def test_hosts_outside_the_allowlist_are_blocked(browser: Browser, site: TestSite) -> None:
    plain = browser.call("browser_goto", url="http://example.com/")
    assert (
        plain.error
        and "blocked: example.com:80 is not in this browser sandbox's network allowlist" in plain.text
    )
    tls = browser.call("browser_goto", url="https://example.com/")
    assert tls.error and "ERR_TUNNEL_CONNECTION_FAILED" in tls.text and "allowlist" in tls.text
    browser.call("browser_goto", url=f"{site.url}/links")
    link = browser.call("browser_click", element_id=browser.id_of("link 'Outside site'"))
    assert link.error and "example.com:80 is not in this browser sandbox's network allowlist" in link.text
    denied = browser.sandbox.handle["proxy"].denied
    assert "example.com:80" in denied and "example.com:443" in denied
    assert not browser.call("browser_goto", url=f"{site.url}/form").error  # allowed hosts still work


def test_argument_errors_say_what_to_do(browser: Browser, site: TestSite) -> None:
    quick = browser_tools(BrowserConfig(action_timeout_s=1.0))
    browser.call("browser_goto", url=f"{site.url}/form")
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "there is no element [999] on this page": ("browser_click", {"element_id": 999}),
        "is not a text field; type into a textbox": (
            "browser_type",
            {"element_id": browser.id_of("button 'Send'"), "text": "x"},
        ),
        "has no option 'Purple'; its options are 'Red', 'Green', 'Blue'": (
            "browser_select",
            {"element_id": browser.id_of("combobox 'Colour'"), "option": "Purple"},
        ),
        "is a <input>, not a drop-down list": (
            "browser_select",
            {"element_id": browser.id_of("checkbox"), "option": "x"},
        ),
        "unknown key 'Enterr': use key names such as Enter": ("browser_press", {"key": "Enterr"}),
        "there is no tab 3; tabs are numbered 0 to 0": ("browser_switch_tab", {"index": 3}),
        "cannot open 'file:///etc/passwd': give a full http:// or https:// URL": (
            "browser_goto",
            {"url": "file:///etc/passwd"},
        ),
        "invalid arguments for browser_click: missing required argument 'element_id'": ("browser_click", {}),
        "argument 'element_id': Input should be a valid integer": (
            "browser_click",
            {"element_id": "the button"},
        ),
        "amount must be a positive number of pixels": ("browser_scroll", {"amount": -5}),
        "argument 'direction': Input should be 'up', 'down', 'left' or 'right'": (
            "browser_scroll",
            {"direction": "sideways"},
        ),
        "could not click element [18] within 1 s: it is disabled": (
            "browser_click",
            {"element_id": browser.id_of("button 'Not now'")},
        ),
    }
    for expected, (name, arguments) in cases.items():
        out = browser.call(name, tools=quick, **arguments)
        assert out.error and expected in out.text, (name, out.text)
    assert browser.call("browser_back").text.startswith(
        "Error: there is no earlier page in this tab's history"
    )
    assert "heading 'Order form'" in browser.call("browser_tabs").text  # the page survived every error


def test_slow_pages_time_out_and_a_hung_browser_is_restarted(browser: Browser, site: TestSite) -> None:
    short = browser_tools(BrowserConfig(nav_timeout_s=2.0, call_timeout_s=12.0))
    browser.call("browser_goto", tools=short, url=f"{site.url}/form")  # starts the browser
    slow = browser.call("browser_goto", tools=short, url=f"{site.url}/slow?s=8")
    assert slow.error and "did not finish loading within 2 s; loading was stopped" in slow.text
    assert slow.duration_s < 6
    # a hung page needs no room for a slow one: its call bound is cut short (the wait is all this case costs)
    hang = browser_tools(BrowserConfig(nav_timeout_s=2.0, call_timeout_s=5.0))
    hung = browser.call("browser_goto", tools=hang, url=f"{site.url}/hang")
    assert hung.error and "did not answer within 5 s and was restarted" in hung.text
    again = browser.call("browser_goto", tools=short, url=f"{site.url}/form")
    assert not again.error and "heading 'Order form'" in again.text


def _click_target(browser: Browser, label: str) -> int:
    """The id of the link, button or radio button whose name is ``label`` (case-insensitive)."""
    for line in browser.last.splitlines():
        head, _, rest = line.strip().partition("] ")
        role, _, name = rest.partition(" '")
        if role in ("link", "button", "radio") and name.split("'")[0].lower() == label.lower():
            return int(head.lstrip("["))
    raise AssertionError(f"nothing to click named {label!r} in:\n{browser.last}")


def test_the_browser_tools_buy_in_webshop(browser: Browser, webshop: WebShopServer) -> None:
    session_id = "7"
    expected = ShopSession(webshop.shop, webshop.goal_for(session_id))
    while (step := oracle_step(expected)) is not None:
        expected.step(step[0])
    start = browser.call("browser_goto", url=f"{webshop.url}/s/{session_id}/")
    assert not start.error and "Instruction:" in start.text
    actions = []
    for _ in range(20):
        step = oracle_step(webshop.session(session_id))  # the server's session follows the browser
        if step is None:
            break
        action = step[0]
        actions.append(action)
        if action.startswith("search["):
            out = browser.call(
                "browser_type",
                element_id=browser.id_of("textbox 'Search...'"),
                text=action[len("search[") : -1],
                submit=True,
            )
        else:
            out = browser.call("browser_click", element_id=_click_target(browser, action[len("click[") : -1]))
        assert not out.error, out.text
    with urllib.request.urlopen(f"{webshop.url}/s/{session_id}/state", timeout=10) as reply:
        state = json.load(reply)
    assert state["done"] and actions[-1] == "click[Buy Now]", actions
    assert state["score"] == pytest.approx(expected.score) and state["score"] > 0.5
