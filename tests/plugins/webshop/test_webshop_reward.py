"""The published reward on hand-built cases, its fuzzy and colour rules, and the noun tagger."""

from __future__ import annotations

from math import isclose
from typing import Any

import pytest

from toolgym.plugins.webshop.nouns import make_noun_tagger, rule_nouns, tokenize
from toolgym.plugins.webshop.reward import (
    attribute_reward,
    get_reward,
    normalize_color,
    option_reward,
    strict_option_reward,
    token_set_ratio,
    type_reward,
)

SHOE = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"
SOUNDBAR = "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
CORD = "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System"


def goal(**changes: Any) -> dict[str, Any]:
    g = {
        "query": "sneakers",
        "product_category": "a › b › c",
        "name": SHOE,
        "attributes": ["tea tree", "essential oils", "natural ingredients"],
        "goal_options": {"color": "grey", "size": "xl"},
        "price_upper": 40.0,
    }
    g.update(changes)
    return g


def product(**changes: Any) -> dict[str, Any]:
    p = {
        "query": "sneakers",
        "product_category": "a › b › c",
        "name": SHOE,
        "Title": SHOE,
        "Attributes": ["tea tree", "essential oil", "natural ingredients"],
        "BulletPoints": [],
        "Description": "",
    }
    p.update(changes)
    return p


def test_perfect_purchase_scores_one() -> None:
    score, parts = get_reward(product(), goal(), price=35.0, options={"color": "grey", "size": "xl"})
    assert score == 1.0
    assert (
        parts["r_type"] == 1.0
        and parts["r_att"] == 1.0
        and parts["r_option"] == 1.0
        and parts["r_price"] == 1.0
    )


def test_wrong_option_loses_its_share() -> None:
    score, parts = get_reward(product(), goal(), price=35.0, options={"color": "grey", "size": "small"})
    assert isclose(score, 5 / 6) and parts["r_option"] == 0.5
    # a chosen value found in the title earns nothing ("l" is in "basketball"): options have no substring fallback
    assert isclose(
        get_reward(product(), goal(), price=35.0, options={"color": "grey", "size": "l"})[0], 5 / 6
    )


def test_options_whose_values_appear_in_the_title_do_not_raise_the_score() -> None:
    """Attack: pick option values printed in the title (``3 tier``) instead of the goal's colour.
    Before the reward took the original's semantics, each chosen option was counted, with a substring fallback on the title, so this
    scored 1.0; the original counts goal options, none of which was chosen."""
    shelf = product(Title="Oak 3 Tier Bookshelf", name="Oak 3 Tier Bookshelf")
    wanted = goal(goal_options=["white"], name="Oak 3 Tier Bookshelf")
    honest = get_reward(shelf, wanted, price=35.0, options={})[0]
    for choice in (
        {"color": "oak", "size": "3 tier"},
        {"size": "3 tier"},
        {"a": "oak", "b": "3 tier", "c": "bookshelf"},
    ):
        assert get_reward(shelf, wanted, price=35.0, options=choice)[0] == honest == 0.8
    # repeating the goal's value under several names cannot count it twice
    assert get_reward(shelf, wanted, price=35.0, options={"a": "white", "b": "white"})[0] == 1.0
    assert (
        get_reward(
            shelf,
            goal(goal_options=["white", "large"], name=shelf["name"]),
            35.0,
            {"a": "white", "b": "white"},
        )[0]
        == 5 / 6
    )


def test_over_price_loses_its_share() -> None:
    score, parts = get_reward(product(), goal(), price=45.0, options={"color": "grey", "size": "xl"})
    assert isclose(score, 5 / 6) and parts["r_price"] == 0.0


def test_wrong_type_scales_the_score() -> None:
    bought = product(query="other", product_category="a › d › e", name=CORD, Title=CORD)
    score, parts = get_reward(
        bought, goal(name=SOUNDBAR), price=35.0, options={"color": "grey", "size": "xl"}
    )
    assert parts["r_type"] == 0.5 and isclose(parts["title_score"], 2 / 12)
    assert isclose(score, 0.5)
    unrelated = product(
        query="other", product_category="x › y", name="Rusticware 921ORB Kitchen and Bath Cabinet Knob"
    )
    assert get_reward(unrelated, goal(), price=35.0, options={"color": "grey", "size": "xl"})[0] == 0.0


def test_attribute_fuzzy_and_substring_fallback() -> None:
    assert attribute_reward(product(), ["tea tree", "essential oils", "natural ingredients"]) == (1.0, 3)
    in_text = product(
        Attributes=[],
        BulletPoints=["This shampoo has essential oils"],
        Description="made with natural ingredients",
    )
    r, n = attribute_reward(in_text, ["tea tree", "essential oils", "natural ingredients"])
    assert n == 2 and isclose(r, 2 / 3)
    none = product(
        Attributes=["tea bag", "earl gray"],
        Title="English tea",
        BulletPoints=["Calming"],
        Description="Lipton",
    )
    assert attribute_reward(none, ["tea tree", "essential oils"]) == (0.0, 0)


