"""The vision-language warm-start recipe (``toolgym warmstart --env miniwob_screenshot``): its fields,
its refusals, and that adding the ``model`` field left the text recipes' cache keys as they were. The
build itself runs end to end in ``tests/bench/test_miniwob_pixels_smoke.py`` (a real browser)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

import pytest

from toolgym.core.errors import ConfigError
from toolgym.training.warmstart.recipe import KEYED_WHEN_SET, RECIPES, recipe
from toolgym.training.warmstart.vision import check


def test_the_recipe_trains_tiny_qwen3_vl_on_screenshot_only_coordinate_clicks() -> None:
    r = recipe("miniwob_screenshot")
    assert r.model == "tiny-qwen3-vl" and r.env == "miniwob" and r.sft_freeze_vision
    assert r.env_kwargs["observation"] == "screenshot" and r.env_kwargs["actions"] == "coordinates"
    check(r)  # a shipped recipe passes its own checks


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mistake_rate": 0.1}, "set mistake_rate=0 and invalid_rate=0"),
        ({"expert_only": True}, "leave think_hint and expert_only off"),
        ({"model": "tiny"}, "warm-start model must be one of tiny-vl, tiny-qwen3-vl"),
    ],
)
def test_what_a_vision_recipe_cannot_honour_is_one_line(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check(recipe("miniwob_screenshot", **changes))


@pytest.mark.parametrize("name", sorted(set(RECIPES) - {"miniwob_screenshot"}))
def test_the_text_recipes_keep_their_cache_keys(name: str) -> None:
    r = recipe(name)
    assert r.model is None
    before = {
        k: v
        for k, v in asdict(r).items()
        if k != "model" and (k not in KEYED_WHEN_SET or v != KEYED_WHEN_SET[k])
    }
    assert r.key() == hashlib.sha256(json.dumps({**before, "v": 1}, sort_keys=True).encode()).hexdigest()[:12]


def test_freezing_the_vision_tower_is_refused_for_a_text_recipe() -> None:
    from toolgym.training.warmstart.build import build

    with pytest.raises(ConfigError, match="sft_freeze_vision applies to a vision-language warm start"):
        build(recipe("math_python", sft_freeze_vision=True))
