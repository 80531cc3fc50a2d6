"""The driver's shortcuts change no observation: after every kind of action, what the tool answered
equals a fresh observation taken the long way (``Driver.shortcuts = False``: the element looked up,
the load state asked for, the two snapshot commands one after the other) on the same page, for
actions that change the page subtly (a field's value, a checkbox, the focus, the scroll
position, a list grown by scrolling, a dialog, a new tab, a navigation, going back). And an
element the latest observation listed but that the page removed since is still reported missing."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import pytest

from tests.plugins.gui.helpers import Browser
from toolgym.plugins.gui import BrowserConfig, browser_tools
from toolgym.plugins.gui.testsite import TestSite
from toolgym.plugins.gui.tools import DRIVER, driver_session

pytestmark = pytest.mark.docker

_PAGE_START = re.compile(r"^(Tab \d+|URL: )")
DEFERRED = """() => {
  const later = document.createElement('button'); later.textContent = 'Later';
  const said = document.createElement('p'); said.textContent = 'waiting';
  later.onclick = () => requestAnimationFrame(() => setTimeout(() => {
    said.textContent = 'done later';
    const added = document.createElement('button'); added.textContent = 'Added later'; document.body.append(added);
  }, 0));
  document.body.append(later, said);
}"""
"""A button whose click changes the page a frame and a task later (what the driver's settling waits for)."""
ECHO = """() => {
  const box = document.createElement('input'); box.setAttribute('aria-label', 'Echo');
  const echo = document.createElement('p'); echo.textContent = 'echo none';
  box.addEventListener('input', () => requestAnimationFrame(() => { echo.textContent = 'echo ' + box.value; }));
  document.body.append(box, echo);
}"""
"""A field whose typing shows up a frame later: the settling must wait for the frame it asked for."""
RESIZED = """async () => {
  const grow = document.createElement('button'); grow.textContent = 'Grow';
  const area = document.createElement('div'); area.style.cssText = 'width:10px;height:10px';
  const size = document.createElement('p'); size.textContent = 'size unknown';
  new ResizeObserver(() => { size.textContent = 'size ' + area.offsetWidth; }).observe(area);
  grow.onclick = () => { area.style.width = '40px'; };
  document.body.append(grow, area, size);
  await new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)));  // its first callback
}"""
"""A button whose click changes the page through a layout observer, whose callbacks come with a frame."""
PLAIN = """() => {
  const add = document.createElement('button'); add.textContent = 'Add';
  add.onclick = () => { setTimeout(() => { document.body.append(Object.assign(
    document.createElement('p'), {textContent: 'added by a timer'})); }, 0);
    Promise.resolve().then(() => { add.textContent = 'Added'; }); };
  document.body.append(add);
}"""
"""A button whose click changes the page in a 0 ms timer and a promise callback, asking for no frame."""
JUMP = """() => {
  const jump = document.createElement('button'); jump.textContent = 'Jump';
  const told = document.createElement('p'); told.textContent = 'not scrolled';
  const tall = document.createElement('div'); tall.style.height = '3000px';
  addEventListener('scroll', () => { told.textContent = 'scrolled to ' + Math.round(scrollY); });
  jump.onclick = () => scrollTo(0, 250);
  document.body.prepend(jump, told); document.body.append(tall);
}"""
"""A button whose click scrolls the page, and a scroll listener: the scroll event comes with a frame."""

QUIET = """() => {
  const say = document.createElement('button'); say.textContent = 'Say';
  const said = document.createElement('p'); said.textContent = 'silent';
  say.onclick = () => { said.textContent = 'said at once'; Promise.resolve().then(() => { say.textContent = 'Said'; }); };
  document.body.append(say, said);
}"""
"""A button whose click changes the page in its handler and a promise callback, queueing no task."""
QUEUED = {
    "Port": """() => { const channel = new MessageChannel();
      channel.port1.onmessage = () => { document.querySelector('p.queued').textContent = 'got port'; };
      window.__tgSend = () => channel.port2.postMessage('tg'); }""",
    "Window": """() => {
      window.addEventListener('message', () => { document.querySelector('p.queued').textContent = 'got window'; });
      window.__tgSend = () => window.postMessage('tg', '*'); }""",
    "Source": """() => {
      window.__tgSend = () => setTimeout("document.querySelector('p.queued').textContent = 'got source'", 0); }""",
}
"""Ways a click can change the page in a task it posts: a port's message, a window message, a timer
given as source text; each script defines ``__tgSend``, which a button calls."""
SEND = """() => {
  const shown = document.createElement('p'); shown.className = 'queued'; shown.textContent = 'nothing';
  const send = document.createElement('button'); send.textContent = 'Send it'; send.onclick = () => window.__tgSend();
  document.body.append(send, shown);
}"""


def driver_value(browser: Browser, attribute: str) -> Any:
    """An attribute of the driver in the sandbox (after the latest action)."""
    session = browser.runner.run(driver_session(browser.sandbox))
    result = browser.runner.run(session.execute(f"{DRIVER}.{attribute}", timeout=30))
    assert result.error is None, result.error
    return ast.literal_eval(result.value or "None")


def settled_by(browser: Browser) -> str:
    """What the driver's settling waited for after the latest action."""
    return str(driver_value(browser, "settled_by"))


def page_part(text: str) -> str:
    """The observation from the tab list or URL on: the page itself, without the notes above it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if _PAGE_START.match(line))
    return "\n".join(lines[start:])


def observe_the_long_way(browser: Browser) -> str:
    """A fresh observation of the active tab with every shortcut off."""
    limits = json.dumps(BrowserConfig().limits())
    code = (
        f"{DRIVER}.shortcuts = False\n"
        f"try:\n    _reply = {DRIVER}.call('observe', '{{}}', {limits!r})\n"
        f"finally:\n    {DRIVER}.shortcuts = True\n"
        "_reply"
    )
    session = browser.runner.run(driver_session(browser.sandbox))
    result = browser.runner.run(session.execute(code, timeout=60))
    assert result.error is None, result.error
    reply: dict[str, Any] = json.loads(ast.literal_eval(result.value or ""))
    assert reply["ok"], reply
    return str(reply["text"])


def in_page(browser: Browser, script: str) -> None:
    session = browser.runner.run(driver_session(browser.sandbox))
    result = browser.runner.run(session.execute(f"{DRIVER}.page.evaluate({script!r})", timeout=30))
    assert result.error is None, result.error


def check(browser: Browser, name: str, **arguments: Any) -> str:
    out = browser.call(name, **arguments)
    assert not out.error, out.text
    assert page_part(out.text) == page_part(observe_the_long_way(browser)), (name, arguments)
    return out.text


def test_observations_after_actions_equal_fresh_ones(browser: Browser, site: TestSite) -> None:
    check(browser, "browser_goto", url=f"{site.url}/form")
    query = browser.id_of("textbox 'Query'")
    typed = check(browser, "browser_type", element_id=query, text="blue shoes")
    assert "value='blue shoes' focused" in typed
    check(browser, "browser_press", key="Tab")  # the focus moves on
    gift = browser.id_of("checkbox 'Gift wrap'")
    assert "checked=true" in check(browser, "browser_click", element_id=gift)
    assert "checked=false" in check(browser, "browser_click", element_id=gift)
    check(browser, "browser_select", element_id=browser.id_of("combobox 'Colour'"), option="Blue")
    in_page(browser, DEFERRED)
    check(browser, "browser_tabs")
    later = check(browser, "browser_click", element_id=browser.id_of("button 'Later'"))
    assert "StaticText 'done later'" in later and re.search(r"\[\d+\] button 'Added later'", later)
    in_page(browser, ECHO)
    check(browser, "browser_tabs")
    echoed = check(browser, "browser_type", element_id=browser.id_of("textbox 'Echo'"), text="abc")
    assert "StaticText 'echo abc'" in echoed
    in_page(browser, PLAIN)
    check(browser, "browser_tabs")
    plain = check(browser, "browser_click", element_id=browser.id_of("button 'Add'"))
    assert "StaticText 'added by a timer'" in plain and "button 'Added'" in plain
    in_page(browser, JUMP)
    check(browser, "browser_tabs")
    jumped = check(browser, "browser_click", element_id=browser.id_of("button 'Jump'"))
    assert "StaticText 'scrolled to 250'" in jumped
    in_page(browser, RESIZED)
    check(browser, "browser_tabs")
    grown = check(browser, "browser_click", element_id=browser.id_of("button 'Grow'"))
    assert "StaticText 'size 40'" in grown
    sent = check(browser, "browser_click", element_id=browser.id_of("button 'Send'"))  # navigates
    assert "query=blue shoes" in sent
    check(browser, "browser_back")
    check(browser, "browser_goto", url=f"{site.url}/links")
    alerted = check(browser, "browser_click", element_id=browser.id_of("button 'Alert me'"))
    assert "A dialog (alert) said" in alerted and "StaticText 'alerted'" in alerted
    opened = check(browser, "browser_click", element_id=browser.id_of("link 'Open in new tab'"))
    assert "Tab 1 (active)" in opened
    check(browser, "browser_switch_tab", index=0)
    check(browser, "browser_click", element_id=browser.id_of("link 'Second page'"))
    in_page(
        browser,
        "() => document.body.append(Object.assign(document.createElement('a'), {href: '/late', textContent: 'Late page'}))",
    )
    check(browser, "browser_tabs")
    late = check(
        browser, "browser_click", element_id=browser.id_of("link 'Late page'")
    )  # "load" comes 0.5 s on
    assert "StaticText 'loaded'" in late
    check(browser, "browser_goto", url=f"{site.url}/long")
    for _ in range(4):  # the last scrolls reach the bottom, where the page adds items
        check(browser, "browser_scroll", direction="down", amount=1500)
    assert "Item 45" in browser.last
    check(browser, "browser_scroll", direction="down", element_id=browser.id_of(r"\w+ '' scrollable"))


def test_a_listed_element_removed_since_is_reported_missing(browser: Browser, site: TestSite) -> None:
    browser.call("browser_goto", url=f"{site.url}/form")
    gift = browser.id_of("checkbox 'Gift wrap'")
    in_page(browser, f"() => document.querySelector('[data-tg-id=\"{gift}\"]').remove()")
    quick = browser_tools(BrowserConfig(action_timeout_s=0.5))
    out = browser.call("browser_click", tools=quick, element_id=gift)
    assert out.error and f"there is no element [{gift}] on this page" in out.text, out.text
    unknown = browser.call("browser_click", tools=quick, element_id=9999)  # never listed: at once
    assert unknown.error and "there is no element [9999] on this page" in unknown.text


ACCOUNT = """() => {
  const due = () => window.__tgTasksDue(); const out = {};
  due(); out.idle = due();
  const far = setTimeout(() => {}, 60000); out.far = due(); clearTimeout(far);
  const now = setTimeout(() => {}, 0); out.timer = due(); clearTimeout(now); out.cleared = due();
  const every = setInterval(() => {}, 0); out.interval = due(); clearInterval(every);
  new MessageChannel().port2.postMessage('x'); out.port = due(); out.read = due();
  window.postMessage('x', '*'); out.window = due();
  setTimeout('1', 0); out.source = due();
  out.tasked = !!window.__tgTasked; addEventListener('hashchange', () => {}); out.listened = !!window.__tgTasked;
  return out;
}"""
"""The init script's account of queued tasks, read in the same task that queues them (no race with
the page's event loop)."""


def page_value(browser: Browser, script: str) -> Any:
    session = browser.runner.run(driver_session(browser.sandbox))
    result = browser.runner.run(
        session.execute(f"__import__('json').dumps({DRIVER}.page.evaluate({script!r}))", timeout=30)
    )
    assert result.error is None, result.error
    return json.loads(ast.literal_eval(result.value or "'null'"))


def test_a_page_with_nothing_queued_is_observed_without_waiting(browser: Browser, site: TestSite) -> None:
    """The settling skips its task turn only where the page queued nothing: a handler that changes the
    page at once (and in a promise callback) is seen without a wait; the page's account of queued work
    counts timers due (not later ones, not cleared ones), posted messages and timers given as source
    text, once each, and listeners of task-queued events; and what a click queues that way is seen."""
    check(browser, "browser_goto", url=f"{site.url}/form")
    in_page(browser, QUIET)
    check(browser, "browser_tabs")
    quiet = check(browser, "browser_click", element_id=browser.id_of("button 'Say'"))
    assert "StaticText 'said at once'" in quiet and "button 'Said'" in quiet
    assert settled_by(browser) == "none"
    assert page_value(browser, ACCOUNT) == {
        "idle": False, "far": False, "timer": True, "cleared": False, "interval": True, "port": True,
        "read": False, "window": True, "source": True, "tasked": False, "listened": True,
    }  # fmt: skip
    for kind, script in QUEUED.items():
        check(browser, "browser_goto", url=f"{site.url}/form")
        in_page(browser, script)
        in_page(browser, SEND)
        check(browser, "browser_tabs")
        out = check(browser, "browser_click", element_id=browser.id_of("button 'Send it'"))
        assert f"StaticText 'got {kind.lower()}'" in out, (kind, out)
        # the settling waited a task turn, or found the message already delivered (a busy host)
        assert settled_by(browser) in ("task", "none"), kind


def added(html: str, then: str = "") -> str:
    """A page script that appends ``html`` in a box of its own, then runs ``then`` (``box`` in scope)."""
    return (
        "() => { const box = document.createElement('div'); box.innerHTML = " + json.dumps(html) + ";\n"
        "  document.body.append(box);\n  " + then + "\n}"
    )


SECOND = added('<div><input aria-label="Second"></div>')
"""A second text field, in a part of the page of its own."""
TYPED = "box.querySelector('input').addEventListener('input', "
UNCALM = {
    "a style on a shown placeholder": added(
        "<style>input.tg:placeholder-shown ~ div .later { display: none }</style>"
        '<input class="tg" aria-label="Typed" placeholder="type"><div><div><span class="later">now typed</span></div></div>'
    ),
    "a style on what holds the focus": added(
        "<style>body:has(input.tg:focus) .away { display: none }</style>"
        '<div><input class="tg" aria-label="Typed"></div><div><div><p class="away">not focused</p></div></div>'
    ),
    "a name taken from the field": added(
        '<div id="tg-amount">Amount <input aria-label="Typed"></div>'
        '<div><div><button aria-labelledby="tg-amount">Pay</button></div></div>'
    ),
    "another field's value set": added(
        '<div><input aria-label="Typed"></div><div><div><input aria-label="Copy"></div></div>',
        "const [typed, copy] = box.querySelectorAll('input');"
        " typed.addEventListener('input', () => { copy.value = typed.value; });",
    ),
    "a popover shown": added(
        '<div><input aria-label="Typed"></div><div><div><div popover>popped up</div></div></div>',
        TYPED + "() => box.querySelector('[popover]').showPopover());",
    ),
    "a style rule added": added(
        '<style>.tg-rule {}</style><div><input aria-label="Typed"></div><div><div><p class="tg-hide">still here</p></div></div>',
        TYPED + "() => box.querySelector('style').sheet.insertRule('.tg-hide { display: none }'));",
    ),
    "the focus moved on": added(
        '<div><input aria-label="Typed"></div><div><div><button>Next</button></div></div>',
        TYPED + "() => box.querySelector('button').focus());",
    ),
    "a shadow root": added(
        '<div><input aria-label="Typed"></div><div><div class="host"></div></div>',
        "const shadow = box.querySelector('.host').attachShadow({mode: 'closed'});"
        " shadow.innerHTML = '<p>shadow before</p>';"
        " " + TYPED + "() => { shadow.querySelector('p').textContent = 'shadow after'; });",
    ),
    "a label holding the field and another control": added(
        '<label><span><span><input type="checkbox"></span></span> Agree to <input aria-label="Typed"></label>'
    ),
    "a custom element's own name": added(
        '<div><input aria-label="Typed"></div><div><div><tg-named tabindex="0"></tg-named></div></div>',
        "customElements.define('tg-named', class extends HTMLElement { constructor() { super();"
        " this.internals = this.attachInternals(); this.internals.role = 'button';"
        " this.internals.ariaLabel = 'Named before'; } });"
        " " + TYPED + "() => { box.querySelector('tg-named').internals.ariaLabel = 'Named after'; });",
    ),
    "a long text": added('<div><textarea aria-label="Typed"></textarea></div>'),
}
"""Pages where typing into a field changes the accessibility tree elsewhere without changing the
DOM the page's mutation observer sees (each change sits two levels below a sibling of the field's
part of the page, where reading only the field and its kin would miss it)."""


def type_and_check(browser: Browser, label: str, text: str) -> tuple[str, str]:
    """Type ``text`` into the textbox named ``label``: the observation (checked against one taken
    the long way) and how it read the tree (``observed_by``, read before the long way's)."""
    out = browser.call("browser_type", element_id=browser.id_of(f"textbox '{label}'"), text=text)
    assert not out.error, out.text
    how = str(driver_value(browser, "observed_by"))
    assert page_part(out.text) == page_part(observe_the_long_way(browser)), (label, text)
    return out.text, how


def test_typing_reads_only_the_field_where_nothing_else_changed(browser: Browser, site: TestSite) -> None:
    """After text is typed into a field of a page that changed nowhere else, the observation reads
    only the field and its kin (``observed_by == "field"``) and still equals one taken the long way,
    also when the focus moves from one field to another; on pages where typing changes the tree
    elsewhere (a style that depends on the value or the focus, a name taken from the field, another
    field's value, a popover, a style rule added, the focus moved on, a shadow root, a label that
    names another control from the field, a value too long to repeat only itself in the tree, a
    custom element's own accessible name) it
    reads the whole tree and shows the change, as it does where the page replaced the account's answer
    with one of another shape."""
    check(browser, "browser_goto", url=f"{site.url}/form")
    in_page(browser, SECOND)
    check(browser, "browser_tabs")
    session = browser.runner.run(driver_session(browser.sandbox))
    cross = browser.runner.run(session.execute(f"{DRIVER}.check_patched = True", timeout=30))
    assert cross.error is None, (
        cross.error
    )  # each field read is also compared with the whole tree in the driver
    first, how = type_and_check(browser, "Query", "blue")
    assert "value='blue' focused" in first and how == "field"
    second, how = type_and_check(browser, "Second", "two words")
    assert "value='two words' focused" in second and "value='blue' focused" not in second and how == "field"
    assert type_and_check(browser, "Query", "again")[1] == "field"
    shown = {
        "a style on a shown placeholder": "StaticText 'now typed'",
        "a style on what holds the focus": "!StaticText 'not focused'",
        "a name taken from the field": "button 'Amount 42'",
        "another field's value set": "textbox 'Copy' value='42'",
        "a popover shown": "'popped up'",
        "a style rule added": "!StaticText 'still here'",
        "the focus moved on": "button 'Next' focused",
        "a shadow root": "StaticText 'shadow after'",
        "a label holding the field and another control": "checkbox 'Agree to 42'",
        "a long text": "StaticText 'the second line'",
        "a custom element's own name": "button 'Named after'",
    }
    typed = {"a long text": "word " * 35 + "\nthe second line"}
    for case, script in UNCALM.items():
        check(browser, "browser_goto", url=f"{site.url}/form")
        in_page(browser, script)
        check(browser, "browser_tabs")
        out, how = type_and_check(browser, "Typed", typed.get(case, "42"))
        want = shown[case]
        assert (want[1:] not in out) if want.startswith("!") else (want in out), (case, out)
        assert how == "tree", case
    for forged in ("() => ({gen: 5, focus: []})", "() => 'calm'", "() => ({focus: null})"):
        # the answer comes from the page's own world: a page that replaces it gets the whole tree read
        check(browser, "browser_goto", url=f"{site.url}/form")
        in_page(browser, f"() => {{ window.__tgCalm = {forged}; }}")
        assert type_and_check(browser, "Query", "forged")[1] == "tree", forged
