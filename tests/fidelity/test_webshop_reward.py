"""WebShop's reward on hand-built cases, one or more per branch of the original ``get_reward``.

Expected values are worked out by hand from the original's rules (``test_webshop_original``'s
docstring states them); each case is checked on toolgym's ``get_reward`` and on the independent
reading of the original, so a mistake in either shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import isclose
from typing import Any

import pytest

from toolgym.plugins.webshop.reward import get_reward, normalize_color, normalize_goal_option, token_set_ratio

from .test_webshop_original import colour, original_score, token_set


def words(text: str) -> list[str]:
    """A noun tagger that calls every word a noun, so title scores are easy to work out."""
    return text.lower().split()


def goal(**changes: Any) -> dict[str, Any]:
    g = {
        "query": "q",
        "product_category": "a › b › c",
        "name": "oak shelf",
        "attributes": ["metal frame"],
        "goal_options": ["white"],
        "price_upper": 50.0,
    }
    g.update(changes)
    return g


def product(**changes: Any) -> dict[str, Any]:
    p = {
        "query": "q",
        "product_category": "a › b › c",
        "name": "oak shelf",
        "Title": "Oak Shelf",
        "Attributes": ["metal frame"],
        "BulletPoints": [],
        "Description": "",
    }
    p.update(changes)
    return p


def both(p: Mapping[str, Any], g: Mapping[str, Any], price: float, options: Mapping[str, str]) -> float:
    ours = get_reward(p, g, price, options, nouns=words)[0]
    theirs = original_score(p, g, price, options, words)
    assert isclose(ours, theirs), (ours, theirs)
    return ours


# -- the fuzzy rule: thefuzz's token_set_ratio, strictly above 85 -------------------------------


@pytest.mark.parametrize(
    ("short", "long", "ratio"), [(17, 23, 85), (43, 57, 86), (171, 229, 86), (169, 231, 84)]
)
def test_ratio_is_rounded_like_python_round(short: int, long: int, ratio: int) -> None:
    # one word each, no shared word: the ratio is 2·LCS / total length (17+23 → 85.0, 171+229 → 85.5 → 86)
    a, b = "x" * short, "x" * long
    assert token_set_ratio(a, b) == token_set(a, b) == ratio


@pytest.mark.parametrize(("short", "long", "matches"), [(17, 23, False), (43, 57, True), (171, 229, True)])
def test_threshold_85_fails_86_passes_for_options_and_attributes(
    short: int, long: int, matches: bool
) -> None:
    a, b = "x" * short, "x" * long
    # options: goal 1 option, attributes matched, price ok → 3/3 or 2/3
    assert both(product(), goal(goal_options=[a]), 10.0, {"size": b}) == (1.0 if matches else 2 / 3)
    # attributes: no option, the goal's attribute against the product's (no text fallback here)
    assert both(product(Attributes=[b]), goal(attributes=[a], goal_options=[]), 10.0, {}) == (
        1.0 if matches else 0.5
    )


def test_token_set_reads_words_as_thefuzz_does() -> None:
    assert token_set_ratio("Pack of 12", "pack-of-12!") == 100  # punctuation to spaces, lower case
    assert token_set_ratio("powder snow", "cool powder snow") == 100  # one set inside the other
    assert token_set_ratio("café", "caf") == 100  # characters 128-255 are dropped
    assert token_set_ratio("", "x") == 0
    assert token_set_ratio(("size", "large"), "large") == 100  # a pair reads as str(pair)


# -- options ------------------------------------------------------------------------------------


def test_options_are_counted_per_goal_option_at_most_once() -> None:
    g = goal(goal_options=["white", "large"])
    assert (
        both(product(), g, 10.0, {"a": "white", "b": "white", "c": "white"}) == 3 / 4
    )  # white once, large missed
    assert both(product(), g, 10.0, {"color": "white", "size": "large", "extra": "oak"}) == 1.0
    # one chosen value may satisfy two goal options (the loop runs over goal options)
    assert both(product(), goal(goal_options=["white", "white color"]), 10.0, {"color": "white"}) == 1.0
    # no substring fallback: a chosen value printed in the title earns nothing
    assert both(product(Title="Oak Shelf 3 Tier"), g, 10.0, {"size": "3 tier"}) == 2 / 4


def test_size_is_fuzzy_like_every_option() -> None:
    g = goal(goal_options=["8 fl oz (pack of 1)"])
    assert both(product(), g, 10.0, {"size": "8 fl oz (pack of 2)"}) == 1.0  # 87 > 85
    assert both(product(), g, 10.0, {"size": "16 fl oz (pack of 1)"}) == 1.0
    assert (
        both(product(), goal(goal_options=["x-large"]), 10.0, {"size": "large"}) == 1.0
    )  # {large} ⊂ {x, large}
    assert both(product(), goal(goal_options=["small"]), 10.0, {"size": "large"}) == 2 / 3


def test_colour_normalisation_takes_the_first_colour_of_the_list() -> None:
    # the list is alphabetical and tested as substrings: "dark wash" → "ash", "violet lavender" → "lavender"
    for value, expected in [
        ("black forest", "black"),
        ("violet lavender", "lavender"),
        ("dark wash", "ash"),
        ("navy blue", "blue"),
        ("royal blue", "blue"),
        ("webshop", "webshop"),
        ("", ""),
    ]:
        assert normalize_color(value) == colour(value) == expected
    assert both(product(), goal(goal_options=["navy blue"]), 10.0, {"color": "royal blue"}) == 1.0
    assert both(product(), goal(goal_options=["violet"]), 10.0, {"color": "violet lavender"}) == 2 / 3


def test_synthetic_goals_compare_name_value_pairs() -> None:
    # a pair is replaced by a colour only when its value is exactly a colour word
    assert normalize_goal_option(("color", "black")) == colour(("color", "black")) == "black"
    assert (
        normalize_goal_option(("color", "dark wash"))
        == colour(("color", "dark wash"))
        == ("color", "dark wash")
    )
    synthetic = goal(goal_options={"color": "dark wash", "size": "30"})
    # the exact purchase misses the colour: "dark wash" → "ash" against the words {color, dark, wash}
    assert both(product(), synthetic, 10.0, {"color": "dark wash", "size": "30"}) == 3 / 4
    assert (
        both(
            product(),
            goal(goal_options={"color": "black", "size": "30"}),
            10.0,
            {"color": "jet black", "size": "30"},
        )
        == 1.0
    )
    # the option's name joins the words: "size" alone matches the pair ("size", "30") entirely
    assert both(product(), goal(goal_options={"size": "30"}), 10.0, {"fit": "size"}) == 1.0
    # denominators count the dict's entries
    assert both(product(), goal(goal_options={"a": "1", "b": "2", "c": "3"}), 10.0, {}) == 2 / 5


def test_human_goal_options_are_plain_values() -> None:
    assert both(product(), goal(goal_options=["30"]), 10.0, {"fit": "size"}) == 2 / 3
    assert both(product(), goal(goal_options=[]), 10.0, {"color": "white"}) == 1.0  # r_option None, 2/2


# -- attributes ---------------------------------------------------------------------------------


def test_attribute_fallback_searches_title_features_description() -> None:
    g = goal(attributes=["metal frame", "easy assemble", "tea"], goal_options=[])
    bare = product(Attributes=[], Title="Oak Shelf", BulletPoints=[], Description="")
    assert both(bare, g, 10.0, {}) == 1 / 4
    assert both(product(Attributes=[], Title="Oak METAL FRAME Shelf"), g, 10.0, {}) == 2 / 4
    assert (
        both(product(Attributes=[], BulletPoints=["Easy", "assemble"]), g, 10.0, {}) == 2 / 4
    )  # joined with a space
    assert (
        both(product(Attributes=[], Description="Steam cleaned"), g, 10.0, {}) == 2 / 4
    )  # "tea" inside "steam"
    # attributes are not colour-normalised: "navy blue" does not match "royal blue"
    assert (
        both(product(Attributes=["royal blue"]), goal(attributes=["navy blue"], goal_options=[]), 10.0, {})
        == 1 / 2
    )


# -- price --------------------------------------------------------------------------------------


def test_price_limit_is_inclusive() -> None:
    assert both(product(), goal(), 50.0, {"color": "white"}) == 1.0
    assert both(product(), goal(), 50.01, {"color": "white"}) == 2 / 3


# -- type ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bought", "changes", "r_type"),
    [
        ({}, {}, 1.0),
        # title score 0 → 0 even with query and category matching
        ({"name": "brass lamp"}, {}, 0.0),
        # 1 of 11 goal nouns (0.09 < 0.1) → 0.1 even with query and category matching
        ({"name": "n1"}, {"name": " ".join(f"n{i}" for i in range(1, 12))}, 0.1),
        # 1 of 10 (0.1): no query, category or title (> 0.2) match → 0.5; with the query → 1
        (
            {"name": "n1", "query": "other", "product_category": "x › y › c"},
            {"name": " ".join(f"n{i}" for i in range(1, 11))},
            0.5,
        ),
        (
            {"name": "n1", "product_category": "x › y › c"},
            {"name": " ".join(f"n{i}" for i in range(1, 11))},
            1.0,
        ),
        # exactly 0.2 is not above 0.2 → 0.5; two shared category levels (any order) → 1
        ({"name": "n1", "query": "other", "product_category": "x › y › c"}, {"name": "n1 n2 n3 n4 n5"}, 0.5),
        ({"name": "n1", "query": "other", "product_category": "c › y › a"}, {"name": "n1 n2 n3 n4 n5"}, 1.0),
        ({"name": "n1", "query": "other", "product_category": "a › a › d"}, {"name": "n1 n2 n3 n4 n5"}, 0.5),
        (
            {"name": "n1 n2", "query": "other", "product_category": "x › y › c"},
            {"name": "n1 n2 n3 n4 n5"},
            1.0,
        ),
        # no nouns in the goal's name → title score 0.2
        ({"query": "other", "product_category": "x"}, {"name": ""}, 0.5),
        ({"query": "other"}, {"name": ""}, 1.0),
    ],
)
def test_type_reward_branches(bought: dict[str, Any], changes: dict[str, Any], r_type: float) -> None:
    g = goal(goal_options=[], **changes)
    assert both(product(**bought), g, 10.0, {}) == r_type
    assert get_reward(product(**bought), g, 10.0, {}, nouns=words)[1]["r_type"] == r_type


def test_parts_and_weights_as_the_original_reports_them() -> None:
    score, parts = get_reward(
        product(),
        goal(attributes=["metal frame", "oak"], goal_options=["white", "small"]),
        60.0,
        {"color": "white"},
        nouns=words,
    )
    assert isclose(score, 3 / 5)
    assert parts["r_att"] == 1.0 and parts["r_option"] == 0.5 and parts["r_price"] == 0.0
    assert (parts["w_att"], parts["w_option"], parts["w_price"]) == (2 / 5, 2 / 5, 1 / 5)
    assert "r_option" not in get_reward(product(), goal(goal_options=[]), 10.0, {}, nouns=words)[1]
