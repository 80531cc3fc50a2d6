"""The oracle shopper: knows the goal's product and walks the site to buy it with the right options.

From any page it searches (the instruction without its price clause, or, when that search does
not return the product, the product's title), pages through the results to the product, opens
it, chooses the goal's options (a synthetic goal names them; for a human goal each option group
takes the value that matches a wanted value, exactly or by the reward's fuzzy rule), and buys.
Used by ``--model scripted`` (offline datasets, SFT warm starts) and by the tests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .pages import PRODUCTS_PER_PAGE
from .reward import FUZZY_THRESHOLD, normalize_color, token_set_ratio
from .session import ShopSession

_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars$")


def wanted_options(product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, str]:
    """Option group → value the oracle chooses for ``goal`` on ``product``."""
    options: dict[str, list[str]] = product["options"]
    goal_options = goal.get("goal_options") or {}
    if isinstance(goal_options, Mapping):
        return {k: v for k, v in goal_options.items() if v in options.get(k, [])}
    chosen: dict[str, str] = {}
    for name, values in options.items():
        for wanted in goal_options:
            if wanted in values:
                chosen[name] = wanted
                break
        else:
            best = [
                v
                for v in values
                for w in goal_options
                if token_set_ratio(normalize_color(w), normalize_color(v)) > FUZZY_THRESHOLD
            ]
            if best:
                chosen[name] = best[0]
    # A value shown in two groups is ambiguous as a click; leave it out rather than loop.
    counts: dict[str, int] = {}
    for values in options.values():
        for v in values:
            counts[v] = counts.get(v, 0) + 1
    return {k: v for k, v in chosen.items() if counts[v] == 1}


def _clean(text: str) -> str:
    return " ".join(text.replace("[", " ").replace("]", " ").lower().split())


def oracle_query(session: ShopSession) -> str:
    """The first of (instruction, title) whose search returns the goal's product."""
    goal = session.goal
    target = goal["asin"]
    candidates = [
        _clean(_PRICE_CLAUSE.sub("", str(goal["instruction_text"]))),
        _clean(session.shop.product(target)["Title"]),
    ]
    for query in candidates:
        if query and target in session.results(tuple(query.split(" "))):
            return query
    return candidates[-1]


def oracle_step(session: ShopSession) -> tuple[str, str] | None:
    """(action, one-line reason) for the current page, or None when the session is over."""
    if session.done:
        return None
    goal, view = session.goal, session.view
    target = goal["asin"]
    if view.kind == "item" and view.asin == target:
        for name, value in wanted_options(session.shop.product(target), goal).items():
            if view.option_dict.get(name) != value:
                return f"click[{value}]", f"The instruction asks for {name} {value}, so I select it."
        return (
            "click[Buy Now]",
            "This product and its options match the instruction within the budget, so I buy it.",
        )
    if view.kind == "sub" and view.asin == target:
        return "click[< Prev]", "I have read enough here; I go back to the product page."
    query = oracle_query(session)
    if view.kind == "results" and view.keywords == tuple(query.split(" ")):
        results = session.results(view.keywords)
        if target in results:
            page = results.index(target) // PRODUCTS_PER_PAGE + 1
            if page == view.page:
                return f"click[{target}]", f"Result {target} fits the instruction, so I open it."
            if page > view.page:
                return "click[Next >]", "The product I want is not on this page; I look at the next one."
            return "click[< Prev]", "The product I want was on an earlier page; I go back."
    return f"search[{query}]", "I search the store for the product the instruction describes."


def shopper_step(session: ShopSession) -> tuple[str, str] | None:
    """(action, reason) of a shopper that knows only what the pages show, for warm starts a policy can
    imitate: the oracle opens the goal's own product, which its title alone picks out in about a
    third of the tasks (the rest of its clicks cannot be learnt from the page). This shopper searches
    the instruction (without its price clause), opens the first result priced under the limit, chooses
    each option the instruction names, and buys; on the built-in shop it succeeds about as often as the
    oracle (docs/notes/warmstart.md, WebShop)."""
    if session.done:
        return None
    goal, view = session.goal, session.view
    instruction = str(goal["instruction_text"])
    query = _clean(_PRICE_CLAUSE.sub("", instruction))
    if view.kind == "item" and view.asin is not None:
        for name, values in session.shop.product(view.asin)["options"].items():
            value = max((v for v in values if v.lower() in instruction.lower()), key=len, default=None)
            if value is not None and view.option_dict.get(name) != value:
                return f"click[{value}]", f"The instruction asks for {name} {value}, so I select it."
        return "click[Buy Now]", "I have chosen the options the instruction names, so I buy it."
    if view.kind == "sub":
        return "click[< Prev]", "I have read enough here; I go back to the product page."
    if view.kind == "results" and view.keywords == tuple(query.split(" ")):
        results = session.results(view.keywords)
        shown = results[(view.page - 1) * PRODUCTS_PER_PAGE : view.page * PRODUCTS_PER_PAGE]
        limit = float(goal.get("price_upper") or 0) or float("inf")
        for asin in shown:
            pricing = session.shop.product(asin)[
                "pricing"
            ]  # as the page shows it: one price, or the low end of a range
            if pricing and pricing[0] < limit:
                return (
                    f"click[{asin}]",
                    f"Result {asin} is the first priced under {limit:g} dollars, so I open it.",
                )
        if view.page * PRODUCTS_PER_PAGE < len(results):
            return "click[Next >]", "Nothing on this page is under the price limit; I look at the next one."
    return f"search[{query}]", "I search the store for the product the instruction describes."
