"""WebShop's site as the original text environment presents it: pages in ``text`` mode (visible
texts joined by `` [SEP] ``, in the templates' order), clickables, what each action does, the
instruction text and the episode limit.

Expected strings are built from the published templates (``search_page``, ``results_page``,
``item_page``) and ``WebAgentTextEnv.step``/``SimServer.receive``, not from toolgym's renderer.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from toolgym import Action, ActionKind
from toolgym.plugins.webshop.env import WebShopEnv
from toolgym.plugins.webshop.goals import PRICE_RANGE
from toolgym.plugins.webshop.pages import View
from toolgym.plugins.webshop.session import ShopSession, parse_action
from toolgym.plugins.webshop.shop import Shop, ShopConfig, get_shop

SEP = " [SEP] "


@pytest.fixture(scope="module")
def shop() -> Shop:
    return get_shop(ShopConfig())


def start(shop: Shop, goal: int = 8) -> ShopSession:
    return ShopSession(shop, goal)


def head(s: ShopSession) -> str:
    return f"Instruction:{SEP}{s.instruction}{SEP}Back to Search"


def results_text(s: ShopSession, asins: list[str], page: int, total: int) -> str:
    nav = ["< Prev", "Next >"] if page > 1 else ["Next >"]  # the template always offers Next >
    items = [x for a in asins for x in (a, s.shop.product(a)["Title"], s.shop.product(a)["Price"])]
    return SEP.join([head(s), f"Page {page} (Total results: {total})", *nav, *items])


def item_text(s: ShopSession, asin: str) -> str:
    p = s.shop.product(asin)
    options = [x for name, values in p["options"].items() for x in (name, *values)]
    return SEP.join(
        [
            head(s),
            "< Prev",
            *options,
            p["Title"],
            f"Price: {p['Price']}",
            f"Rating: {p['Rating']}",
            "Description",
            "Features",
            "Reviews",
            "Buy Now",
        ]
    )


def test_parse_action_as_published() -> None:
    assert parse_action("search[white bookshelf]") == ("search", "white bookshelf")
    assert parse_action("click[Buy Now]") == ("click", "Buy Now")
    assert parse_action("click[a[b]]") == ("click[a", "b]")  # greedy, as the original's (.+)\[(.+)\]
    assert parse_action("search[]") == ("search[]", None)
    assert parse_action("buy") == ("buy", None)


def test_start_page(shop: Shop) -> None:
    s = start(shop)
    assert s.observation() == f"WebShop{SEP}Instruction:{SEP}{s.instruction}{SEP}Search"
    assert s.available_actions() == {"has_search_bar": True, "clickables": ["search"]}
    for noop in ("click[search]", "search[]", "click[buy now]", "look", "click[back to search]"):
        out = s.step(noop)
        assert not out.valid and not out.done and s.view.kind == "start", noop


def test_results_pages_ten_at_a_time_with_prev_and_next(shop: Shop) -> None:
    s = start(shop)
    assert s.step("search[Metal Frame Bookshelf]").valid  # the argument is lowercased
    found = s.results(("metal", "frame", "bookshelf"))
    assert 10 < len(found) <= 50
    assert s.observation() == results_text(s, found[:10], 1, len(found))
    clickables = s.available_actions()
    assert clickables == {
        "has_search_bar": False,
        "clickables": ["back to search", "next >", *(a.lower() for a in found[:10])],
    }
    assert s.step("click[Next >]").valid and s.observation() == results_text(s, found[10:20], 2, len(found))
    assert s.step("click[< Prev]").valid and s.observation() == results_text(s, found[:10], 1, len(found))
    assert not s.step("click[< Prev]").valid  # no < Prev on page 1


def test_item_page_options_sub_pages_back_and_buy(shop: Shop) -> None:
    s = start(shop)
    s.step("search[metal frame bookshelf]")
    target = s.goal["asin"]
    page = s.results(("metal", "frame", "bookshelf")).index(target) // 10 + 1
    for _ in range(page - 1):
        s.step("click[next >]")
    assert s.step(f"click[{target.lower()}]").valid and s.view.asin == target  # ASINs are matched lowercased
    assert s.observation() == item_text(s, target)
    product = shop.product(target)
    values = [v for vs in product["options"].values() for v in vs]
    assert s.available_actions()["clickables"] == [
        "back to search",
        "< prev",
        *values,
        "description",
        "features",
        "reviews",
        "buy now",
    ]
    name, (first, second, *_) = next(iter(product["options"].items()))
    s.step(f"click[{first}]")
    s.step(f"click[{second}]")  # a second value of the same option replaces the first
    assert s.view.option_dict == {name: second} and s.observation() == item_text(s, target)
    assert s.step("click[Description]").valid and s.observation() == SEP.join(
        [head(s), "< Prev", product["Description"]]
    )
    assert s.step("click[< Prev]").valid and s.view.kind == "item" and s.view.option_dict == {name: second}
    assert s.step("click[< Prev]").valid and s.view.kind == "results" and s.view.page == page
    s.step(f"click[{target}]")
    assert s.step("search[oak]").valid and s.view.kind == "results"  # search works from any page
    s.step(f"click[{s.results(('oak',))[0]}]")
    assert s.step("click[Back to Search]").valid and s.view.kind == "start" and not s.visited


def test_buy_now_ends_the_episode_with_the_score(shop: Shop) -> None:
    s = start(shop)
    target = s.goal["asin"]
    s.step("search[metal frame bookshelf]")
    s.view = View("item", s.view.keywords, 1, target, ())
    out = s.step("click[Buy Now]")
    assert out.valid and out.done and out.score == s.score and out.score is not None
    assert out.score == shop.score(s.goal, target, {})[0]
    assert not s.step("search[anything]").valid  # the session is over


def _price_clause(text: str) -> tuple[str, float | None]:
    m = re.search(r", and price lower than (\d+\.\d\d) dollars$", text)
    return (text[: m.start()], float(m.group(1))) if m else (text, None)


@pytest.mark.parametrize("human", [True, False])
def test_instruction_text_format(human: bool) -> None:
    shop = get_shop(ShopConfig(human_goals=human))
    for goal in shop.goals:
        product = shop.product(goal["asin"])
        body, limit = _price_clause(goal["instruction_text"])
        price = shop.catalog.prices[goal["asin"]]
        above = [p for p in PRICE_RANGE if p > price][:4]
        if limit is None:
            assert len(above) < 2 and goal["price_upper"] == 1_000_000
        else:
            assert limit == goal["price_upper"] and limit in above[1:]  # the larger of two drawn
        if human:
            written = {ins["instruction"].strip(".") for ins in product["instructions"]}
            assert body in written
        else:
            options = ", and ".join(f"{k}: {v}" for k, v in goal["goal_options"].items())
            assert body == product["instruction_text"] + (f" with {options}" if options else "")
            assert list(goal["goal_options"]) == sorted(product["options"])


def test_episode_limit_and_turn_count() -> None:
    """The original text environment has no step limit; verl-agent stops WebShop episodes after 15
    steps, which is toolgym's default (``max_turns``)."""
    assert WebShopEnv().max_turns == 15 and WebShopEnv(max_turns=40).max_turns == 40


async def test_environment_reward_is_the_score_on_buy_only() -> None:
    env = WebShopEnv(split="test")
    await env.reset(seed=3)
    rewards: list[Any] = []
    while True:
        action = await env.scripted_action()
        assert action is not None
        result = await env.step(Action(action, ActionKind.COMMAND, command=action))
        rewards.append(result.reward)
        if result.terminated:
            break
    assert rewards[:-1] == [0.0] * (len(rewards) - 1) and rewards[-1] == result.info["task_score"]
