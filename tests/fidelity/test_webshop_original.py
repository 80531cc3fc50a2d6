"""An independent reading of WebShop's published reward (``web_agent_site/engine/goal.py``), for tests.

Written from the original's behaviour, not from toolgym's ``reward.py``, so that the two can be
compared. What the original does, step by step:

- fuzzy score: thefuzz's ``token_set_ratio``: both sides pass through ``str()``, characters 128-255
  are dropped, anything but letters and digits becomes a space, lower case; the sets of words are
  split into their intersection and the two differences, and the best of three ``ratio``s (the
  sorted intersection against each side, and the two sides against each other) is rounded to an
  integer with Python's ``round``. ``ratio`` is ``2·matches / total length``: with
  python-Levenshtein or thefuzz ≥ 0.20 the matches are the longest common subsequence (``indel``);
  thefuzz 0.19 without python-Levenshtein (the pinned requirement) uses ``difflib``'s blocks.
- options: the goal's options are the list of values (human goals) or, for synthetic goals, the
  dict's ``.items()``, that is ``(name, value)`` pairs; a pair stringifies as ``"('size', 'large')"``,
  so the option's name joins its words. Colour normalisation replaces a string by the first word
  of the colour list that it contains; for a pair, ``in`` tests membership, so only a value equal
  to a colour word is replaced. Each goal option counts once when any bought value scores > 85.
- attributes: each goal attribute counts once when a bought attribute scores > 85, or else when it
  is a substring of the lowercased title, bullet points or description.
- price: 1 when the price is at most the limit; type: 1, 0.5, 0.1 or 0 from the query, the
  category levels and the share of the goal name's nouns found in the bought name.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from rapidfuzz.distance import Indel

COLOURS = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy "
    "camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral "
    "cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass "
    "gray green grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon "
    "mauve merlot midnight mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter "
    "pink plum purple rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone "
    "stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
).split()


def process(value: Any) -> str:
    """thefuzz's ``full_process(str(value), force_ascii=True)`` (≥ 0.20: non-alphanumerics, underscore included, to spaces)."""
    text = "".join(c if c.isalnum() else " " for c in str(value) if not 128 <= ord(c) <= 255)
    return text.lower().strip()


def lcs_ratio(a: str, b: str) -> float:
    return 100.0 * Indel.normalized_similarity(a, b)


def difflib_ratio(a: str, b: str) -> float:
    return 100.0 * difflib.SequenceMatcher(None, a, b).ratio()


def token_set(a: Any, b: Any, ratio: Callable[[str, str], float] = lcs_ratio) -> int:
    p, q = process(a), process(b)
    if not p or not q:
        return 0
    ta, tb = set(p.split()), set(q.split())
    sect = " ".join(sorted(ta & tb))
    c1 = (sect + " " + " ".join(sorted(ta - tb))).strip()
    c2 = (sect + " " + " ".join(sorted(tb - ta))).strip()

    def r(x: str, y: str) -> float:
        if x == y:
            return 100.0
        return ratio(x, y) if x and y else 0.0

    return round(max(r(sect, c1), r(sect, c2), r(c1, c2)))


def colour(value: Any) -> Any:
    """The original's normaliser: substring test on strings, membership on a ``(name, value)`` pair."""
    for c in COLOURS:
        if c in value:
            return c
    return value


def goal_option_items(goal: Mapping[str, Any]) -> list[Any]:
    options = goal["goal_options"]
    return list(options.items()) if isinstance(options, dict) else list(options)


def option_matches(
    bought_values: list[str], goal: Mapping[str, Any], ratio: Callable[[str, str], float] = lcs_ratio
) -> int:
    bought = [colour(v) for v in bought_values]
    wanted = [colour(o) for o in goal_option_items(goal)]
    return sum(any(token_set(b, w, ratio) > 85 for b in bought) for w in wanted)


def attribute_matches(
    product: Mapping[str, Any], goal: Mapping[str, Any], ratio: Callable[[str, str], float] = lcs_ratio
) -> int:
    n = 0
    for wanted in goal["attributes"]:
        if any(token_set(have, wanted, ratio) > 85 for have in product["Attributes"]):
            n += 1
        elif (
            wanted in product["Title"].lower()
            or wanted in " ".join(product["BulletPoints"]).lower()
            or wanted in product["Description"].lower()
        ):
            n += 1
    return n


def r_type(product: Mapping[str, Any], goal: Mapping[str, Any], nouns: Callable[[str], list[str]]) -> float:
    query = product["query"] == goal["query"]
    levels = {x.strip() for x in product["product_category"].split("›")} & {
        x.strip() for x in goal["product_category"].split("›")
    }
    wanted = nouns(goal["name"])
    title = 0.2 if not wanted else len(set(nouns(product["name"])) & set(wanted)) / len(wanted)
    if title == 0.0:
        return 0.0
    if title < 0.1:
        return 0.1
    return 1.0 if (query or len(levels) >= 2 or title > 0.2) else 0.5


def original_score(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    nouns: Callable[[str], list[str]],
    ratio: Callable[[str, str], float] = lcs_ratio,
) -> float:
    """The published ``get_reward`` total, with the given noun tagger and ``ratio``."""
    n_att = attribute_matches(product, goal, ratio)
    n_opt = option_matches(list(options.values()), goal, ratio)
    r_price = float(price <= goal["price_upper"])
    total = (n_att + n_opt + r_price) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
    return total * r_type(product, goal, nouns)
