"""Screenshot observations (``observation=both|screenshot``) in real Chromium episodes: stored by
hash beside the trajectories, verified, exported (Docker: the browser needs its image)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.plugins.miniwob.test_miniwob import RUNNER, Episode, backend  # noqa: F401  (the module's Docker backend fixture)
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.registry import get_registry
from toolgym.core.tokens.images import image_refs
from toolgym.plugins.miniwob.env import MiniWoBEnv
from toolgym.sandboxes.pool import PooledBackend


def _toolgym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolgym", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def both_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("miniwob-both")
    done = _toolgym(
        "collect",
        "--env",
        "miniwob",
        "--model",
        "scripted",
        "--env-arg",
        "task=click-checkboxes",
        "--env-arg",
        "observation=both",
        "--env-arg",
        "time_limit=60",
        "-n",
        "3",
        "--group-size",
        "2",
        "--sandbox-backend",
        "docker",
        "--out",
        str(out),
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    return out


def test_screenshots_are_stored_by_hash_and_the_dataset_verifies(both_dataset: Path) -> None:
    rows = [json.loads(line) for line in (both_dataset / "trajectories.jsonl").read_text().splitlines()]
    # success as without screenshots (a long page time limit: the shared test machine can be slow)
    assert len(rows) == 6 and all(r["status"] == "ok" and r["reward"] > 0 for r in rows)
    refs = [ref for r in rows for ref in image_refs(r["messages"])]
    turns = sum(len(r["steps"]) for r in rows)
    assert len(refs) == turns  # the first page, and the page after every step but the last
    files = {p.stem: p for p in (both_dataset / "images").glob("*.png")}
    assert {ref[7:] for ref in refs} == set(files)
    assert len(files) < len(refs)  # a group's two samples see the same first page: one file for both
    for sha, path in files.items():
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha
        assert Image.open(io.BytesIO(data)).size == (160, 210)  # the task area, as MiniWoB's own screenshots
    first = rows[0]["messages"][1]["content"]
    assert first[0]["type"] == "text" and "checkbox" in first[0]["text"] and first[1]["type"] == "image"
    done = _toolgym("verify", str(both_dataset))
    assert done.returncode == 0 and "all invariants hold" in done.stdout, done.stdout + done.stderr


def test_verify_catches_a_missing_or_altered_screenshot(both_dataset: Path, tmp_path: Path) -> None:
    import shutil

    for damage in ("missing", "altered"):
        copy = tmp_path / damage
        shutil.copytree(both_dataset, copy)
        victim = sorted((copy / "images").glob("*.png"))[0]
        if damage == "missing":
            victim.unlink()
        else:
            image = Image.open(io.BytesIO(victim.read_bytes())).convert("RGB")
            image.putpixel((0, 0), (255, 0, 255))  # one pixel
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            victim.write_bytes(buf.getvalue())
        done = _toolgym("verify", str(copy))
        assert done.returncode == 1 and "violate" in done.stdout, (damage, done.stdout)


def test_screenshots_round_trip_through_the_hf_and_verl_exports(both_dataset: Path, tmp_path: Path) -> None:
    import datasets

    assert _toolgym("export", "hf", str(both_dataset), "--out", str(tmp_path / "hf")).returncode == 0
    ds = datasets.load_dataset(str(tmp_path / "hf"), split="train", cache_dir=str(tmp_path / "cache"))
    for row in ds:
        refs = image_refs(json.loads(row["messages_json"]))
        assert len(row["images"]) == len(refs) > 0
        for ref, image in zip(refs, row["images"], strict=True):
            stored = Image.open(both_dataset / "images" / f"{ref[7:]}.png")
            assert image.tobytes() == stored.tobytes()
    verl = tmp_path / "verl.parquet"
    assert _toolgym("export", "verl", str(both_dataset), "--out", str(verl)).returncode == 0
    for row in pq.read_table(verl).to_pylist():
        assert row["prompt"][1]["content"].count("<image>") == len(row["images"]) == 1
        assert (
            both_dataset / "images" / f"{hashlib.sha256(row['images'][0]['bytes']).hexdigest()}.png"
        ).is_file()


def test_screenshot_mode_draws_the_ids_and_keeps_the_solver_working(
    backend: PooledBackend,  # noqa: F811
    tmp_path: Path,
) -> None:
    async def play(observation: str) -> tuple[Any, list[Any]]:
        env = MiniWoBEnv(task="click-button", observation=observation, time_limit=60)
        ctx = EpisodeContext(
            episode_id=f"shot-{observation}",
            sandbox_backend=backend,
            registry=get_registry(),
            artifacts_dir=str(tmp_path / observation / "artifacts"),
        )
        env.bind(ctx)
        try:
            messages, _ = await env.reset(seed=7)
            text = await env.scripted_action()
            assert text is not None
            call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
            from toolgym.core.types import Action, ActionKind, ToolCall

            result = await env.step(
                Action(
                    text=text,
                    kind=ActionKind.TOOL_CALLS,
                    tool_calls=[ToolCall(name=call["name"], arguments=call["arguments"])],
                )
            )
            return result, messages
        finally:
            await ctx.aclose()

    shot, shot_messages = RUNNER.run(play("screenshot"))
    both, both_messages = RUNNER.run(play("both"))
    assert shot.info["success"] and both.info["success"]  # the score is the page's, whatever the model sees
    shot_text, shot_image = shot_messages[1]["content"]
    both_text, both_image = both_messages[1]["content"]
    assert "[" in both_text["text"] and "button" in both_text["text"]
    assert "button '" not in shot_text["text"] and "Task:" in shot_text["text"]  # no element lines
    assert "yellow label" in shot_messages[0]["content"]
    shot_png = (tmp_path / "screenshot" / "images" / f"{shot_image['image'][7:]}.png").read_bytes()
    both_png = (tmp_path / "both" / "images" / f"{both_image['image'][7:]}.png").read_bytes()
    assert shot_png != both_png  # the same instance (seed 7), with its ids drawn on it


def test_screenshots_need_an_output_directory(backend: PooledBackend) -> None:  # noqa: F811
    async def run() -> None:
        env = MiniWoBEnv(task="click-button", observation="both")
        ctx = EpisodeContext(episode_id="no-dir", sandbox_backend=backend, registry=get_registry())
        env.bind(ctx)
        try:
            with pytest.raises(ConfigError, match="--out"):
                await env.reset(seed=0)
        finally:
            await ctx.aclose()

    RUNNER.run(run())
    with pytest.raises(ConfigError, match="observation must be one of"):
        MiniWoBEnv(observation="pixels")


def test_the_tiny_model_with_screenshots_is_token_faithful(tmp_path: Path) -> None:
    """A sampling model (logprobs, loss masks) on image observations: the placeholder is in the
    ids once per image part, and verify proves every invariant with the files."""
    out = tmp_path / "tiny"
    done = _toolgym(
        "collect",
        "--env",
        "miniwob",
        "--model",
        "tiny",
        "--env-arg",
        "task=click-button",
        "--env-arg",
        "observation=both",
        "-n",
        "2",
        "--max-turns",
        "2",
        "--max-tokens-per-turn",
        "48",
        "--sandbox-backend",
        "docker",
        "--out",
        str(out),
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["token_faithful"] and r["status"] == "ok" and r["metadata"]["policy"] == "model"
        placeholder = r["metadata"]["image_placeholder"]
        shown = sum(s["text"].count(placeholder) for s in r["segments"] if s["role"] != "assistant")
        assert shown == len(image_refs(r["messages"])) >= 1
    verify = _toolgym("verify", str(out))
    assert verify.returncode == 0 and "all invariants hold" in verify.stdout, verify.stdout + verify.stderr
