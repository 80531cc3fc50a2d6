"""Loaders for WebShop's product files, in the published formats.

- ``items_shuffle*.json``: a list of scraped products (``asin``, ``name``, ``full_description``,
  ``small_description``, ``pricing`` such as ``"$12.99"`` or ``"$10.99 - $24.99"``,
  ``customization_options`` name → [{``value``, ``image``}], ``images``, ``category``, ``query``,
  ``product_category``);
- ``items_ins_v2*.json``: asin → {``attributes``, ``instruction``, ``instruction_attributes``}
  (the product's attributes, and one synthetic instruction);
- ``items_human_ins.json``: asin → [{``instruction``, ``instruction_attributes``,
  ``instruction_options``}] (instructions written by crowd workers);
- ``reviews.json`` (optional): [{``asin``, ``reviews``: [{``title``, ``stars``, ``review``}],
  ``average_rating``}].

Every file may also be gzip-compressed (``.json.gz``). Products are normalised the way the
original site does it (option values lowercased with ``/`` → `` | ``, a price tag and a price
range, ``DUMMY_ATTR`` for products without attributes, duplicate and malformed ASINs dropped).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from toolgym import ConfigError

Product = dict[str, Any]

ITEMS_PATTERNS = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRS_PATTERNS = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_FILE = "items_human_ins.json"
REVIEWS_FILE = "reviews.json"


@dataclass
class Catalog:
    """The loaded products, by ASIN, and the price each is sold at (drawn once from its range)."""

    products: list[Product]
    by_asin: dict[str, Product] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.by_asin:
            self.by_asin = {p["asin"]: p for p in self.products}

    def __len__(self) -> int:
        return len(self.products)


@dataclass(frozen=True)
class DataFiles:
    """Paths of one data set's files; ``human`` and ``reviews`` are optional."""

    items: Path
    attributes: Path
    human: Path | None = None
    reviews: Path | None = None

    @classmethod
    def find(cls, directory: str | Path, *, small: bool = False) -> DataFiles:
        """Locate the files in ``directory``; ``small`` prefers the ``*_1000`` subsets."""
        root = Path(directory).expanduser()
        if not root.is_dir():
            raise ConfigError(
                f"WebShop data directory {str(root)!r} does not exist; give the folder holding items_shuffle*.json"
            )

        def pick(names: tuple[str, ...], what: str) -> Path:
            order = names if small else tuple(reversed(names))
            for name in order:
                for candidate in (root / name, root / f"{name}.gz"):
                    if candidate.exists():
                        return candidate
            raise ConfigError(f"no {what} file ({' or '.join(names)}, optionally .gz) in {str(root)!r}")

        def optional(name: str) -> Path | None:
            for candidate in (root / name, root / f"{name}.gz"):
                if candidate.exists():
                    return candidate
            return None

        return cls(
            items=pick(ITEMS_PATTERNS, "products"),
            attributes=pick(ATTRS_PATTERNS, "attributes"),
            human=optional(HUMAN_FILE),
            reviews=optional(REVIEWS_FILE),
        )


def read_json(path: str | Path) -> Any:
    """Read a ``.json`` or ``.json.gz`` file."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return json.load(f)
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"could not read WebShop data file {str(path)!r}: {exc}") from exc


def parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """``"$10.99 - $24.99"`` → ([10.99, 24.99], ``"$10.99 to $24.99"``); empty → ([100.0], ``"$100.0"``)."""
    if not pricing:
        return [100.0], "$100.0"
    values: list[float] = []
    for part in str(pricing).split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            values.append(float(Decimal(digits)))
        except InvalidOperation:
            continue
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _options(raw: Any) -> tuple[dict[str, list[str]], dict[str, Any]]:
    options: dict[str, list[str]] = {}
    images: dict[str, Any] = {}
    for name, contents in (raw or {}).items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = str(content["value"]).strip().replace("/", " | ").lower()
            values.append(value)
            images[value] = content.get("image")
        options[name.lower()] = values
    return options, images


def normalize_product(raw: dict[str, Any], attributes: dict[str, Any], reviews: dict[str, Any]) -> Product:
    """One raw scraped product → the dict the site, the search index and the reward read."""
    asin = raw["asin"]
    pricing, price_tag = parse_pricing(raw.get("pricing"))
    options, option_images = _options(raw.get("customization_options"))
    bullets = raw.get("small_description") or []
    review_entry = reviews.get(asin) or {}
    product_reviews = []
    for r in review_entry.get("reviews") or []:
        product_reviews.append(
            {
                "title": r.get("title", ""),
                "score": r.get("score", r.get("stars", 0)),
                "body": r.get("body", r.get("review", "")) or "",
            }
        )
    attrs = attributes.get(asin) or {}
    images = raw.get("images") or [""]
    return {
        "asin": asin,
        "category": raw.get("category", ""),
        "query": str(raw.get("query", "")).lower().strip(),
        "product_category": raw.get("product_category", ""),
        "name": raw.get("name", ""),
        "Title": raw.get("name", ""),
        "Description": raw.get("full_description") or "",
        "BulletPoints": bullets if isinstance(bullets, list) else [bullets],
        "Reviews": product_reviews,
        "Rating": review_entry.get("average_rating", "N.A.") if review_entry else "N.A.",
        "pricing": pricing,
        "Price": price_tag,
        "options": options,
        "option_to_image": option_images,
        "Attributes": attrs["attributes"] if "attributes" in attrs else ["DUMMY_ATTR"],
        "MainImage": images[0] if images else "",
    }


def product_prices(products: list[Product], rng: random.Random) -> dict[str, float]:
    """The price each product sells at: its one price, or a uniform draw from its range."""
    prices: dict[str, float] = {}
    for p in products:
        pricing = p["pricing"]
        if not pricing:
            prices[p["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[p["asin"]] = pricing[0]
        else:
            prices[p["asin"]] = rng.uniform(*pricing[:2])
    return prices


def load_catalog(
    files: DataFiles,
    *,
    num_products: int | None = None,
    human_goals: bool = True,
    rng: random.Random | None = None,
) -> Catalog:
    """Load and normalise products; attach the instructions the chosen goal kind needs.

    ``num_products`` keeps the first N products of the (already shuffled) items file. Prices of
    ranged products are drawn from ``rng`` in file order, before any goal is made.
    """
    raw_products = read_json(files.items)
    if not isinstance(raw_products, list):
        raise ConfigError(f"{str(files.items)!r} must hold a JSON list of products")
    attributes = read_json(files.attributes)
    human: dict[str, Any] = {}
    if human_goals:
        if files.human is None:
            raise ConfigError(
                f"human goals need {HUMAN_FILE} next to {files.items.name}; add it or set human_goals=False"
            )
        human = read_json(files.human)
    reviews: dict[str, Any] = {}
    if files.reviews is not None:
        reviews = {r["asin"]: r for r in read_json(files.reviews)}
    if num_products is not None:
        raw_products = raw_products[:num_products]
    seen: set[str] = set()
    products: list[Product] = []
    for raw in raw_products:
        asin = str(raw.get("asin", ""))
        if asin == "nan" or not asin or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        product = normalize_product(raw, attributes, reviews)
        attrs = attributes.get(asin) or {}
        if human_goals:
            if asin in human:
                product["instructions"] = human[asin]
        else:
            product["instruction_text"] = attrs.get("instruction")
            product["instruction_attributes"] = attrs.get("instruction_attributes")
        products.append(product)
    if not products:
        raise ConfigError(f"no usable products in {str(files.items)!r}")
    catalog = Catalog(products)
    catalog.prices = product_prices(products, rng or random.Random(42))
    return catalog
