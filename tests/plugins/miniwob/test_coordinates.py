"""Screenshot observations with coordinates: the resolution setting, acting at a point of the
screenshot (``browser_click_at``, ``browser_type_at``) instead of by element id, what such a point
may not reach, and the limit on images in the prompt, in real Chromium episodes (Docker: the
browser needs its image)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.plugins.miniwob.test_miniwob import RUNNER, Episode, backend  # noqa: F401  (the module's Docker backend fixture)
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.registry import get_registry
from toolgym.core.tokens.images import OMITTED_IMAGE, image_refs
from toolgym.plugins.miniwob.env import MiniWoBEnv
from toolgym.sandboxes.pool import PooledBackend

_CENTRE = """() => {
  const el = document.querySelector('[data-tg-id="ID"]');
  const r = el.getBoundingClientRect(), w = document.getElementById('wrap').getBoundingClientRect();
  return {x: r.left + r.width / 2 - w.left, y: r.top + r.height / 2 - w.top};
}"""
_LISTEN = """() => {
  window.__tgClicks = [];
  window.addEventListener('click', e => window.__tgClicks.push([e.clientX, e.clientY]), true);
  const w = document.getElementById('wrap').getBoundingClientRect();
  return [w.left, w.top, w.right, w.bottom];
}"""


class ShotEpisode(Episode):
    """An episode whose screenshots are stored under ``root``."""

    def __init__(self, backend: PooledBackend, root: Path, **kwargs: Any) -> None:  # noqa: F811
        self.env = MiniWoBEnv(time_limit=60, **kwargs)
        self.root = root
        self.ctx = EpisodeContext(
            episode_id="miniwob-coordinates",
            sandbox_backend=backend,
            registry=get_registry(),
            artifacts_dir=str(root / "artifacts"),
        )
        self.env.bind(self.ctx)

    async def first(self, seed: int) -> list[Any]:
        messages, _ = await self.env.reset(seed=seed)
        return messages

    def image(self, content: Any) -> Image.Image:
        [ref] = image_refs([{"role": "user", "content": content}])
        return Image.open(io.BytesIO((self.root / "images" / f"{ref[7:]}.png").read_bytes()))

    async def page(self, script: str) -> Any:
        reply = await self.env._evaluate(script)
        assert reply.get("ok"), reply
        return reply["value"]

    async def by_coordinates(self, text: str, scale: float) -> Any:
        """Play the solver's element-id call ``text`` at the element's centre in screenshot pixels."""
        call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
        args = dict(call["arguments"])
        centre = await self.page(_CENTRE.replace("ID", str(int(args.pop("element_id")))))
        point = {"x": int(centre["x"] * scale), "y": int(centre["y"] * scale)}
        name = {"browser_click": "browser_click_at", "browser_type": "browser_type_at"}[call["name"]]
        return await self.call(name, **point, **args)


def _play(backend: PooledBackend, tmp_path: Path, body: Any, **kwargs: Any) -> Any:  # noqa: F811
    async def run() -> Any:
        episode = ShotEpisode(backend, tmp_path, **kwargs)
        try:
            return await body(episode)
        finally:
            await episode.close()

    return RUNNER.run(run())


@pytest.mark.parametrize(
    ("task", "scale", "size"), [("click-button", 2.0, (320, 420)), ("enter-text", 0.5, (80, 105))]
)
def test_a_screenshot_only_agent_solves_tasks_by_coordinates(
    backend: PooledBackend,  # noqa: F811
    tmp_path: Path,
    task: str,
    scale: float,
    size: tuple[int, int],
) -> None:
    """The solver's plan, every call made at a point of the (resized) screenshot instead of an id."""

    async def body(ep: ShotEpisode) -> Any:
        messages = await ep.first(seed=3)
        assert ep.image(messages[1]["content"]).size == size  # the 160x210 task area, scaled
        names = {t.name for t in ep.env.tools}
        assert {"browser_click_at", "browser_type_at", "browser_click"} <= names
        assert "browser_click_at" in messages[0]["content"]  # the system prompt says how to use them
        for _ in range(4):
            text = await ep.env.scripted_action()
            assert text is not None
            step = await ep.by_coordinates(text, scale)
            if step.terminated:
                return step
            assert ep.image(step.observation[-1]["content"]).size == size
        raise AssertionError("the task did not end")

    step = _play(backend, tmp_path, body, task=task, observation="screenshot", screenshot_scale=scale)
    assert step.info["success"] and step.reward == 1.0, step.info


