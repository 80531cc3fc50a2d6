"""Accessibility-tree text for a model: ``[id] role 'name'`` lines, indented by depth.

Input is what Chromium's DevTools protocol reports: ``Accessibility.getFullAXTree`` (roles and
names as the browser computes them for screen readers) and ``DOMSnapshot.captureSnapshot`` (the
``data-tg-id`` attribute the driver puts on every element, keyed by backend node id). An element's
id is that attribute, so ids stay the same for as long as the element lives on the page and the
tools find the element again with a CSS selector on it.

What is left out, as WebArena and BrowserGym do: nodes Chromium marks ignored, ``generic`` /
``none`` wrappers without a name (their children move up), text boxes below ``StaticText``, and
``StaticText`` that only repeats its parent's name. Pure stdlib: it runs inside the browser
sandbox and in host-side tests.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

ID_ATTRIBUTE = "data-tg-id"
"""The attribute that carries an element's id on the page."""
MAX_NAME_CHARS = 150
"""Longer names are cut (with ``…``): a paragraph's text is not a label."""

_DROPPED = frozenset({"InlineTextBox", "LineBreak", "ListMarker"})
_WRAPPERS = frozenset(
    {
        "generic",
        "none",
        "presentation",
        "ignored",
        "LayoutTable",
        "LayoutTableRow",
        "LayoutTableCell",
        "Section",
        "paragraph",
        "group",
        "list",
        "listitem",
        "strong",
        "emphasis",
        "DescriptionList",
        "Abbr",
        "time",
        "code",
        "mark",
        "Ruby",
        "subscript",
        "superscript",
        "insertion",
        "deletion",
        "LabelText",
        "MenuListPopup",
        "form",
        "article",
        "blockquote",
        "figure",
        "Pre",
    }
)
"""Roles shown only when they carry a name of their own; otherwise their children move up."""
_DOCUMENTS = frozenset({"RootWebArea", "WebArea"})
"""Their name is the page title: text under them is not a repeat of it."""
_VALUE_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton", "slider", "TextField"})
_TRISTATE = ("checked", "pressed", "expanded")
_FLAGS = ("selected", "focused", "disabled", "required", "readonly", "modal", "multiselectable")


def clean(text: Any, limit: int = MAX_NAME_CHARS) -> str:
    """One line of text: whitespace collapsed, at most ``limit`` characters."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def ids_from_snapshot(snapshot: Mapping[str, Any]) -> dict[int, str]:
    """Backend node id → the element's ``data-tg-id``, from a ``DOMSnapshot.captureSnapshot`` reply."""
    strings: list[str] = snapshot.get("strings", [])
    ids: dict[int, str] = {}
    try:
        wanted = strings.index(ID_ATTRIBUTE)
    except ValueError:
        return ids
    for document in snapshot.get("documents", []):
        nodes = document.get("nodes", {})
        for backend_id, attributes in zip(
            nodes.get("backendNodeId", []), nodes.get("attributes", []), strict=False
        ):
            for k in range(0, len(attributes) - 1, 2):
                if attributes[k] == wanted:
                    ids[backend_id] = strings[attributes[k + 1]]
                    break
    return ids


def _value(field: Any) -> Any:
    return field.get("value") if isinstance(field, Mapping) else None


def _properties(node: Mapping[str, Any], role: str, name: str) -> list[str]:
    props = {
        p.get("name"): _value(p.get("value")) for p in node.get("properties", []) if isinstance(p, Mapping)
    }
    shown: list[str] = []
    if role in _VALUE_ROLES:
        value = clean(_value(node.get("value")))
        if value and value != name:
            shown.append(f"value='{value}'")
    for key in _TRISTATE:
        if key in props and props[key] not in (None, ""):
            shown.append(f"{key}={str(props[key]).lower()}")
    shown += [key for key in _FLAGS if props.get(key) is True]
    return shown


def render(
    ax_nodes: Iterable[Mapping[str, Any]],
    ids: Mapping[int, str],
    *,
    scrollable: Collection[str] = (),
    indent: str = "  ",
) -> list[str]:
    """The tree as lines: ``[id] role 'name' properties`` (no ``[id]`` for text and the document).
    Elements whose id is in ``scrollable`` scroll on their own: they are always shown, marked so."""
    nodes = {n["nodeId"]: n for n in ax_nodes if "nodeId" in n}
    roots = [n for n in nodes.values() if n.get("parentId") not in nodes]
    lines: list[str] = []
    stack: list[tuple[Mapping[str, Any], int, str]] = [(n, 0, "") for n in reversed(roots)]
    while stack:
        node, depth, parent_name = stack.pop()
        role = str(_value(node.get("role")) or "")
        if role in _DROPPED:
            continue
        name = clean(_value(node.get("name")))
        children = [nodes[c] for c in node.get("childIds", []) if c in nodes]
        element = ids.get(node.get("backendDOMNodeId", -1))
        scrolls = element is not None and element in scrollable
        if node.get("ignored") or (role in _WRAPPERS and not name and not scrolls):
            stack.extend((c, depth, parent_name) for c in reversed(children))
            continue
        if role == "StaticText":
            if name and name not in parent_name:
                lines.append(f"{indent * depth}StaticText '{name}'")
            continue
        head = f"[{element}] " if element else ""
        line = f"{indent * depth}{head}{role} '{name}'"
        props = _properties(node, role, name) + (["scrollable"] if scrolls else [])
        if props:
            line += " " + " ".join(props)
        lines.append(line)
        context = "" if role in _DOCUMENTS else f"{name} {clean(_value(node.get('value')))}"
        stack.extend((c, depth + 1, context) for c in reversed(children))
    return lines


def cap_lines(lines: list[str], max_chars: int) -> tuple[str, bool]:
    """Join ``lines``; past ``max_chars`` keep whole lines from the top and say how many were cut."""
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text, False
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    cut = len(lines) - len(kept)
    kept.append(f"[... {cut} more lines not shown: scroll, or open a more specific page ...]")
    return "\n".join(kept), True
