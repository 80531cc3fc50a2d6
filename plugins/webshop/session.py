"""One shopper's session: the page they are on and what each action does (the published rules).

Actions are ``search[keywords]`` and ``click[text]``, parsed as the original does (the name before
the first ``[`` that leaves a bracketed argument, the argument lowercased). Anything else, a
search with empty keywords, ``click[search]``, or a click on text that is not clickable on the
current page, changes nothing (a no-op, reported as invalid). Search works from any page.

Clicks: ``Back to Search`` → the start page (visited products forgotten); ``Next >`` / ``< Prev``
on results → the next / previous 10 results; ``< Prev`` on an item page → its results page, on a
sub-page → its item page; ``Description`` / ``Features`` / ``Reviews`` → the sub-page; a product's
ASIN → its item page; an option value → the item page with that option chosen; ``Buy Now`` →
the done page, scored, and the session ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .goals import Goal
from .pages import (
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    PRODUCTS_PER_PAGE,
    SUB_PAGES,
    Node,
    Page,
    View,
    describe,
    page_for,
)
from .reward import RewardVariant
from .shop import Shop

_ACTION = re.compile(r"(.+)\[(.+)\]")
_SUB = {s.lower(): s for s in SUB_PAGES}


def parse_action(action: str) -> tuple[str, str | None]:
    """``"click[Buy Now]"`` → (``"click"``, ``"Buy Now"``); no brackets → (action, None)."""
    m = _ACTION.match(action.strip())
    if m is None:
        return action.strip(), None
    return m.group(1).strip().lower(), m.group(2)


def transition(view: View, node: Node) -> View | None:
    """The view a click on ``node`` (a clickable of ``view``'s page) leads to; ``done`` for Buy Now."""
    arg = node.click or ""
    if arg == BUY_NOW.lower():
        return View("done", view.keywords, view.page, view.asin, view.options)
    if arg == "back to search":
        return View()
    if arg == NEXT_PAGE.lower() and view.kind == "results":
        return View("results", view.keywords, view.page + 1)
    if arg == PREV_PAGE.lower() and view.kind == "results":
        return View("results", view.keywords, view.page - 1)
    if arg == PREV_PAGE.lower() and view.kind == "sub":
        return View("item", view.keywords, view.page, view.asin, view.options)
    if arg == PREV_PAGE.lower() and view.kind == "item":
        return View("results", view.keywords, view.page)
    if arg in _SUB:
        return View("sub", view.keywords, view.page, view.asin, view.options, _SUB[arg])
    if node.kind == "product":
        return View("item", view.keywords, view.page, node.text, view.options)
    if node.kind == "option" and node.option is not None:
        return view.with_option(node.option, node.text)
    return None


@dataclass
class Outcome:
    """What one action did."""

    valid: bool
    """False for a no-op: unparsable, empty search, or not clickable here."""
    done: bool = False
    score: float | None = None
    """The purchase's score in [0, 1] (set when ``done``)."""
    info: dict[str, Any] = field(default_factory=dict)


class ShopSession:
    """A session on one goal. Not thread-safe: one session per episode or per browser user."""

    def __init__(
        self, shop: Shop, goal_index: int, *, show_attrs: bool = False, reward: RewardVariant = "original"
    ) -> None:
        self.shop = shop
        self.reward = reward
        self.goal_index = goal_index
        self.goal: Goal = shop.goals[goal_index]
        self.show_attrs = show_attrs
        self.view = View()
        self.visited: set[str] = set()
        self.last_results: tuple[str, ...] = ()
        self.done = False
        self.score: float | None = None
        self.reward_info: dict[str, Any] = {}
        self._page: Page | None = None

    @property
    def instruction(self) -> str:
        return str(self.goal["instruction_text"])

    # -- pages ---------------------------------------------------------------------------------

    def results(self, keywords: tuple[str, ...]) -> list[str]:
        """ASINs the search for ``keywords`` returns (all 50, not one page)."""
        return [p["asin"] for p in self.shop.search(keywords)]

    def render(self, view: View) -> Page:
        """The page of any view of this session (the server renders views from URLs)."""
        if view.kind == "results":
            found = self.shop.search(view.keywords)
            start = (view.page - 1) * PRODUCTS_PER_PAGE
            return page_for(
                view,
                instruction=self.instruction,
                results=found[start : start + PRODUCTS_PER_PAGE],
                total=len(found),
                visited=self.visited,
            )
        product = self.shop.product(view.asin) if view.asin and view.kind in ("item", "sub") else None
        return page_for(
            view, instruction=self.instruction, product=product, score=self.score, show_attrs=self.show_attrs
        )

    @property
    def page(self) -> Page:
        if self._page is None or self._page.view != self.view:
            self._page = self.render(self.view)
        return self._page

    def observation(self, mode: str = "text") -> str:
        """The current page as ``text``, ``text_rich`` or ``html``."""
        if mode == "text":
            return self.page.text()
        if mode == "text_rich":
            return self.page.text_rich()
        if mode == "html":
            return self.page.html()
        raise ValueError(f"unknown observation mode {mode!r}; use text, text_rich or html")

    def available_actions(self) -> dict[str, Any]:
        """As the published env reports them: whether a search bar is shown, and the clickables."""
        return {"has_search_bar": self.page.has_search_bar, "clickables": list(self.page.clickables)}

    def state_key(self, mode: str = "text") -> tuple[Any, ...]:
        """What the shopper sees in ``mode`` plus what the page hides (the chosen options)."""
        return (self.goal_index, self.observation(mode), tuple(sorted(self.view.options)))

    # -- actions -------------------------------------------------------------------------------

    def step(self, action: str) -> Outcome:
        """Apply one text action."""
        if self.done:
            return Outcome(valid=False, done=True, score=self.score, info={"error": "the session is over"})
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg and arg.strip():
            self.search(tuple(arg.split(" ")))
            return Outcome(valid=True)
        if name == "click" and arg is not None and arg != "search" and arg in self.page.clickables:
            return self.click(self.page.clickables[arg])
        if name not in ("search", "click"):
            error = f"unknown action {action!r}: use search[keywords] or click[button]"
        elif name == "search":
            error = "search needs keywords: search[keywords]"
        else:
            error = f"nothing to click called {arg!r} on this page"
        return Outcome(valid=False, info={"error": error})

    def search(self, keywords: tuple[str, ...], page: int = 1) -> None:
        self.view = View("results", keywords, page)

    def click(self, node: Node) -> Outcome:
        target = transition(self.view, node)
        if target is None:  # a clickable the rules do not know: keep the page (cannot happen today)
            return Outcome(valid=False, info={"error": f"{node.click!r} does nothing here"})
        if target.kind == "done":
            return self.buy()
        if target.kind == "start":
            self.visited = set()
        if target.kind == "item" and node.kind == "product":
            self.visited.add(node.text)
        self.view = target
        return Outcome(valid=True)

    def buy(self) -> Outcome:
        view = self.view
        assert view.asin is not None
        score, parts = self.shop.score(self.goal, view.asin, view.option_dict, self.reward)
        self.score, self.reward_info, self.done = score, parts, True
        self.view = View("done", view.keywords, view.page, view.asin, view.options)
        info = {
            "asin": view.asin,
            "options": view.option_dict,
            "price": self.shop.catalog.prices[view.asin],
            "reward_parts": parts,
            "goal_asin": self.goal["asin"],
        }
        return Outcome(valid=True, done=True, score=score, info=info)

    def describe(self) -> dict[str, Any]:
        return {
            "goal_index": self.goal_index,
            "instruction": self.instruction,
            "done": self.done,
            "score": self.score,
            **describe(self.view),
        }