@pytest.mark.parametrize(
    ("task", "scale"),
    [("click-test", 1.0), ("enter-text", 0.5), ("grid-coordinate", 1.0), ("circle-center", 0.5)],
)
def test_coordinates_only_the_solver_clicks_what_the_screenshot_shows(
    backend: PooledBackend,  # noqa: F811
    tmp_path: Path,
    task: str,
    scale: float,
) -> None:
    """``actions=coordinates``: only the coordinate tools, no ids drawn, and the scripted solver's own
    calls are points of the (scaled) screenshot that win the task, including tasks offered only
    with screenshots, whose answer is a point (a grid coordinate, a circle's centre)."""

    async def body(ep: ShotEpisode) -> Any:
        messages = await ep.first(seed=4)
        assert {t.name for t in ep.env.tools} == {"browser_click_at", "browser_type_at"}
        assert "browser_click_at" in messages[0]["content"] and "[id]" not in messages[0]["content"]
        for _ in range(4):
            text = await ep.env.scripted_action()
            assert text is not None
            call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
            assert (
                call["name"] in ("browser_click_at", "browser_type_at")
                and "element_id" not in call["arguments"]
            )
            step = await ep.call(call["name"], **call["arguments"])
            if step.terminated:
                return step
        raise AssertionError("the task did not end")

    step = _play(
        backend,
        tmp_path,
        body,
        task=task,
        observation="screenshot",
        screenshot_scale=scale,
        actions="coordinates",
    )
    # circle-center scores by the click's distance from the centre: a half-size screenshot's pixel
    # is two of the page's, so a point of it lands up to a pixel or so away
    assert step.info["success"] and step.reward >= (0.9 if task == "circle-center" else 1.0), step.info


def test_coordinates_reach_only_the_screenshot_shown(backend: PooledBackend, tmp_path: Path) -> None:  # noqa: F811
    """Points outside the (half-size) screenshot, and arguments that are not whole numbers, are
    refused before any click reaches the browser; the corners that are in it land inside the task
    area, never beside it."""

    async def body(ep: ShotEpisode) -> tuple[list[Any], list[Any], list[float]]:
        await ep.first(seed=5)
        wrap = await ep.page(_LISTEN)
        refused = []
        for x, y in [(-1, 5), (5, -1), (80, 0), (0, 105), (80, 105), (10**9, 3), (-(10**9), -(10**9))]:
            step = await ep.call("browser_click_at", x=x, y=y)
            refused.append((step.observation[-1]["content"], step.terminated))
        for bad in ({"x": True, "y": 3}, {"x": 2.5, "y": 3}, {"x": "10", "y": 3}):
            step = await ep.call("browser_click_at", **bad)
            refused.append((step.observation[-1]["content"], step.terminated))
        before = await ep.page("() => window.__tgClicks")
        await ep.call("browser_click_at", x=0, y=0)
        await ep.call("browser_click_at", x=79, y=104)
        return refused, [before, await ep.page("() => window.__tgClicks")], wrap

    refused, (before, after), (left, top, right, bottom) = _play(
        backend, tmp_path, body, task="click-button", observation="both", screenshot_scale=0.5
    )
    for content, terminated in refused:
        text = content if isinstance(content, str) else content[0]["text"]
        assert text.startswith(("Error", "invalid arguments")) and not terminated, text
    assert sum("outside the screenshot, which is 80x105 pixels" in str(c) for c, _ in refused) == 7
    assert sum("should be a valid integer" in str(c) for c, _ in refused) == 3
    assert before == [], "a refused point clicked"
    assert len(after) == 2
    for x, y in after:
        assert left <= x < right and top <= y < bottom, (x, y, (left, top, right, bottom))


def test_typing_at_a_point_needs_a_text_field(backend: PooledBackend, tmp_path: Path) -> None:  # noqa: F811
    async def body(ep: ShotEpisode) -> Any:
        await ep.first(seed=1)
        return await ep.call("browser_type_at", x=1, y=1, text="hello")

    step = _play(backend, tmp_path, body, task="enter-text", observation="screenshot")
    assert "did not reach a text field" in str(step.observation[-1]["content"]) and not step.terminated


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"observation": "pixels"}, "observation must be one of axtree, screenshot, both"),
        (
            {"observation": "both", "screenshot_scale": "big"},
            "screenshot_scale must be a number from 0.1 to 4",
        ),
        ({"observation": "both", "screenshot_scale": "0"}, "screenshot_scale must be a number"),
        ({"observation": "both", "screenshot_scale": "nan"}, "screenshot_scale must be a number"),
        ({"observation": "both", "screenshot_scale": 5}, "screenshot_scale must be a number"),
        (
            {"observation": "both", "max_images": "0"},
            "max_images must be 'all' or a whole number of at least 1",
        ),
        ({"observation": "both", "max_images": "1.5"}, "max_images must be"),
        ({"observation": "both", "max_images": True}, "max_images must be"),
        ({"screenshot_scale": "2"}, "screenshot_scale applies to screenshots; set observation=screenshot"),
        ({"max_images": "2"}, "max_images applies to screenshots"),
        ({"actions": "ids"}, "actions must be one of all, coordinates"),
        ({"actions": "coordinates"}, "actions=coordinates points at screenshots; set observation=screenshot"),
    ],
)
def test_bad_screenshot_options_are_one_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MiniWoBEnv(task="click-button", **kwargs)


