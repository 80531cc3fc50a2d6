"""WebShop's published reward for a purchase (Yao et al., 2022, section 3.1; ``get_reward`` in the
original's ``web_agent_site/engine/goal.py``), and a stricter, opt-in variant.

``score = r_type × (attribute matches + option matches + r_price) / (#goal attributes + #goal options + 1)``

The default, ``original``, has the original code's semantics:

- each goal attribute counts once when some attribute of the bought product scores above 85 on
  thefuzz's ``token_set_ratio``, or, failing that, appears as a substring of the product's
  lowercased title, bullet points or description;
- each goal option counts once when any chosen value scores above 85 against it (the loop runs
  over the goal's options, so extra or repeated choices cannot add matches); size is fuzzy like
  every other option and there is no substring fallback. Both sides are colour-normalised first
  (the first word of ``COLOR_SET`` found in the value replaces it). The original passes a
  synthetic goal's options as the dict's ``items()``: each is a ``(name, value)`` pair, which the
  normaliser only replaces when the value is exactly a colour word and which thefuzz reads as
  ``str(pair)``, so the option's name joins its value's words (``size 8 fl oz pack of 1``);
- ``r_price`` is 1 when the price paid is at most the goal's limit;
- ``r_type`` is 1, 0.5, 0.1 or 0 from the query match, the category overlap (at least two shared
  levels) and the share of the goal name's nouns found in the bought product's name. The original
  tags nouns with spaCy's ``en_core_web_sm`` (NOUN, PROPN); toolgym's default tagger is an offline
  rule tagger (``nouns.py``); ``noun_tagger="spacy"`` uses spaCy when a model is installed.

``strict`` (``reward="strict"``) keeps attributes, price and type as above but counts a goal option
only when a chosen value equals it (case and spacing aside; for a synthetic goal, the value chosen
for that option's name), each choice matching at most one goal option: no colour normalisation
and no fuzzy match, so ``navy blue`` for ``royal blue`` or ``pack of 2`` for ``pack of 1`` earns
nothing.

Products and goals are the dicts the loaders build (keys ``Title``, ``BulletPoints``,
``Description``, ``Attributes``, ``query``, ``product_category``, ``name``; goals ``attributes``,
``goal_options`` (a list of values for human goals, a name → value dict for synthetic ones),
``price_upper``, ``query``, ``product_category``, ``name``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from .nouns import NounTagger, rule_nouns

FUZZY_THRESHOLD = 85
"""A fuzzy match needs a token-set ratio strictly above this (0-100, rounded as thefuzz rounds)."""
REWARD_VARIANTS = ("original", "strict")
RewardVariant = Literal["original", "strict"]
GoalOption = str | tuple[str, str]
"""A goal option as the original compares it: a value (human goals) or a ``(name, value)`` pair."""

# Colour words, in the order the published normaliser tries them: the first one found inside an
# option value replaces the whole value ("black forest" → "black", "violet lavender" → "lavender").
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown "
    "burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac "
    "copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite "
    "grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon leopard light "
    "lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural "
    "navy nude olive orange peach pewter pink plum purple rainbow red rose royal rust sand sapphire "
    "seashell silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise violet "
    "walnut wheat white wine yellow"
).split()

_LATIN1 = {i: None for i in range(128, 256)}


def normalize_color(value: str) -> str:
    """The first colour of ``COLOR_SET`` that occurs in ``value`` (substring test), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def normalize_goal_option(option: GoalOption) -> GoalOption:
    """The original's normaliser on a goal option: a value as ``normalize_color``; a synthetic goal's
    ``(name, value)`` pair becomes a colour only when one of its two strings is exactly that colour
    (``in`` on a tuple tests membership), else stays a pair."""
    if isinstance(option, tuple):
        for color in COLOR_SET:
            if color in option:
                return color
        return option
    return normalize_color(option)


