"""toolgym's WebShop score against the reading of the original (``webshop_original``) on purchases
drawn from the shipped goals: the goal's product with the goal's options, each option changed once,
options whose values appear in the title, and a random other product with random options.

Both sides use toolgym's noun tagger (the original's spaCy model cannot be installed here), so
the comparison covers everything but the tagger.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from toolgym.plugins.webshop.reward import get_reward
from toolgym.plugins.webshop.shop import Shop, ShopConfig, get_shop

from .test_webshop_original import original_score

Purchase = tuple[str, dict[str, str]]


def _goal_choice(product: dict[str, Any], goal: dict[str, Any]) -> dict[str, str]:
    """The product's options set to the goal's values where the product offers them."""
    wanted = goal["goal_options"]
    values = set(wanted.values()) if isinstance(wanted, dict) else set(wanted)
    chosen = {}
    for name, offered in product["options"].items():
        hit = [v for v in offered if v in values]
        if hit:
            chosen[name] = hit[0]
    return chosen


def purchases(shop: Shop, goal: dict[str, Any], rng: random.Random) -> Iterator[Purchase]:
    product = shop.product(goal["asin"])
    base = _goal_choice(product, goal)
    yield goal["asin"], base
    for name, offered in product["options"].items():
        others = [v for v in offered if v != base.get(name)]
        if others:
            yield goal["asin"], {**base, name: rng.choice(others)}
    title = product["Title"].lower()
    in_title = {n: v for n, vs in product["options"].items() for v in vs if v.lower() in title}
    if in_title:
        yield goal["asin"], {**base, **in_title}
    other = rng.choice(shop.catalog.products)
    yield other["asin"], {n: rng.choice(vs) for n, vs in other["options"].items() if vs}


def agreement(shop: Shop, goals: int, seed: int = 0) -> tuple[int, list[tuple[Any, ...]]]:
    """(purchases compared, the ones whose scores differ)."""
    rng = random.Random(seed)
    picked = rng.sample(range(len(shop.goals)), min(goals, len(shop.goals)))
    n, differ = 0, []
    for i in picked:
        goal = shop.goals[i]
        for asin, options in purchases(shop, goal, rng):
            product, price = shop.product(asin), shop.catalog.prices[asin]
            ours = get_reward(product, goal, price, options, nouns=shop.nouns)[0]
            theirs = original_score(product, goal, price, options, shop.nouns)
            n += 1
            if abs(ours - theirs) > 1e-9:
                differ.append((i, asin, options, ours, theirs))
    return n, differ


@pytest.mark.parametrize("human", [True, False])
def test_scores_agree_with_the_original_on_sampled_purchases(human: bool) -> None:
    shop = get_shop(ShopConfig(human_goals=human))
    n, differ = agreement(shop, goals=800)
    assert n > 2000
    assert not differ, (
        f"{len(differ)}/{n} purchases differ ({1 - len(differ) / n:.1%} agree), e.g. {differ[:3]}"
    )