def test_screenshot_options_and_tools_by_mode() -> None:
    axtree = MiniWoBEnv(task="click-button")
    assert axtree.max_images is None and "browser_click_at" not in {t.name for t in axtree.tools}
    both = MiniWoBEnv(task="click-button", observation="both", screenshot_scale="0.5", max_images="2")
    assert both.max_images == 2 and both.screenshots.scale == 0.5
    assert MiniWoBEnv(task="click-button", observation="both", max_images="all").max_images is None
    only = MiniWoBEnv(tasks="click-test,choose-list", observation="screenshot", actions="coordinates")
    assert {t.name for t in only.tools} == {"browser_click_at", "browser_type_at"}
    assert only.unscripted_task([0, 1]) == "choose-list"  # a list selection has no point to click


def test_the_image_limit_holds_in_collected_episodes_and_they_verify(tmp_path: Path) -> None:
    """Scripted MiniWoB episodes with one screenshot per turn and max_images=1: each token sequence
    holds at most one image, earlier ones are marked in the text, and verify proves the records."""
    out = tmp_path / "limited"
    args = ["task=click-checkboxes", "observation=both", "max_images=1", "time_limit=60"]
    done = subprocess.run(
        [sys.executable, "-m", "toolgym", "collect", "--env", "miniwob", "--model", "scripted"]
        + [a for arg in args for a in ("--env-arg", arg)]
        + ["-n", "2", "--sandbox-backend", "docker", "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["status"] == "ok" and r["reward"] > 0 for r in rows)
    for r in rows:
        placeholder = r["metadata"]["image_placeholder"]
        sequences = {s["sequence"] for s in r["segments"]}
        assert len(sequences) == len(r["steps"])  # a new screenshot each turn: a new sequence each turn
        for seq in sequences:
            shown = sum(
                s["text"].count(placeholder)
                for s in r["segments"]
                if s["sequence"] == seq and s["role"] != "assistant"
            )
            assert shown == 1, (seq, shown)
        assert len(image_refs(r["messages"])) == 1
        assert json.dumps(r["messages"]).count(json.dumps(OMITTED_IMAGE)[1:-1]) == len(r["steps"]) - 1
    verify = subprocess.run(
        [sys.executable, "-m", "toolgym", "verify", str(out)], capture_output=True, text=True, timeout=600
    )
    assert verify.returncode == 0 and "all invariants hold" in verify.stdout, verify.stdout + verify.stderr


def test_tasks_offered_only_with_screenshots() -> None:
    """Point and drawn tasks need the pixels: refused with the accessibility tree, offered with
    screenshots; drags, hovers and what flashes by are refused in every mode, each in one line."""
    from toolgym.plugins.miniwob.tasks import CLICKS_AT_POINTS, DRAWN, supported_tasks

    assert set(CLICKS_AT_POINTS + DRAWN).isdisjoint(supported_tasks())
    assert set(CLICKS_AT_POINTS + DRAWN) <= set(supported_tasks(screenshots=True))
    for task in ("grid-coordinate", "click-color"):
        with pytest.raises(ConfigError, match="is not offered"):
            MiniWoBEnv(task=task)
        assert MiniWoBEnv(task=task, observation="screenshot").task_names == (task,)
        assert MiniWoBEnv(task=task, observation="both").task_names == (task,)
    with pytest.raises(ConfigError, match="drag gesture"):
        MiniWoBEnv(task="drag-box", observation="screenshot")
    with pytest.raises(ConfigError, match="needs a hover or shows only for a moment"):
        MiniWoBEnv(task="hover-shape", observation="screenshot")
    with pytest.raises(ConfigError, match="try observation screenshots"):
        MiniWoBEnv(task="hover-shape")
