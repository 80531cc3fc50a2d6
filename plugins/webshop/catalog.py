"""Generate the small demo catalog shipped in ``data/``, in the published file formats.

400 products in 20 types over WebShop's five departments (fashion, beauty, electronics,
furniture, food), 20 products per type that share a type but differ in attributes, options,
brand and price, so that a search returns look-alikes and the goal's attributes decide. Files:
``items_shuffle.json.gz`` (products), ``items_ins_v2.json.gz`` (attributes and one synthetic
instruction per product), ``items_human_ins.json.gz`` (five human-style instructions per product,
naming options in words) and ``reviews.json.gz``. The output is a pure function of the seed, and
a test checks that the shipped files equal a fresh generation.

Regenerate with ``python -m toolgym.plugins.webshop.catalog [OUT_DIR]``.
"""

from __future__ import annotations

import gzip
import json
import random
import string
import sys
from pathlib import Path
from typing import Any

from .catalog_vocab import BRANDS, REVIEW_BODIES, REVIEW_TITLES, TITLE_EXTRAS, TYPES, ProductType

PRODUCTS_PER_TYPE = 20
HUMAN_INSTRUCTIONS_PER_PRODUCT = 5
SEED = 2022

SYNTHETIC_TEMPLATES = [
    "i need a {noun} that is {attrs}",
    "i am looking for a {noun} with {attrs}",
    "i want {noun} which is {attrs}",
    "find me a {noun} that has {attrs}",
    "i'm looking for a {attrs} {noun}",
]
HUMAN_TEMPLATES = [
    "i want a {opts} {noun} that is {attrs}",
    "i need {noun} in {opts} with {attrs}",
    "looking for a {attrs} {noun}, {opts}",
    "can you find me a {noun} with {attrs}? i want it in {opts}",
    "i am searching for {attrs} {noun} in {opts}",
    "buy me a {attrs} {noun} please, {opts}",
]


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _pricing(rng: random.Random, low: float, high: float) -> str:
    price = round(rng.uniform(low, high), 2)
    if rng.random() < 0.2:
        top = round(price * rng.uniform(1.1, 1.6), 2)
        return f"${price:.2f} - ${top:.2f}"
    return f"${price:.2f}"


def _title(rng: random.Random, kind: ProductType, brand: str, attrs: list[str]) -> str:
    words = [brand]
    if rng.random() < 0.5:
        words.append(rng.choice(TITLE_EXTRAS))
    shown = attrs[: rng.randint(1, 2)]
    words += [a.title() for a in shown]
    words.append(kind["noun"])
    if kind["audience"]:
        words.append(f"for {kind['audience']}")
    if len(attrs) > 2 and rng.random() < 0.5:
        words.append(f"- {attrs[2].title()}")
    return " ".join(words)


def _describe(kind: ProductType, brand: str, attrs: list[str]) -> tuple[str, list[str]]:
    noun = kind["noun"].lower()
    description = (
        f"The {brand} {noun} is made for everyday use. It is {', '.join(attrs[:-1])} and {attrs[-1]}. "
        f"Every {noun} is checked before it ships, and our customer service team is happy to help."
    )
    bullets = [f"{a.upper()}: a {noun} you can rely on, designed to be {a}." for a in attrs]
    return description, bullets


def _options(rng: random.Random, kind: ProductType) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, pool in kind["options"].items():
        count = rng.randint(2, min(4, len(pool)))
        values = sorted(rng.sample(pool, count), key=pool.index)
        out[name] = [{"value": v.title() if name == "Color" else v, "image": None} for v in values]
    return out


def _fill(template: str, noun: str, attrs: list[str], options: list[str]) -> str:
    joined = attrs[0] if len(attrs) == 1 else f"{', '.join(attrs[:-1])} and {attrs[-1]}"
    values = {"noun": noun, "attrs": joined, "opts": ", ".join(options) or "any style"}
    return template.format(**values)


def _reviews(rng: random.Random, asin: str) -> dict[str, Any]:
    reviews: list[dict[str, Any]] = []
    stars_given: list[int] = []
    for _ in range(rng.randint(0, 3)):
        stars = rng.choices([5, 4, 3, 2, 1], weights=[5, 4, 2, 1, 1])[0]
        stars_given.append(stars)
        reviews.append(
            {
                "title": rng.choice(REVIEW_TITLES[stars]),
                "stars": stars,
                "review": rng.choice(REVIEW_BODIES[stars]),
            }
        )
    average: float | str = round(sum(stars_given) / len(stars_given), 1) if stars_given else "N.A."
    return {"asin": asin, "reviews": reviews, "average_rating": average}


def generate(seed: int = SEED) -> dict[str, Any]:
    """The four files' contents: ``items_shuffle``, ``items_ins_v2``, ``items_human_ins``, ``reviews``."""
    rng = random.Random(seed)
    taken: set[str] = set()
    products: list[dict[str, Any]] = []
    attributes: dict[str, Any] = {}
    human: dict[str, Any] = {}
    reviews: list[dict[str, Any]] = []
    for kind in TYPES:
        noun = kind["noun"].lower()
        for _ in range(PRODUCTS_PER_TYPE):
            asin = _asin(rng, taken)
            brand = rng.choice(BRANDS[kind["department"]])
            attrs = rng.sample(kind["attributes"], rng.randint(3, 5))
            title = _title(rng, kind, brand, attrs)
            description, bullets = _describe(kind, brand, attrs)
            options = _options(rng, kind)
            products.append(
                {
                    "asin": asin,
                    "name": title,
                    "full_description": description,
                    "small_description": bullets,
                    "pricing": _pricing(rng, *kind["price"]),
                    "customization_options": options,
                    "images": [""],
                    "category": kind["department"],
                    "query": kind["query"],
                    "product_category": kind["path"],
                }
            )
            wanted = rng.sample(attrs, min(len(attrs), rng.randint(2, 3)))
            attributes[asin] = {
                "attributes": attrs,
                "instruction": _fill(rng.choice(SYNTHETIC_TEMPLATES), noun, wanted, []),
                "instruction_attributes": wanted,
            }
            human[asin] = []
            for k in range(HUMAN_INSTRUCTIONS_PER_PRODUCT):
                wanted = rng.sample(attrs, min(len(attrs), rng.randint(1, 2)))
                chosen = [rng.choice(vals)["value"].lower() for vals in options.values()]
                chosen = chosen[: rng.randint(1, len(chosen))] if chosen else []
                human[asin].append(
                    {
                        "instruction": _fill(rng.choice(HUMAN_TEMPLATES), noun, wanted, chosen),
                        "instruction_attributes": wanted,
                        "instruction_options": chosen,
                        "assignment_id": f"{asin}-{k}",
                    }
                )
            reviews.append(_reviews(rng, asin))
    rng.shuffle(products)
    return {
        "items_shuffle": products,
        "items_ins_v2": attributes,
        "items_human_ins": human,
        "reviews": reviews,
    }


def write(out_dir: str | Path, seed: int = SEED) -> list[Path]:
    """Write the generated files as reproducible ``.json.gz`` (no timestamp in the gzip header)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in generate(seed).items():
        path = out / f"{name}.json.gz"
        data = json.dumps(content, indent=None, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        with (
            path.open("wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f,
        ):
            f.write(data)
        paths.append(path)
    return paths


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "data")
    for p in write(target):
        print(f"wrote {p} ({p.stat().st_size} bytes)")
