"""The site's pages: what each shows, and the three ways to render it (text, text_rich, html).

A page is built once as a list of ``Node`` (one per visible text of the published templates, in
document order), then rendered:

- ``text``: the visible texts, stripped, joined by `` [SEP] `` — the published ``text`` mode;
- ``text_rich``: one line per text, buttons as ``[button] X [button_]``, chosen options and
  visited products as ``[clicked button] X [clicked button_]``, and ``You have clicked X.``
  lines on top for chosen options — the published ``text_rich`` mode;
- ``html``: a self-contained HTML page whose visible text is exactly the ``text`` rendering, with
  stable element ids (``search_input``, ``btn-search``, ``btn-back-to-search``, ``btn-prev``,
  ``btn-next``, ``btn-buy-now``, ``btn-description``, ``btn-features``, ``btn-reviews``,
  ``product-<ASIN>``, ``option-<name>-<i>``) and, on each clickable, ``data-action`` holding
  the equivalent text action (``click[buy now]``).

Page texts follow the published templates: ``Instruction:``, the instruction, ``Back to Search``,
``Page 2 (Total results: 50)``, ``< Prev``, ``Next >``, ASIN / title / price per result, option
names and values, ``Price: $12.99``, ``Rating: N.A.``, ``Description``, ``Features``,
``Reviews``, ``Buy Now``. The done page shows the score only (the original's hidden MTurk
block is left out).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .products import Product

PRODUCTS_PER_PAGE = 10
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, BUY_NOW = "Back to Search", "< Prev", "Next >", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")


@dataclass(frozen=True, slots=True)
class View:
    """Where the browser is: what the original site encodes in its URL."""

    kind: str = "start"
    """``start``, ``results``, ``item``, ``sub`` or ``done``."""
    keywords: tuple[str, ...] = ()
    page: int = 1
    asin: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    """Chosen options as (name, value) pairs in the order they were chosen."""
    sub: str | None = None
    """Which sub-page (one of ``SUB_PAGES``) on a ``sub`` view."""

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)

    def with_option(self, name: str, value: str) -> View:
        chosen = dict(self.options)
        chosen[name] = value
        return View("item", self.keywords, self.page, self.asin, tuple(chosen.items()))


@dataclass(frozen=True, slots=True)
class Node:
    """One visible text of a page. ``click`` (lowercased) is set on clickable ones."""

    kind: str
    """``text``, ``heading``, ``instruction``, ``button``, ``product``, ``option_name``, ``option``."""
    text: str
    click: str | None = None
    option: str | None = None
    selected: bool = False
    element_id: str = ""


@dataclass
class Page:
    """A rendered-once page: its nodes and what can be clicked on it."""

    view: View
    nodes: list[Node]
    has_search_bar: bool = False
    clickables: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in self.nodes:
            if node.click is not None:
                self.clickables[node.click] = node

    def text(self) -> str:
        parts: list[str] = []
        for node in self.nodes:
            texts = ("Instruction:", node.text) if node.kind == "instruction" else (node.text,)
            parts.extend(t.strip() for t in texts if t.strip())
        return " [SEP] ".join(parts)

    def text_rich(self) -> str:
        out = ""
        for node in self.nodes:
            t = node.text
            if node.kind == "instruction":
                out += "Instruction:\n" + t + "\n"
                continue
            if node.kind == "button":
                line = f"[button] {t} [button_]"
            elif node.kind == "option":
                if node.selected:
                    line = f"  [clicked button] {t} [clicked button_]"
                    out = f"You have clicked {t}.\n" + out
                else:
                    line = f"  [button] {t} [button_]"
            elif node.kind == "product":
                line = (
                    f"\n[clicked button] {t} [clicked button_]"
                    if node.selected
                    else f"\n[button] {t} [button_]"
                )
            else:
                line = t
            out += line + "\n"
        return out

    def html(self, href: Callable[[Node], str] | None = None, search_action: str = "#") -> str:
        return render_html(self, href, search_action)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _button(text: str) -> Node:
    return Node("button", text, click=text.lower(), element_id=f"btn-{_slug(text)}")


def _instruction(text: str) -> Node:
    return Node("instruction", text)


def start_page(view: View, instruction: str) -> Page:
    nodes = [Node("heading", "WebShop"), _instruction(instruction), _button("Search")]
    return Page(view, nodes, has_search_bar=True)


def results_page(
    view: View, instruction: str, products: Sequence[Product], total: int, visited: set[str]
) -> Page:
    nodes = [
        _instruction(instruction),
        _button(BACK_TO_SEARCH),
        Node("text", f"Page {view.page} (Total results: {total})"),
    ]
    if view.page > 1:
        nodes.append(_button(PREV_PAGE))
    nodes.append(_button(NEXT_PAGE))
    for p in products:
        asin = p["asin"]
        nodes.append(
            Node("product", asin, click=asin.lower(), selected=asin in visited, element_id=f"product-{asin}")
        )
        nodes.append(Node("text", str(p["Title"])))
        nodes.append(Node("text", str(p["Price"])))
    return Page(view, nodes)


def item_page(view: View, instruction: str, product: Product, *, show_attrs: bool = False) -> Page:
    chosen = view.option_dict
    nodes = [_instruction(instruction), _button(BACK_TO_SEARCH), _button(PREV_PAGE)]
    for name, values in product["options"].items():
        nodes.append(Node("option_name", name))
        for i, value in enumerate(values):
            nodes.append(
                Node(
                    "option",
                    value,
                    click=value,
                    option=name,
                    selected=chosen.get(name) == value,
                    element_id=f"option-{_slug(name)}-{i}",
                )
            )
    nodes += [
        Node("heading", str(product["Title"])),
        Node("text", f"Price: {product['Price']}"),
        Node("text", f"Rating: {product['Rating']}"),
    ]
    nodes += [_button(s) for s in SUB_PAGES if s != "Attributes" or show_attrs]
    nodes.append(_button(BUY_NOW))
    return Page(view, nodes)


def sub_page(view: View, instruction: str, product: Product) -> Page:
    nodes = [_instruction(instruction), _button(BACK_TO_SEARCH), _button(PREV_PAGE)]
    if view.sub == "Description":
        nodes.append(Node("text", str(product["Description"])))
    elif view.sub == "Features":
        nodes += [Node("text", f" {b}") for b in product["BulletPoints"]]
    elif view.sub == "Reviews":
        for r in product["Reviews"]:
            nodes += [
                Node("heading", f'"{r["title"]}"'),
                Node("text", str(r["score"])),
                Node("text", str(r["body"])),
            ]
    elif view.sub == "Attributes":
        nodes += [Node("text", f" {a}") for a in product["Attributes"]]
        nodes += [Node("text", str(product[k])) for k in ("category", "query", "product_category")]
    return Page(view, nodes)


def done_page(view: View, score: float) -> Page:
    nodes = [
        Node("heading", "Thank you for shopping with us!"),
        Node("text", "Your score (min 0.0, max 1.0)"),
        Node("text", str(score)),
    ]
    return Page(view, nodes)


_CSS = (
    "body{font-family:sans-serif;margin:2em;max-width:60em}.btn{display:inline-block;margin:.2em;padding:.3em .8em;"
    "border:1px solid #357;border-radius:4px;text-decoration:none;color:#fff;background:#468}"
    ".option{display:inline-block;margin:.2em;padding:.2em .6em;border:1px solid #888;border-radius:4px;"
    "text-decoration:none;color:#222}.option[aria-checked=true]{background:#fc6}.result{margin:1em 0}"
    "#instruction-text{background:#eef;padding:.5em}"
)


def render_html(page: Page, href: Callable[[Node], str] | None = None, search_action: str = "#") -> str:
    """The page as HTML; ``href`` gives each clickable's link (``#`` when None)."""
    esc = html.escape

    def link(node: Node, css: str, extra: str = "") -> str:
        target = esc(href(node) if href else "#")
        action = esc(f"click[{node.click}]")
        return f'<a class="{css}" id="{esc(node.element_id)}" href="{target}" data-action="{action}"{extra}>{esc(node.text)}</a>'

    body: list[str] = []
    in_result = False
    for node in page.nodes:
        if node.kind == "product":
            if in_result:
                body.append("</div>")
            body.append('<div class="result">')
            in_result = True
        if node.kind == "instruction":
            body.append(f'<div id="instruction-text"><h4>Instruction:<br>{esc(node.text)}</h4></div>')
        elif node.kind == "heading":
            body.append(f"<h2>{esc(node.text)}</h2>")
        elif node.kind == "button" and node.click == "search":
            body.append(
                f'<form id="search-form" method="get" action="{esc(search_action)}">'
                '<input id="search_input" type="text" name="keywords" placeholder="Search..." required>'
                f'<button type="submit" class="btn" id="btn-search" data-action="search[...]">{esc(node.text)}</button></form>'
            )
        elif node.kind == "button":
            body.append(link(node, "btn"))
        elif node.kind == "product":
            body.append(f"<h4>{link(node, 'product-link')}</h4>")
        elif node.kind == "option_name":
            body.append(f"<h4>{esc(node.text)}</h4>")
        elif node.kind == "option":
            extra = f' role="radio" aria-checked="{"true" if node.selected else "false"}" data-option="{esc(node.option or "")}"'
            body.append(link(node, "option", extra))
        else:
            body.append(f"<p>{esc(node.text)}</p>")
    if in_result:
        body.append("</div>")
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>WebShop</title>'
        f'<style>{_CSS}</style></head>\n<body><div class="container" id="page-{page.view.kind}">\n'
        + "\n".join(body)
        + "\n</div></body></html>\n"
    )


def page_for(
    view: View,
    *,
    instruction: str,
    product: Product | None = None,
    results: Sequence[Product] = (),
    total: int = 0,
    visited: set[str] | None = None,
    score: float | None = None,
    show_attrs: bool = False,
) -> Page:
    """Build the page of ``view`` from what the session knows."""
    if view.kind == "start":
        return start_page(view, instruction)
    if view.kind == "results":
        return results_page(view, instruction, results, total, visited or set())
    if view.kind == "item":
        assert product is not None
        return item_page(view, instruction, product, show_attrs=show_attrs)
    if view.kind == "sub":
        assert product is not None
        return sub_page(view, instruction, product)
    if view.kind == "done":
        return done_page(view, score if score is not None else 0.0)
    raise ValueError(f"unknown page kind {view.kind!r}")


def describe(view: View) -> dict[str, Any]:
    """A JSON-friendly description of a view (for ``info`` and the server's state endpoint)."""
    return {
        "page": view.kind,
        "keywords": list(view.keywords),
        "page_number": view.page,
        "asin": view.asin,
        "options": dict(view.options),
        "sub_page": view.sub,
    }
