"""Host-side parts of the browser tools, without a browser: accessibility-tree rendering from CDP
replies, the allowlist helper, the tool schemas, and the driver protocol (install on first use,
restart after a hang, screenshots into the artifacts) over an in-memory sandbox."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ToolArgumentError
from toolgym.core.sandbox import PythonResult
from toolgym.plugins.gui import BROWSER_TOOLS, BrowserConfig, browser_tools, network_allowlist, pagejs
from toolgym.plugins.gui.axtree import ID_ATTRIBUTE, cap_lines, ids_from_snapshot, render
from toolgym.plugins.gui.tools import DRIVER, loader_code
from toolgym.sandboxes.memory import MemorySandbox


def ax(
    node_id: str,
    role: str,
    name: str = "",
    *,
    children: tuple[str, ...] = (),
    parent: str | None = None,
    backend: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    node: dict[str, Any] = {
        "nodeId": node_id,
        "role": {"value": role},
        "name": {"value": name},
        "childIds": list(children),
        "ignored": extra.pop("ignored", False),
    }
    if parent:
        node["parentId"] = parent
    if backend is not None:
        node["backendDOMNodeId"] = backend
    if "value" in extra:
        node["value"] = {"value": extra.pop("value")}
    node["properties"] = [{"name": k, "value": {"value": v}} for k, v in extra.items()]
    return node


PAGE = [
    ax("1", "RootWebArea", "Shop", children=("2", "3", "9", "12"), backend=1, focused=True),
    ax("2", "heading", "Shop", parent="1", children=("20",), backend=5),
    ax(
        "20", "StaticText", "Shop", parent="2"
    ),  # the page title again: not a repeat of the heading's own name
    ax("3", "generic", parent="1", children=("4", "6", "7"), backend=6),
    ax("4", "link", "Next  page", parent="3", children=("5",), backend=7),
    ax("5", "StaticText", "Next page", parent="4", children=("50",)),
    ax("50", "InlineTextBox", "Next page", parent="5"),
    ax("6", "textbox", "Query", parent="3", backend=8, value="shoes", required=True),
    ax("7", "none", parent="3", children=("8",), ignored=True),
    ax("8", "checkbox", "Gift", parent="7", backend=9, checked="false", disabled=True),
    ax("9", "generic", parent="1", backend=10, children=("10",)),
    ax("10", "StaticText", "line in a box", parent="9"),
    ax("12", "paragraph", parent="1", children=("13",), backend=12),
    ax("13", "StaticText", "Welcome " + "x" * 300, parent="12"),
]


def test_render_gives_id_role_name_lines_and_drops_noise() -> None:
    ids = {5: "4", 6: "5", 7: "6", 8: "7", 9: "8", 10: "9", 12: "11"}
    lines = render(PAGE, ids, scrollable={"9"})
    assert lines[:6] == [
        "RootWebArea 'Shop' focused",  # the document has no element id
        "  [4] heading 'Shop'",
        "  [6] link 'Next page'",  # whitespace collapsed; its repeated text and text boxes dropped
        "  [7] textbox 'Query' value='shoes' required",
        "  [8] checkbox 'Gift' checked=false disabled",  # an ignored wrapper's child moves up
        "  [9] generic '' scrollable",  # unnamed wrappers are shown only when they scroll
    ]
    assert lines[6] == "    StaticText 'line in a box'"
    assert (
        lines[7].startswith("  StaticText 'Welcome xxx") and lines[7].endswith("…'") and len(lines[7]) < 170
    )


def test_ids_come_from_the_dom_snapshot() -> None:
    snapshot = {
        "strings": ["class", "big", ID_ATTRIBUTE, "12", "3"],
        "documents": [{"nodes": {"backendNodeId": [4, 5, 6], "attributes": [[0, 1], [0, 1, 2, 3], [2, 4]]}}],
    }
    assert ids_from_snapshot(snapshot) == {5: "12", 6: "3"}
    assert ids_from_snapshot({"strings": ["class"], "documents": []}) == {}


def test_long_observations_are_cut_at_whole_lines() -> None:
    lines = [f"[{i}] link 'item {i}'" for i in range(1000)]
    text, cut = cap_lines(lines, 500)
    assert (
        cut
        and len(text) < 600
        and text.endswith("more lines not shown: scroll, or open a more specific page ...]")
    )
    assert all(line.startswith("[") for line in text.splitlines()[:-1])
    assert cap_lines(lines[:3], 500) == ("\n".join(lines[:3]), False)


def test_allowlist_patterns_from_urls() -> None:
    assert network_allowlist("http://127.0.0.1:8123/s/1", "https://shop.test") == (
        "127.0.0.1:8123",
        "shop.test:443",
    )
    with pytest.raises(ToolArgumentError, match="give a full http"):
        network_allowlist("127.0.0.1:80")


def test_the_tool_family_and_its_schemas() -> None:
    names = [t.name for t in BROWSER_TOOLS]
    assert names == [
        "browser_goto",
        "browser_click",
        "browser_type",
        "browser_press",
        "browser_scroll",
        "browser_select",
        "browser_back",
        "browser_tabs",
        "browser_switch_tab",
        "browser_new_tab",
        "browser_close_tab",
        "browser_screenshot",
    ]
    assert all(t.sandbox == "browser" and {"sandbox", "ctx"} <= t.injected for t in BROWSER_TOOLS)
    by_name = {t.name: t for t in BROWSER_TOOLS}
    assert by_name["browser_type"].parameters["required"] == ["element_id", "text"]
    assert by_name["browser_scroll"].parameters["properties"]["direction"]["enum"] == [
        "up",
        "down",
        "left",
        "right",
    ]
    custom = browser_tools(
        BrowserConfig(sandbox="kiosk", nav_timeout_s=1, action_timeout_s=1, launch_timeout_s=5)
    )
    assert custom[0].sandbox == "kiosk" and custom[0].timeout_s == pytest.approx(5 + 2 + 1 + 10 + 20)


def test_the_loader_is_valid_python_carrying_both_modules() -> None:
    code = loader_code(BrowserConfig(width=800))
    tree = ast.parse(code)
    assert any(isinstance(n, ast.Assign) and n.targets[0].id == DRIVER for n in tree.body)  # type: ignore[attr-defined]
    assert (
        all(f"toolgym_gui_{name}" in code for name in ("axtree", "pagejs", "driver"))
        and '"width": 800' in code
    )
    assert pagejs.ID_ATTRIBUTE == ID_ATTRIBUTE  # the page scripts and the renderer agree


class ScriptedDriver:
    """A Python session standing in for the sandbox's: it checks what the host sends and answers
    as the in-sandbox driver would (a real driver needs the Docker image; see test_gui_tools)."""

    def __init__(self, sandbox: MemorySandbox) -> None:
        self.sandbox = sandbox
        self.cells: list[str] = []
        self.loaded = False
        self.hang_next = False
        self.restarts = 0

    async def execute(self, code: str, *, timeout: float | None = None) -> PythonResult:
        self.cells.append(code)
        if code.startswith("import json as _json"):
            self.loaded = True
            return PythonResult()
        if not self.loaded:
            return PythonResult(
                error=f"NameError: name '{DRIVER}' is not defined", restarted=self.restarts > 0
            )
        if self.hang_next:
            self.hang_next = False
            return PythonResult(error="TimeoutError: the cell ran past its limit", timed_out=True)
        call = ast.parse(code).body[0].value  # type: ignore[attr-defined]
        op, _args, limits = (ast.literal_eval(a) for a in call.args)
        shot = None
        if json.loads(limits)["screenshot"]:
            shot = ".toolgym-browser/screenshot.png"
            self.sandbox.files[self.sandbox.path(shot)] = b"\x89PNG fake"
        reply = {
            "ok": op != "click",
            "error": "there is no element [3] on this page" if op == "click" else None,
            "text": "URL: http://site/\nRootWebArea 'Site'",
            "screenshot": shot,
            "url": "http://site/",
            "title": "Site",
            "tab": 0,
            "tabs": 1,
            "truncated": False,
        }
        return PythonResult(value=repr(json.dumps(reply)))

    async def restart(self) -> None:
        self.loaded = False
        self.restarts += 1


async def test_driver_protocol_install_errors_restart_and_screenshots(tmp_path: Path) -> None:
    sandbox = MemorySandbox("browser", python=ScriptedDriver)
    session: ScriptedDriver = await sandbox.python()  # type: ignore[assignment]
    ctx = EpisodeContext(episode_id="ep-9", artifacts_dir=str(tmp_path / "artifacts"))
    tools = {t.name: t for t in BROWSER_TOOLS}
    first = await tools["browser_goto"].call({"url": "http://site/"}, sandbox=sandbox, ctx=ctx)
    assert (first.text, first.error, first.metadata["title"]) == (
        "URL: http://site/\nRootWebArea 'Site'",
        False,
        "Site",
    )
    assert len(session.cells) == 3 and session.loaded  # call, install, call again
    failed = await tools["browser_click"].call({"element_id": 3}, sandbox=sandbox, ctx=ctx)
    assert failed.error and failed.text.startswith(
        "Error: there is no element [3] on this page\n\nURL: http://site/"
    )
    shots = [await tools["browser_screenshot"].call({}, sandbox=sandbox, ctx=ctx) for _ in range(2)]
    assert [s.files for s in shots] == [
        ["artifacts/ep-9/browser-001.png"],
        ["artifacts/ep-9/browser-002.png"],
    ]
    assert (tmp_path / "artifacts/ep-9/browser-002.png").read_bytes() == b"\x89PNG fake"
    bare = await tools["browser_screenshot"].call({}, sandbox=sandbox)
    assert bare.files == [] and bare.text.startswith(
        "Screenshot taken (not stored: this run has no artifacts directory)."
    )
    session.hang_next = True
    hung = await tools["browser_tabs"].call({}, sandbox=sandbox, ctx=ctx)
    assert hung.error and "did not answer within" in hung.text and session.restarts == 1
    after = await tools["browser_tabs"].call({}, sandbox=sandbox, ctx=ctx)
    assert not after.error and after.text.startswith("The browser had stopped and was started again")
