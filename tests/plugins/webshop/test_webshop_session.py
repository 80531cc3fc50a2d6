"""Action semantics: no-ops, search from any page, pagination, options, sub-pages, Buy Now."""

from __future__ import annotations

import pytest

from toolgym.plugins.webshop.session import ShopSession, parse_action
from toolgym.plugins.webshop.shop import Shop


def test_parse_action() -> None:
    assert parse_action("click[Buy Now]") == ("click", "Buy Now")
    assert parse_action("search[red shoes]") == ("search", "red shoes")
    assert parse_action("buy it") == ("buy it", None)


@pytest.mark.parametrize(
    "action",
    [
        "buy the shoes",
        "click[nothing here]",
        "search[]",
        "search[   ]",
        "jump[x]",
        "click[search]",
        "click[Buy Now]",
        "click[Next >]",
    ],
)
def test_invalid_actions_are_noops(session: ShopSession, action: str) -> None:
    before = session.observation()
    outcome = session.step(action)
    assert not outcome.valid and not outcome.done and outcome.info["error"]
    assert session.observation() == before


def test_search_from_any_page(session: ShopSession) -> None:
    target = session.goal["asin"]
    session.step("search[olive oil]")
    assert session.view.kind == "results"
    session.step(f"search[{session.shop.product(target)['Title']}]")
    session.step(f"click[{target}]")
    session.step("click[Features]")
    assert session.view.kind == "sub"
    assert session.step("search[coffee beans]").valid
    assert session.view.kind == "results" and session.view.keywords == ("coffee", "beans")


def test_pagination_walks_all_fifty_results(session: ShopSession, shop: Shop) -> None:
    session.step("search[olive oil]")
    seen = []
    for page in range(1, 6):
        seen += [a.upper() for a in session.page.clickables if a.startswith("b0")]
        assert ("< prev" in session.page.clickables) == (page > 1)
        session.step("click[Next >]")
    assert seen == [p["asin"] for p in shop.search(("olive", "oil"))] and len(seen) == 50
    assert session.observation().split(" [SEP] ")[3] == "Page 6 (Total results: 50)"
    assert not [a for a in session.page.clickables if a.startswith("b0")]
    session.step("click[< Prev]")
    assert session.view.page == 5


def test_options_sub_pages_and_prev(session: ShopSession, shop: Shop) -> None:
    target = session.goal["asin"]
    session.step(f"search[{shop.product(target)['Title']}]")
    session.step(f"click[{target.lower()}]")
    options = shop.product(target)["options"]
    name = next(iter(options))
    assert session.step(f"click[{options[name][0]}]").valid
    assert session.view.option_dict == {name: options[name][0]}
    session.step(f"click[{options[name][-1]}]")
    assert session.view.option_dict == {name: options[name][-1]}
    session.step("click[Reviews]")
    assert session.view.kind == "sub" and session.view.sub == "Reviews"
    session.step("click[< Prev]")
    assert session.view.kind == "item" and session.view.option_dict == {name: options[name][-1]}
    session.step("click[< Prev]")
    assert session.view.kind == "results" and session.view.options == ()
    session.step("click[Back to Search]")
    assert session.view.kind == "start" and session.visited == set()


def test_buy_now_ends_the_session_with_the_published_score(session: ShopSession, shop: Shop) -> None:
    target = session.goal["asin"]
    session.step(f"search[{shop.product(target)['Title']}]")
    session.step(f"click[{target}]")
    outcome = session.step("click[Buy Now]")
    assert outcome.done and outcome.valid and session.done
    expected, _ = shop.score(session.goal, target, {})
    assert outcome.score == expected
    assert not session.step("search[anything]").valid


def test_the_page_shopper_buys_without_knowing_the_goal_product(shop: Shop) -> None:
    """The warm start's WebShop expert (``shopper_step``) must be imitable: its choices depend on the
    instruction and the pages only. Hiding the goal's product id from it changes nothing, and it still
    buys a product that satisfies the goal (score 1) in most tasks, mostly not the goal's own product."""
    from toolgym.plugins.webshop.oracle import shopper_step

    def play(index: int, hide_target: bool) -> tuple[list[str], float, str | None]:
        s = ShopSession(shop, index)
        if hide_target:
            s.goal = {
                **s.goal,
                "asin": "B000000000",
            }  # what the oracle would walk to; the shopper must not care
        commands = []
        for _ in range(15):
            step = shopper_step(s)
            if step is None:
                break
            commands.append(step[0])
            outcome = s.step(step[0])
            assert outcome.valid, (step, outcome.info)
        opened = next((c[6:-1] for c in commands if c.startswith("click[B")), None)
        return commands, s.score, opened

    scores, own = [], 0
    for index in range(60):
        commands, score, opened = play(index, hide_target=False)
        assert play(index, hide_target=True)[0] == commands
        first = [
            p
            for p in ShopSession(shop, index).results(tuple(commands[0][7:-1].split(" ")))[:10]
            if shop.product(p)["pricing"][0] < float(ShopSession(shop, index).goal["price_upper"])
        ]
        assert opened == first[0]  # the first result under the limit
        scores.append(score)
        own += opened == ShopSession(shop, index).goal["asin"]
    assert sum(s >= 1 - 1e-9 for s in scores) >= 0.8 * len(scores) and own <= 0.6 * len(scores)
