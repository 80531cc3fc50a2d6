"""A loaded shop: catalog, goals, search index and noun tagger, built once per configuration.

Environments are made once per episode, so the shop behind them is cached by its configuration
(``get_shop``); building it is the only slow part (milliseconds for the shipped catalog, minutes
for the full 1.18M-product data set, whose BM25 index is then cached on disk).
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path

from toolgym import ConfigError

from .goals import SHUFFLE_SEED, Goal, make_goals, split_indices
from .nouns import NounTagger, make_noun_tagger
from .products import Catalog, DataFiles, Product, load_catalog
from .reward import RewardVariant, get_reward
from .search import ProductSearch

BUILTIN_DATA = Path(__file__).parent / "data"
DATA_ENV_VAR = "TOOLGYM_WEBSHOP_DATA"


@dataclass(frozen=True)
class ShopConfig:
    """Everything that decides a shop's products, goals and scores. Hashable: the cache key."""

    data: str = "builtin"
    """``builtin`` (the shipped generated catalog), a folder holding the published files, or
    ``env`` (the folder named by ``$TOOLGYM_WEBSHOP_DATA``)."""
    human_goals: bool = True
    num_products: int | None = None
    price_seed: int = 42
    """Seeds the draw of prices within ranges and of price limits."""
    shuffle_seed: int = SHUFFLE_SEED
    noun_tagger: str = "rules"
    index_cache: str | None = None
    """Folder for the BM25 index of large catalogs (default: ``$TOOLGYM_CACHE/webshop``)."""

    def resolved(self) -> ShopConfig:
        """This configuration with ``data="env"`` replaced by the folder the variable names now."""
        if self.data != "env":
            return self
        folder = os.environ.get(DATA_ENV_VAR, "")
        if not folder:
            raise ConfigError(f"data='env' needs ${DATA_ENV_VAR} set to the folder holding the WebShop files")
        return dataclasses.replace(self, data=folder)

    def data_files(self) -> DataFiles:
        data = self.resolved().data
        if data == "builtin":
            return DataFiles.find(BUILTIN_DATA)
        return DataFiles.find(data, small=self.num_products is not None and self.num_products <= 1000)


class Shop:
    """Products, goals and search for one configuration; read-only once built (thread-safe)."""

    def __init__(self, config: ShopConfig) -> None:
        self.config = config
        files = config.data_files()
        rng = random.Random(config.price_seed)
        self.catalog: Catalog = load_catalog(
            files, num_products=config.num_products, human_goals=config.human_goals, rng=rng
        )
        self.goals: list[Goal] = make_goals(
            self.catalog, human=config.human_goals, rng=rng, shuffle_seed=config.shuffle_seed
        )
        cache_dir = None
        if len(self.catalog) > 20_000:
            cache_dir = config.index_cache or os.path.join(
                os.environ.get("TOOLGYM_CACHE", "~/.cache/toolgym"), "webshop"
            )
        self.search_index = ProductSearch(self.catalog.products, cache_dir=cache_dir)
        self.nouns: NounTagger = make_noun_tagger(config.noun_tagger)

    @property
    def large(self) -> bool:
        """Whether searches are slow enough to run off the event loop."""
        return len(self.catalog) > 20_000

    def product(self, asin: str) -> Product:
        return self.catalog.by_asin[asin]

    def search(self, keywords: tuple[str, ...]) -> list[Product]:
        """Up to 50 products for the keywords, best first."""
        return [self.catalog.by_asin[a] for a in self.search_index.search(" ".join(keywords))]

    def split(self, name: str) -> range:
        return split_indices(len(self.goals), name)

    def score(
        self, goal: Goal, asin: str, options: dict[str, str], variant: RewardVariant = "original"
    ) -> tuple[float, dict]:
        """The reward (``original`` as published, or ``strict``) for buying ``asin`` with ``options`` for ``goal``."""
        product = self.product(asin)
        return get_reward(
            product, goal, price=self.catalog.prices[asin], options=options, nouns=self.nouns, variant=variant
        )


_shops: dict[ShopConfig, Shop] = {}
_lock = threading.Lock()


def cached_shop(config: ShopConfig) -> Shop | None:
    """The shop for ``config`` if it is already built (no waiting, no building)."""
    return _shops.get(config.resolved())


def get_shop(config: ShopConfig) -> Shop:
    """The shop for ``config``, built on first use and shared afterwards."""
    config = config.resolved()
    with _lock:
        shop = _shops.get(config)
        if shop is None:
            shop = _shops[config] = Shop(config)
        return shop
