"""Page layout in the three observation modes, and the HTML's visible text equal to the text mode."""

from __future__ import annotations

from html.parser import HTMLParser

from toolgym.plugins.webshop.session import ShopSession
from toolgym.plugins.webshop.shop import Shop


class VisibleText(HTMLParser):
    """Visible texts of an HTML page, as the published text mode collects them."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in ("br", "input", "meta", "link", "img"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not (set(self.stack) & {"style", "script", "head", "title"}) and data.strip():
            self.texts.append(data.strip())


def visible(html: str) -> str:
    p = VisibleText()
    p.feed(html)
    return " [SEP] ".join(p.texts)


def goto_item(session: ShopSession) -> str:
    target = session.goal["asin"]
    session.step(f"search[{session.shop.product(target)['Title']}]")
    assert target.lower() in session.page.clickables
    session.step(f"click[{target}]")
    return target


def test_start_page_text(session: ShopSession) -> None:
    assert (
        session.observation("text") == f"WebShop [SEP] Instruction: [SEP] {session.instruction} [SEP] Search"
    )
    assert session.available_actions() == {"has_search_bar": True, "clickables": ["search"]}


def test_results_page_layout(session: ShopSession, shop: Shop) -> None:
    session.step("search[olive oil]")
    parts = session.observation("text").split(" [SEP] ")
    assert parts[:5] == [
        "Instruction:",
        session.instruction,
        "Back to Search",
        "Page 1 (Total results: 50)",
        "Next >",
    ]
    found = shop.search(("olive", "oil"))
    # ten results per page: ASIN, title, price
    assert parts[5:] == [x for p in found[:10] for x in (p["asin"], p["Title"], p["Price"])]
    session.step("click[Next >]")
    parts = session.observation("text").split(" [SEP] ")
    assert parts[3:6] == ["Page 2 (Total results: 50)", "< Prev", "Next >"]
    assert parts[6] == found[10]["asin"]


def test_item_page_layout(session: ShopSession, shop: Shop) -> None:
    target = goto_item(session)
    product = shop.product(target)
    expected = ["Instruction:", session.instruction, "Back to Search", "< Prev"]
    for name, values in product["options"].items():
        expected += [name, *values]
    expected += [
        product["Title"],
        f"Price: {product['Price']}",
        f"Rating: {product['Rating']}",
        "Description",
        "Features",
        "Reviews",
        "Buy Now",
    ]
    assert session.observation("text").split(" [SEP] ") == expected


def test_sub_pages_show_description_features_reviews(session: ShopSession, shop: Shop) -> None:
    product = shop.product(goto_item(session))
    session.step("click[Description]")
    assert session.observation().endswith(f"< Prev [SEP] {product['Description']}")
    session.step("click[< Prev]")
    session.step("click[Features]")
    assert session.observation().endswith("< Prev [SEP] " + " [SEP] ".join(product["BulletPoints"]))
    session.step("click[< Prev]")
    session.step("click[Reviews]")
    reviews = [x for r in product["Reviews"] for x in (f'"{r["title"]}"', str(r["score"]), r["body"])]
    assert session.observation().split(" [SEP] ")[4:] == reviews


def test_html_visible_text_equals_text_mode(session: ShopSession) -> None:
    pages = [session.observation("html")]
    goto_item(session)
    pages.append(session.observation("html"))
    assert visible(pages[-1]) == session.observation("text")
    session.step("click[Features]")
    assert visible(session.observation("html")) == session.observation("text")
    session.step("search[green tea]")
    assert visible(session.observation("html")) == session.observation("text")
    assert 'id="search_input"' in pages[0] and 'id="btn-buy-now"' in pages[1]


def test_text_rich_marks_buttons_and_clicked_options(session: ShopSession, shop: Shop) -> None:
    target = goto_item(session)
    rich = session.observation("text_rich")
    assert "[button] Buy Now [button_]" in rich and "[clicked button]" not in rich
    values = next(iter(shop.product(target)["options"].values()))
    session.step(f"click[{values[0]}]")
    rich = session.observation("text_rich")
    assert rich.startswith(f"You have clicked {values[0]}.\n")
    assert f"  [clicked button] {values[0]} [clicked button_]" in rich
    session.step("click[< Prev]")
    assert f"\n[clicked button] {target} [clicked button_]" in session.observation("text_rich")


def test_done_page_shows_score(session: ShopSession) -> None:
    goto_item(session)
    outcome = session.step("click[Buy Now]")
    assert (
        outcome.done
        and session.observation()
        == f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {outcome.score}"
    )


def test_a_query_word_that_stems_to_nothing_does_not_end_the_episode(
    session: ShopSession, shop: Shop
) -> None:
    """Seen in training: the policy searched `buy me a>s bookshelf please, black`. The stemmer turns
    the lone `s` into an empty term, which the index's vocabulary holds but its matrix does not, and
    bm25s raised: the episode ended in an error. The empty term must count as no term at all."""
    assert shop.search(("a>s", "bookshelf", "black")) == shop.search(("bookshelf", "black")) != []
    assert shop.search(("s",)) == []
    session.step("search[buy me a>s bookshelf please, black]")
    assert "Total results" in session.observation("text")
