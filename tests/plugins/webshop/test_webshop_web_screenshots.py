"""``webshop-web`` with screenshot observations: a scripted purchase whose every page the model
would see as an image with element ids drawn on it; files by hash, verified (Docker)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from PIL import Image

from toolgym.core.tokens.images import image_refs


def test_a_scripted_purchase_with_screenshot_observations_verifies(tmp_path: Path) -> None:
    out = tmp_path / "shots"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolgym",
            "collect",
            "--env",
            "webshop-web",
            "--model",
            "scripted",
            "--env-arg",
            "observation=screenshot",
            "--env-arg",
            "split=test",
            "-n",
            "2",
            "--sandbox-backend",
            "docker",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["status"] == "ok" and r["terminated"] and r["reward"] > 0 for r in rows)
    for r in rows:
        refs = image_refs(r["messages"])
        assert len(refs) == len(r["steps"])  # the start page, and the page after every step but the buy
        assert "yellow label" in r["messages"][0]["content"]
        first_text = r["messages"][1]["content"][0]["text"]
        assert "Instruction:" in first_text and "URL: " in first_text
        assert not re.search(
            r"^\s*\[\d+\]", first_text, re.MULTILINE
        )  # no element lines: they are on the image
        for ref in refs:
            data = (out / "images" / f"{ref[7:]}.png").read_bytes()
            assert hashlib.sha256(data).hexdigest() == ref[7:]
            assert Image.open(io.BytesIO(data)).size == (1280, 720)
    verify = subprocess.run(
        [sys.executable, "-m", "toolgym", "verify", str(out)], capture_output=True, text=True, timeout=300
    )
    assert verify.returncode == 0 and "all invariants hold" in verify.stdout, verify.stdout + verify.stderr


def test_scaled_screenshots_and_coordinates_in_the_store(tmp_path: Path) -> None:
    """Half-size screenshots (640x360 of the 1280x720 viewport); a search typed at the search box's
    point of the image lands in the store's search; a point past the image is refused."""
    from tests.plugins.webshop.test_webshop_web import RUNNER
    from tests.sandboxes.helpers import make_backend
    from toolgym.core.env.contract import EpisodeContext
    from toolgym.core.registry import get_registry
    from toolgym.core.types import Action, ActionKind, ToolCall
    from toolgym.plugins.webshop.web import WebShopWebEnv

    async def run() -> tuple[Any, Any, Any, Any]:
        backend = make_backend("docker", images=("browser",), max_idle=1)
        env = WebShopWebEnv(split="test", observation="both", screenshot_scale=0.5, max_images=2)
        ctx = EpisodeContext(
            episode_id="webshop-web-coordinates",
            sandbox_backend=backend,
            registry=get_registry(),
            artifacts_dir=str(tmp_path / "artifacts"),
        )
        env.bind(ctx)

        async def call(name: str, **arguments: Any) -> Any:
            action = Action(
                text=json.dumps(arguments),
                kind=ActionKind.TOOL_CALLS,
                tool_calls=[ToolCall(name=name, arguments=arguments)],
            )
            return await env.step(action)

        try:
            messages, _ = await env.reset(seed=0)
            box = await env._evaluate(
                "() => { const r = document.getElementById('search_input').getBoundingClientRect();"
                " return [r.left + r.width / 2, r.top + r.height / 2]; }"
            )
            x, y = (int(v * 0.5) for v in box["value"])
            searched = await call("browser_type_at", x=x, y=y, text="shoes", submit=True)
            outside = await call("browser_click_at", x=640, y=10)
            return messages, searched, outside, env.max_images
        finally:
            await env.close()
            await ctx.aclose()
            await backend.aclose()

    messages, searched, outside, max_images = RUNNER.run(run())
    assert max_images == 2
    [ref] = image_refs(messages)
    assert Image.open(tmp_path / "images" / f"{ref[7:]}.png").size == (640, 360)
    text = searched.observation[-1]["content"][0]["text"]
    assert not text.startswith("Error") and "search" in text.lower() and "shoes" in text.lower(), text
    assert "outside the screenshot, which is 640x360 pixels" in str(outside.observation[-1]["content"])
