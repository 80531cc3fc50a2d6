"""The site over HTTP: a search, an item page, options by link, a purchase scored like the text env."""

from __future__ import annotations

import html
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from toolgym.plugins.webshop.oracle import wanted_options
from toolgym.plugins.webshop.pages import View
from toolgym.plugins.webshop.server import WebShopServer, parse_view, view_url
from toolgym.plugins.webshop.shop import Shop


@pytest.fixture
def server(shop: Shop) -> Iterator[WebShopServer]:
    with WebShopServer(shop, split="test") as srv:
        yield srv


def get(server: WebShopServer, path: str) -> str:
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        return response.read().decode("utf-8")


def link(page: str, element_id: str) -> str:
    m = re.search(rf'id="{re.escape(element_id)}" href="([^"]+)"', page)
    assert m is not None, f"no link #{element_id}"
    return html.unescape(m.group(1))


def test_view_urls_round_trip() -> None:
    for view in (
        View(),
        View("results", ("red", "shoes"), 3),
        View("item", ("x",), 2, "B0ABC", (("color", "navy | blue"),)),
        View("sub", ("x",), 1, "B0ABC", (), "Reviews"),
        View("done", ("x",), 1, "B0ABC", (("size", "l"),)),
    ):
        url = urllib.parse.urlsplit(view_url("7", view))
        assert parse_view([p for p in url.path.split("/") if p][2:], urllib.parse.parse_qs(url.query)) == view


def test_search_item_and_buy_over_http(server: WebShopServer, shop: Shop) -> None:
    start = get(server, "/s/3/")
    assert 'id="search_input"' in start and 'action="/s/3/search"' in start
    state = json.loads(get(server, "/s/3/state"))
    goal = shop.goals[state["goal_index"]]
    assert state["goal_index"] == shop.split("test")[3] and state["instruction"] == goal["instruction_text"]

    title = shop.product(goal["asin"])["Title"].lower()
    results = get(server, "/s/3/search?" + urllib.parse.urlencode({"keywords": title}))
    assert "Page 1 (Total results: " in results and f'id="product-{goal["asin"]}"' in results
    item = get(server, link(results, f"product-{goal['asin']}"))
    assert (
        f"<h2>{html.escape(shop.product(goal['asin'])['Title'])}</h2>" in item and 'id="btn-buy-now"' in item
    )

    # choose the options the oracle would, by following the option links
    for name, value in wanted_options(shop.product(goal["asin"]), goal).items():
        i = shop.product(goal["asin"])["options"][name].index(value)
        item = get(server, link(item, f"option-{re.sub('[^a-z0-9]+', '-', name).strip('-')}-{i}"))
        assert 'aria-checked="true"' in item

    features = get(server, link(item, "btn-features"))
    assert "<p> " in features and 'id="btn-prev"' in features
    item = get(server, link(features, "btn-prev"))
    done = get(server, link(item, "btn-buy-now"))
    assert "Thank you for shopping with us!" in done
    state = json.loads(get(server, "/s/3/state"))
    assert state["done"] and state["score"] == 1.0 and state["reward_info"]["r_type"] == 1.0


def test_bad_urls_are_404(server: WebShopServer) -> None:
    for path in ("/nowhere", "/s/1/item/NOPE", "/s/1/search?page=x&keywords=a", "/s/1/item/B0/Unknown"):
        with pytest.raises(urllib.error.HTTPError) as err:
            get(server, path)
        assert err.value.code == 404
    assert "session 0" in get(server, "/")
