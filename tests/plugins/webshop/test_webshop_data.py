"""Loaders on small files in the published formats, goal generation, price limits, splits, search,
and the shipped catalog equal to a fresh generation."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from toolgym.core.errors import ConfigError
from toolgym.plugins.webshop import catalog as demo
from toolgym.plugins.webshop.goals import PRICE_RANGE, make_goals, price_limit, split_indices
from toolgym.plugins.webshop.products import DataFiles, load_catalog, parse_pricing, read_json
from toolgym.plugins.webshop.search import ProductSearch, analyze, document_text
from toolgym.plugins.webshop.shop import BUILTIN_DATA, Shop, ShopConfig


def test_parse_pricing() -> None:
    assert parse_pricing("$12.99") == ([12.99], "$12.99")
    assert parse_pricing("$10.99 - $24.99") == ([10.99, 24.99], "$10.99 to $24.99")
    assert parse_pricing("") == ([100.0], "$100.0")
    assert parse_pricing(None) == ([100.0], "$100.0")


def test_loader_normalises_products(data_dir: Path) -> None:
    files = DataFiles.find(data_dir, small=True)
    assert files.items.name == "items_shuffle_1000.json" and files.reviews is not None
    cat = load_catalog(files, human_goals=True, rng=random.Random(0))
    assert [p["asin"] for p in cat.products] == ["B000000001", "B000000002", "B000000003", "B000000004"]
    shirt = cat.by_asin["B000000001"]
    assert shirt["Title"] == "Cotton Shirt for Men" and shirt["query"] == "men's shirts"
    assert shirt["options"] == {"color": ["navy | blue", "red"], "size": ["small", "large"]}
    assert shirt["option_to_image"]["navy | blue"] == "http://img/1.jpg"
    assert shirt["Price"] == "$12.5" and cat.prices["B000000001"] == 12.5
    assert shirt["Rating"] == 4.5 and shirt["Reviews"][1] == {"title": "Meh", "score": 3, "body": ""}
    assert shirt["Attributes"] == ["machine wash", "cotton"] and len(shirt["instructions"]) == 2
    assert "brand" not in shirt
    assert 20.0 <= cat.prices["B000000002"] <= 30.0 and cat.by_asin["B000000002"]["Price"] == "$20.0 to $30.0"
    scarf = cat.by_asin["B000000003"]
    assert scarf["options"] == {} and scarf["pricing"] == [100.0] and scarf["Rating"] == "N.A."
    tie = cat.by_asin["B000000004"]
    assert (
        tie["BulletPoints"] == ["one feature"]
        and tie["Attributes"] == ["DUMMY_ATTR"]
        and tie["options"] == {}
    )


def test_loader_errors_say_what_to_do(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        DataFiles.find(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no products file"):
        DataFiles.find(tmp_path / "empty")
    (data_dir / "items_human_ins.json").unlink()
    with pytest.raises(ConfigError, match="human_goals=False"):
        load_catalog(DataFiles.find(data_dir), human_goals=True)


def test_human_goals(data_dir: Path) -> None:
    cat = load_catalog(DataFiles.find(data_dir), human_goals=True, rng=random.Random(0))
    goals = make_goals(cat, human=True, rng=random.Random(0))
    assert len(goals) == 2  # the instruction without attributes is skipped
    shirt = next(g for g in goals if g["asin"] == "B000000001")
    assert shirt["goal_options"] == ["navy | blue", "small"] and shirt["attributes"] == ["cotton"]
    assert shirt["instruction_text"].startswith("i want a navy cotton shirt in small, and price lower than ")
    assert shirt["price_upper"] in (30.0, 40.0, 50.0)


def test_synthetic_goals_enumerate_option_combinations(data_dir: Path) -> None:
    cat = load_catalog(DataFiles.find(data_dir), human_goals=False, rng=random.Random(0))
    goals = make_goals(cat, human=False, rng=random.Random(0))
    shirt = [g for g in goals if g["asin"] == "B000000001"]
    assert len(shirt) == 4 and len([g for g in goals if g["asin"] == "B000000002"]) == 4
    texts = sorted(g["instruction_text"].split(", and price")[0] for g in shirt)
    assert texts[0] == "i need a cotton shirt with color: navy | blue, and size: large"
    assert all(g["goal_options"].keys() == {"color", "size"} for g in shirt)
    assert all(0 < g["weight"] <= 1 for g in goals)


def test_price_limits() -> None:
    rng = random.Random(1)
    for price in (0.5, 12.5, 99.0, 975.0):
        upper, text = price_limit(price, rng)
        above = [p for p in PRICE_RANGE if p > price][:4]
        assert upper in above[1:] and upper > price and text == f", and price lower than {upper:.2f} dollars"
    assert price_limit(985.0, rng) == (1_000_000.0, "")


def test_published_splits() -> None:
    assert split_indices(12087, "test") == range(0, 500)
    assert split_indices(12087, "eval") == range(500, 1500)
    assert split_indices(12087, "train") == range(1500, 12087)
    assert split_indices(12087, "trainval") == range(500, 12087)
    with pytest.raises(ConfigError, match="split 'train' is empty"):
        split_indices(900, "train")
    with pytest.raises(ConfigError, match="unknown WebShop split"):
        split_indices(900, "dev")


def test_goal_order_is_fixed_by_seeds(shop: Shop) -> None:
    again = Shop(ShopConfig())
    assert [g["instruction_text"] for g in again.goals] == [g["instruction_text"] for g in shop.goals]
    other = Shop(ShopConfig(shuffle_seed=1))
    assert [g["asin"] for g in other.goals] != [g["asin"] for g in shop.goals]


def test_search_ranks_by_bm25(shop: Shop) -> None:
    assert analyze("Men's Running SHOES, for the road") == ["men", "run", "shoe", "road"]
    found = shop.search_index.search("olive oil")
    assert len(found) == 50 and len(set(found)) == 50
    assert all("olive" in document_text(shop.product(a)) for a in found[:20])
    assert shop.search_index.search("zzzz qqqq") == []
    small = ProductSearch([shop.catalog.products[0], shop.catalog.products[1]])
    assert small.search(shop.catalog.products[1]["Title"])[0] == shop.catalog.products[1]["asin"]


def test_search_index_cache_on_disk(shop: Shop, tmp_path: Path) -> None:
    products = shop.catalog.products[:40]
    built = ProductSearch(products, cache_dir=tmp_path)
    assert list(tmp_path.glob("bm25-*/params.index.json"))
    loaded = ProductSearch(products, cache_dir=tmp_path)
    assert loaded.search("green tea organic") == built.search("green tea organic")


def test_shipped_catalog_is_the_generator_output() -> None:
    fresh = demo.generate()
    for name, content in fresh.items():
        shipped = read_json(BUILTIN_DATA / f"{name}.json.gz")
        assert json.loads(json.dumps(content)) == shipped, (
            f"{name} drifted: run python -m toolgym.plugins.webshop.catalog"
        )
    total = sum(p.stat().st_size for p in BUILTIN_DATA.glob("*.json.gz"))
    assert total < 300_000
    assert len(fresh["items_shuffle"]) == 400


def test_builtin_shop_splits(shop: Shop) -> None:
    assert len(shop.catalog) == 400 and len(shop.goals) == 2000
    assert (
        len(shop.split("test")) == 500 and len(shop.split("eval")) == 1000 and len(shop.split("train")) == 500
    )