def test_option_rules() -> None:
    assert option_reward(["grey", "XL", "pack of 12"], ["pack of 12", "grey", "XL"]) == (1.0, 3)
    r, n = option_reward(["grey", "XL", "pack of 12"], ["pack of 12", "blue", "XL"])
    assert n == 2 and isclose(r, 2 / 3)
    assert option_reward(["cool powder snow", "XL"], ["powder snow", "XL"]) == (1.0, 2)
    assert option_reward([], ["red"]) == (None, 0)
    assert option_reward(["a", "b"], []) == (0.0, 0)
    # size is fuzzy like every option: one word of difference in a long size still matches
    assert option_reward(["8 fl oz (pack of 1)"], ["8 fl oz (pack of 2)"]) == (1.0, 1)
    assert option_reward(["x-large"], ["large"]) == (1.0, 1)  # {large} ⊂ {x, large}: token-set ratio 100
    # colours are normalised first: "navy blue" and "royal blue" both become "blue"
    assert option_reward(["navy blue"], ["royal blue"]) == (1.0, 1)
    # synthetic goals compare (name, value) pairs
    assert option_reward([("color", "black")], ["jet black"]) == (1.0, 1)
    assert option_reward([("color", "dark wash")], ["dark wash"]) == (0.0, 0)  # bought side becomes "ash"


def test_strict_variant_counts_equal_values_once() -> None:
    assert strict_option_reward([("size", "8 fl oz (pack of 1)")], {"size": "8 fl oz (pack of 2)"}) == (
        0.0,
        0,
    )
    assert strict_option_reward([("size", "large")], {"Size": " Large "}) == (1.0, 1)
    assert strict_option_reward([("size", "large")], {"color": "large"}) == (0.0, 0)
    assert strict_option_reward(["navy blue"], {"color": "royal blue"}) == (0.0, 0)
    assert strict_option_reward(["white", "white"], {"a": "white"}) == (0.5, 1)
    assert strict_option_reward(["white", "white"], {"a": "white", "b": "white"}) == (1.0, 2)
    shelf = product(Title="Oak 3 Tier Bookshelf")
    assert get_reward(shelf, goal(), 35.0, {"color": "grey", "size": "xl"}, variant="strict")[0] == 1.0
    assert isclose(
        get_reward(shelf, goal(), 35.0, {"color": "gray", "size": "xl"}, variant="strict")[0], 5 / 6
    )
    with pytest.raises(ValueError, match="unknown WebShop reward 'lenient'"):
        get_reward(shelf, goal(), 35.0, {}, variant="lenient")  # type: ignore[arg-type]


def test_color_normalisation() -> None:
    cases = [
        ("", ""),
        ("black forest", "black"),
        ("violet lavender", "lavender"),
        ("steelivy fuchsia", "fuchsia"),
        ("123alabaster", "alabaster"),
        ("webshop", "webshop"),
    ]
    for value, expected in cases:
        assert normalize_color(value) == expected


def test_token_set_ratio_matches_thefuzz_rules() -> None:
    assert token_set_ratio("fuzzy was a bear", "fuzzy fuzzy was a bear") == 100
    assert token_set_ratio("Essential-Oils!", "essential oils") == 100
    assert token_set_ratio("tea tree", "tea bag") < 85
    assert isinstance(token_set_ratio("a", "b"), int)


def test_type_reward_parts() -> None:
    g = {"query": "q1", "product_category": "a › b › c", "name": "Name One"}
    same = type_reward({**g}, g)
    assert same == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0}
    assert type_reward({**g, "product_category": "b › c › a"}, g)["category_match"]
    assert type_reward({**g, "product_category": "a › a › b"}, g)["category_match"]
    assert not type_reward({**g, "product_category": "a › a › d"}, g)["category_match"]


@pytest.mark.parametrize(
    ("wanted", "bought", "expected"),
    [
        (
            "adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe",
            "adidas Unisex-Adult D.o.n. Issue 2 Indoor Court Shoe",
            0.857,
        ),
        (SOUNDBAR + " Home Theater System Subwoofer", CORD, 0.3125),
        (SOUNDBAR, CORD, 0.1667),
        (
            "Rusticware 921ORB Kitchen and Bath Cabinet Knob",
            "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup Tweezers (Silver)",
            0.0,
        ),
    ],
)
def test_title_scores_match_the_published_spacy_values(wanted: str, bought: str, expected: float) -> None:
    score = type_reward(
        {"query": "x", "product_category": "p", "name": bought},
        {"query": "y", "product_category": "q", "name": wanted},
    )
    assert isclose(score["title_score"], expected, abs_tol=1e-3)


def test_noun_tagger_rules() -> None:
    assert tokenize("Unisex-Adult D.o.n. (Silver) DVD/VCR") == [
        "Unisex",
        "-",
        "Adult",
        "D.o.n.",
        "(",
        "Silver",
        ")",
        "DVD",
        "/",
        "VCR",
    ]
    assert rule_nouns("Portable Stainless Steel Tweezers for Women, 2 Pack") == [
        "steel",
        "tweezers",
        "women",
        "pack",
    ]
    assert rule_nouns("UL Listed 4K Cable") == ["ul", "cable"]
    with pytest.raises(ValueError, match="unknown noun tagger"):
        make_noun_tagger("nltk")