def token_set_ratio(a: object, b: object) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` (0.20 onwards, or 0.19 with python-Levenshtein): each side
    through ``str()`` (a pair reads ``"('size', 'large')"``), characters 128-255 dropped,
    non-alphanumerics to spaces, lowercased, then rapidfuzz's ratio rounded with ``round`` (0-100)."""
    return round(fuzz.token_set_ratio(_prepared(a), _prepared(b)))


@lru_cache(maxsize=65536)
def _prepared(value: object) -> str:
    """thefuzz's ``full_process(str(value), force_ascii=True)``; cached: goals' and products' strings recur."""
    return default_process(str(value).translate(_LATIN1))


def _bullets(product: Mapping[str, Any]) -> str:
    bullets = product.get("BulletPoints") or []
    if isinstance(bullets, str):
        bullets = [bullets]
    return " ".join(bullets).lower()


def _in_text(needle: str, product: Mapping[str, Any]) -> bool:
    return (
        needle in str(product.get("Title", "")).lower()
        or needle in _bullets(product)
        or needle in str(product.get("Description", "")).lower()
    )


def type_reward(
    purchased: Mapping[str, Any], goal: Mapping[str, Any], nouns: NounTagger = rule_nouns
) -> dict[str, Any]:
    """``r_type`` and its parts: query match, category match, title noun score."""
    query_match = purchased["query"] == goal["query"]
    bought_cats = {x.strip() for x in str(purchased["product_category"]).split("›")}
    goal_cats = {x.strip() for x in str(goal["product_category"]).split("›")}
    category_match = len(bought_cats & goal_cats) >= 2
    bought_nouns = nouns(purchased["name"])
    goal_nouns = nouns(goal["name"])
    title_score = 0.2 if not goal_nouns else len(set(bought_nouns) & set(goal_nouns)) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def attribute_reward(purchased: Mapping[str, Any], goal_attributes: Sequence[str]) -> tuple[float, int]:
    """(share of goal attributes matched, how many matched)."""
    bought = list(purchased.get("Attributes") or [])
    matches = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in bought) or _in_text(
            wanted, purchased
        ):
            matches += 1
    return (matches / len(goal_attributes) if goal_attributes else 0.0), matches


def option_reward(goal_options: Sequence[GoalOption], chosen: Sequence[str]) -> tuple[float | None, int]:
    """The original's option rule: (matches / number of goal options, or None without goal
    options; how many goal options some chosen value matches with ``token_set_ratio > 85``)."""
    wanted = [normalize_goal_option(o) for o in goal_options]
    bought = [normalize_color(v) for v in chosen]
    matches = sum(any(token_set_ratio(b, w) > FUZZY_THRESHOLD for b in bought) for w in wanted)
    return (matches / len(wanted) if wanted else None), matches


def _exact(value: str) -> str:
    return " ".join(str(value).lower().split())


def strict_option_reward(
    goal_options: Sequence[GoalOption], chosen: Mapping[str, str]
) -> tuple[float | None, int]:
    """The ``strict`` rule: a pair counts when the value chosen for its name equals its value; a bare
    value when some not yet used choice equals it (case and spacing aside)."""
    by_name = {_exact(k): _exact(v) for k, v in chosen.items()}
    unused = [_exact(v) for v in chosen.values()]
    matches = 0
    for option in goal_options:
        if isinstance(option, tuple):
            matches += by_name.get(_exact(option[0])) == _exact(option[1])
        elif _exact(option) in unused:
            unused.remove(_exact(option))
            matches += 1
    return (matches / len(goal_options) if goal_options else None), matches


def goal_option_items(goal: Mapping[str, Any]) -> list[GoalOption]:
    """The goal's options as the original compares them: a human goal's list of values, or a
    synthetic goal's dict as ``(name, value)`` pairs."""
    options = goal.get("goal_options") or []
    if isinstance(options, Mapping):
        return [(str(k), str(v)) for k, v in options.items()]
    return [str(o) for o in options]


def goal_option_values(goal: Mapping[str, Any]) -> list[str]:
    """The goal's option values (a synthetic goal's dict values, a human goal's list)."""
    options = goal.get("goal_options") or []
    return list(options.values()) if isinstance(options, Mapping) else list(options)


def get_reward(
    purchased: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    nouns: NounTagger = rule_nouns,
    variant: RewardVariant = "original",
) -> tuple[float, dict[str, Any]]:
    """The score of buying ``purchased`` at ``price`` with ``options`` (name → value) for ``goal``.

    Returns (score in [0, 1], parts as the original's ``verbose`` info: ``r_type``, ``r_att``,
    ``w_att``, the type's parts, and ``r_option`` / ``w_option`` and ``r_price`` / ``w_price`` when
    the goal has options and a positive price limit). A goal without a positive limit scores its
    price part 0 (the original raises on it; no published goal has one).
    """
    if variant not in REWARD_VARIANTS:
        raise ValueError(f"unknown WebShop reward {variant!r}; use one of {', '.join(REWARD_VARIANTS)}")
    type_parts = type_reward(purchased, goal, nouns)
    price_upper = float(goal["price_upper"])
    r_price = float(price <= price_upper) if price_upper > 0 else None
    attributes = list(goal.get("attributes") or [])
    r_att, n_att = attribute_reward(purchased, attributes)
    wanted_options = goal_option_items(goal)
    if variant == "strict":
        r_option, n_opt = strict_option_reward(wanted_options, options)
    else:
        r_option, n_opt = option_reward(wanted_options, list(options.values()))
    denominator = len(attributes) + len(wanted_options) + 1
    score = (n_att + n_opt + (r_price or 0.0)) / denominator * type_parts["r_type"]
    parts: dict[str, Any] = {
        **type_parts,
        "r_att": r_att,
        "w_att": len(attributes) / denominator,
    }
    if r_option is not None:
        parts["r_option"] = r_option
        parts["w_option"] = len(wanted_options) / denominator
    if r_price is not None:
        parts["r_price"] = r_price
        parts["w_price"] = 1 / denominator
    return score, parts
