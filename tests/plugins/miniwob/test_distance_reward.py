"""``reward=distance``: a miss scores by how near it came to the scripted solver's point, and no
miss, near or not, earns what a win does. Played as a policy that wants the reward without the
task would: clicks at growing distances from the target, a stop, calls without a usable point,
and a near miss after a far one (Docker: real Chromium episodes)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.miniwob.test_coordinates import ShotEpisode
from tests.plugins.miniwob.test_miniwob import RUNNER, backend  # noqa: F401  (the module's Docker backend fixture)
from toolgym.core.errors import ConfigError
from toolgym.core.types import Action, ActionKind
from toolgym.plugins.miniwob.env import FAIL, NEAR_PX, MiniWoBEnv
from toolgym.sandboxes.pool import PooledBackend

pytestmark = pytest.mark.docker

SETTINGS = {
    "task": "focus-text",
    "observation": "screenshot",
    "actions": "coordinates",
    "reward": "distance",
}


def _point(text: str) -> tuple[int, int]:
    call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
    return int(call["arguments"]["x"]), int(call["arguments"]["y"])


def _play(
    pool: PooledBackend, root: Path, moves: list[Any], *, max_turns: int = 1, seed: int = 5
) -> tuple[Any, tuple[int, int]]:
    """One episode: ``moves`` are clicks that many pixels above or below the solver's point on the
    page as the model sees it, or an ``Action`` to play as it is; the last step's result and the
    first target."""

    async def run() -> tuple[Any, tuple[int, int]]:
        ep = ShotEpisode(pool, root, max_turns=max_turns, **SETTINGS)
        try:
            await ep.first(seed=seed)
            target = None
            step = None
            for move in moves:
                aim = _point(await ep.env.scripted_action() or "")
                target = target or aim
                if isinstance(move, Action):
                    step = await ep.env.step(move)
                else:
                    away = move if aim[1] < 105 else -move  # toward the taller side of the 210 px area
                    step = await ep.call("browser_click_at", x=aim[0], y=aim[1] + away)
            assert step is not None and target is not None
            return step, target
        finally:
            await ep.close()

    return RUNNER.run(run())


def test_a_miss_scores_by_its_distance_and_never_as_much_as_a_win(
    backend: PooledBackend,  # noqa: F811
    tmp_path: Path,
) -> None:
    win, _ = _play(backend, tmp_path, [0])
    assert win.info["success"] and win.reward == 1.0 and win.info["miss_px"] == 0.0
    misses = []
    for dy in (16, 32, 60, 100):
        step, target = _play(backend, tmp_path, [dy])
        assert not step.info["success"], f"a click {dy} px off the input's centre won: pick other offsets"
        assert step.info["miss_px"] == abs(dy)
        misses.append(step.reward)
    assert 0 <= target[1] - 100 or target[1] + 100 < 210, "the farthest click left the screenshot"
    expected = [FAIL + 0.5 * math.exp(-0.5 * (dy / NEAR_PX) ** 2) for dy in (16, 32, 60, 100)]
    assert misses == pytest.approx(expected)
    assert misses == sorted(misses, reverse=True) and len(set(misses)) == 4  # nearer scores more
    assert all(FAIL <= m < FAIL + 0.5 for m in misses)  # no miss reaches half of a win's margin


def test_stopping_or_giving_no_point_scores_as_a_miss_far_away(
    backend: PooledBackend,  # noqa: F811
    tmp_path: Path,
) -> None:
    stop = Action(text="I am done.", kind=ActionKind.ANSWER, answer="I am done.")
    stopped, _ = _play(backend, tmp_path, [stop])
    assert stopped.reward == FAIL and "miss_px" not in stopped.info
    # the last point counts, not the best one: a near miss first and a far one last score as far
    near_then_far, _ = _play(backend, tmp_path, [16, 100], max_turns=2)
    far, _ = _play(backend, tmp_path, [100])
    assert near_then_far.reward == pytest.approx(far.reward) and near_then_far.info["miss_px"] == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"observation": "screenshot"},
            "reward=distance scores points on the screenshot; set actions=coordinates",
        ),
        (
            {"tasks": "click-test,choose-list", "observation": "screenshot", "actions": "coordinates"},
            "reward=distance needs a scripted solver's point on every task; 'choose-list' has none",
        ),
    ],
)
def test_the_distance_reward_refuses_what_it_cannot_score(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MiniWoBEnv(reward="distance", **kwargs)
