"""Fixtures for the WebShop tests: the shipped shop, and tiny data files in the published formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolgym.plugins.webshop.session import ShopSession
from toolgym.plugins.webshop.shop import Shop, ShopConfig, get_shop


@pytest.fixture(scope="session")
def shop() -> Shop:
    return get_shop(ShopConfig())


@pytest.fixture
def session(shop: Shop) -> ShopSession:
    return ShopSession(shop, 0)


def raw_product(asin: str, name: str, **extra: Any) -> dict[str, Any]:
    base = {
        "asin": asin,
        "name": name,
        "full_description": f"{name} description.",
        "small_description": [f"{name} feature one", "feature two"],
        "pricing": "$12.50",
        "customization_options": {
            "Color": [{"value": "Navy/Blue", "image": "http://img/1.jpg"}, {"value": "Red", "image": None}],
            "Size": [{"value": "Small", "image": None}, {"value": "Large", "image": None}],
        },
        "images": ["http://img/main.jpg"],
        "category": "fashion",
        "query": " Men's Shirts ",
        "product_category": "Clothing › Men › Shirts",
        "brand": "dropped by the loader",
    }
    base.update(extra)
    return base


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Six raw products (one duplicate, one malformed ASIN) with attributes, human instructions, reviews."""
    products = [
        raw_product("B000000001", "Cotton Shirt for Men"),
        raw_product("B000000002", "Linen Shirt for Men", pricing="$20.00 - $30.00"),
        raw_product("B000000003", "Wool Scarf", customization_options=None, pricing=""),
        raw_product("B000000001", "Duplicate Shirt"),
        raw_product("nan", "No Asin"),
        raw_product(
            "B000000004", "Silk Tie", small_description="one feature", customization_options={"Color": None}
        ),
    ]
    attributes = {
        "B000000001": {
            "attributes": ["machine wash", "cotton"],
            "instruction": "i need a cotton shirt",
            "instruction_attributes": ["cotton"],
        },
        "B000000002": {
            "attributes": ["linen"],
            "instruction": "i want a linen shirt",
            "instruction_attributes": ["linen"],
        },
        "B000000003": {"attributes": ["wool"]},
    }
    human = {
        "B000000001": [
            {
                "instruction": "i want a navy cotton shirt in small.",
                "instruction_attributes": ["cotton"],
                "instruction_options": ["navy | blue", "small"],
            },
            {"instruction": "no attributes here", "instruction_attributes": [], "instruction_options": []},
        ],
        "B000000003": [
            {
                "instruction": "a warm wool scarf",
                "instruction_attributes": ["wool"],
                "instruction_options": [],
            }
        ],
    }
    reviews = [
        {
            "asin": "B000000001",
            "average_rating": 4.5,
            "reviews": [{"title": "Nice", "stars": 5, "review": "Fits well"}, {"title": "Meh", "score": 3}],
        }
    ]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attributes))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    (tmp_path / "reviews.json").write_text(json.dumps(reviews))
    return tmp_path
