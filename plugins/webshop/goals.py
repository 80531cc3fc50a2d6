"""Goals (instructions with their target product, attributes, options and price limit) and splits.

As published:
- human goals: one per crowd-written instruction with at least one attribute; the instruction
  keeps the worker's option values (a list);
- synthetic goals: for each product with a generated instruction, one goal per combination of its
  option values, the options spelled out (``with color: black, and size: large``); each goal is
  weighted by the rarity of its attributes;
- price limit: two of the (up to) four round prices (10, 20, ... 990 dollars) just above the
  product's price are drawn and the larger becomes the limit, appended as ``, and price lower than
  40.00 dollars``; a product too dear for that gets no limit (1,000,000);
- the goal list is shuffled with a fixed seed (233), then split by position: test goals 0-499,
  eval 500-1499, train the rest (``trainval``, 500 onwards, is what verl-agent trains on).
  ``validation`` is another name for ``eval``, the published development split: what recipe and
  checkpoint choices may look at, while ``test`` is only reported.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from typing import Any, Literal

from toolgym import ConfigError

from .products import Catalog

Goal = dict[str, Any]
Split = Literal["train", "eval", "test", "all"]

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_LIMIT = 1_000_000.0
SHUFFLE_SEED = 233
SPLITS: dict[str, tuple[int, int | None]] = {
    "test": (0, 500),
    "eval": (500, 1500),
    "validation": (500, 1500),  # the published development split under the name every environment uses
    "train": (1500, None),
    "all": (0, None),
    "trainval": (500, None),  # verl-agent trains on every goal after the test split
}


def price_limit(price: float | None, rng: random.Random) -> tuple[float, str]:
    """(upper limit, text appended to the instruction) for a product sold at ``price``."""
    if price is None:
        return NO_LIMIT, ""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_LIMIT, ""
    _, upper = sorted(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def human_goals(catalog: Catalog, rng: random.Random) -> list[Goal]:
    goals: list[Goal] = []
    for product in catalog.products:
        for ins in product.get("instructions") or []:
            attributes = list(ins.get("instruction_attributes") or [])
            if not attributes:
                continue
            upper, price_text = price_limit(catalog.prices.get(product["asin"]), rng)
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["name"],
                    "product_category": product["product_category"],
                    "instruction_text": str(ins["instruction"]).strip(".") + price_text,
                    "attributes": attributes,
                    "price_upper": upper,
                    "goal_options": list(ins.get("instruction_options") or []),
                    "weight": 1.0,
                }
            )
    return goals


def synthetic_goals(catalog: Catalog, rng: random.Random) -> list[Goal]:
    goals: list[Goal] = []
    attribute_counts: dict[str, int] = defaultdict(int)
    for product in catalog.products:
        text = product.get("instruction_text")
        if not text:
            continue
        attributes = list(product.get("instruction_attributes") or [])
        if not attributes:
            raise ConfigError(f"product {product['asin']} has an instruction but no instruction_attributes")
        upper, price_text = price_limit(catalog.prices.get(product["asin"]), rng)
        options = product["options"]
        names = sorted(options)
        for combination in itertools.product(*(options[n] for n in names)):
            chosen = dict(zip(names, combination, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
            option_text = f" with {option_text}" if option_text else ""
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{text}{option_text}{price_text}",
                    "attributes": attributes,
                    "price_upper": upper,
                    "goal_options": chosen,
                }
            )
            for att in attributes:
                attribute_counts[att] += 1
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    return goals


def make_goals(
    catalog: Catalog, *, human: bool, rng: random.Random, shuffle_seed: int = SHUFFLE_SEED
) -> list[Goal]:
    """All goals of a catalog, shuffled with ``shuffle_seed`` (the published order uses 233)."""
    goals = human_goals(catalog, rng) if human else synthetic_goals(catalog, rng)
    if not goals:
        kind = (
            "human instructions (items_human_ins.json)"
            if human
            else "synthetic instructions (items_ins_v2*.json)"
        )
        raise ConfigError(f"the catalog has no {kind}; load that file or switch human_goals")
    random.Random(shuffle_seed).shuffle(goals)
    return goals


def split_indices(num_goals: int, split: str) -> range:
    """Goal positions of a split (test 0-499, eval or validation 500-1499, train 1500+, trainval 500+, or all)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown WebShop split {split!r}; use one of {', '.join(SPLITS)}")
    start, stop = SPLITS[split]
    indices = range(min(start, num_goals), num_goals if stop is None else min(stop, num_goals))
    if len(indices) == 0:
        raise ConfigError(
            f"split {split!r} is empty: the catalog has only {num_goals} goals (train starts at goal 1500); "
            "use split='all' or a larger catalog"
        )
    return indices
