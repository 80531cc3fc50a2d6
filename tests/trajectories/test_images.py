"""Screenshots in datasets: stored by hash beside the trajectories, checked by verify, carried by
the HF and verl exports. The environment here is the adder task with an image in its first user
message and in each tool result (the GUI environments do the same with real screenshots:
tests/plugins/miniwob/test_screenshots.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.trajectories.helpers import AdderEnv, DatasetPlugin, png
from toolgym import EnvSpec, StepResult, hookimpl
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.registry import Registry
from toolgym.core.tokens.images import image_part, image_refs, store_image
from toolgym.core.types import Action, Message
from toolgym.trajectories.export_hf import write_hf_dataset
from toolgym.trajectories.export_verl import write_verl_prompts
from toolgym.trajectories.store import iter_raw, iter_trajectories
from toolgym.trajectories.verify import verify


class ShotAdderEnv(AdderEnv):
    """The adder task, seen through 'screenshots': the same image for every seed's first page
    (so files are shared), and one per tool result coloured by the sum."""

    def _root(self) -> Path:
        assert self.ctx.artifacts_dir
        return Path(self.ctx.artifacts_dir).parent

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        messages, info = await super().reset(seed=seed, options=options)
        sha = store_image(self._root(), png(rgb=(1, 2, 3)))
        messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"]}, image_part(sha)]
        return messages, info

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        if isinstance(result.observation, list) and result.observation and not result.terminated:
            last = result.observation[-1]
            total = int(str(last["content"]).strip() or 0)
            sha = store_image(self._root(), png(rgb=(total, 0, 0)))
            last["content"] = [{"type": "text", "text": str(last["content"])}, image_part(sha)]
        return result


class ShotPlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("shot-adder", ShotAdderEnv)]


def registry() -> Registry:
    from tests.core.helpers import TestPlugin
    from toolgym.core.builtin import parsers as builtin

    return Registry.load(
        entry_points=False,
        plugins=[
            ("parsers", builtin),
            ("test", TestPlugin()),
            ("dataset", DatasetPlugin()),
            ("shots", ShotPlugin()),
        ],
    )


@pytest.fixture(scope="module")
def shot_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shots")
    opts = CollectOptions(
        env="shot-adder", out=out, model="scripted", episodes=4, group_size=2, sandbox_backend="none"
    )
    asyncio.run(collect(opts, registry=registry()))
    return out


def copy_dataset(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_images_are_stored_once_by_hash_and_referenced_from_the_messages(shot_dataset: Path) -> None:
    trajs = list(iter_trajectories(shot_dataset))
    assert len(trajs) == 8
    refs = [r for t in trajs for r in image_refs(t.messages)]
    assert len(refs) == 16  # the first page and one tool result per episode
    files = sorted((shot_dataset / "images").iterdir())
    assert len(files) == len(set(refs)) < len(refs)  # equal screenshots share one file
    for f in files:
        assert hashlib.sha256(f.read_bytes()).hexdigest() == f.stem
    line = (shot_dataset / "trajectories.jsonl").read_text().splitlines()[0]
    assert "iVBOR" not in line and len(line) < 20_000  # no inline PNG
    t = trajs[0]
    assert t.metadata["image_placeholder"] == "<image>"
    assert isinstance(t.prompt[-1]["content"], list) and t.prompt[-1]["content"][1]["type"] == "image"
    assert "<image>" in t.steps[0].observation  # the step's reading text says where the image was


def test_verify_accepts_the_dataset_and_catches_missing_or_altered_images(
    shot_dataset: Path, tmp_path: Path
) -> None:
    from toolgym.core.llm.local.tiny import load_tiny_tokenizer
    from toolgym.core.tokens.chat import ChatFormat

    chat = ChatFormat(load_tiny_tokenizer("qwen"))
    report = verify(iter_trajectories(shot_dataset), chat=chat, root=shot_dataset)
    assert report.ok, report.violations

    missing = copy_dataset(shot_dataset, tmp_path / "missing")
    victim = sorted((missing / "images").iterdir())[0]
    victim.unlink()
    report = verify(iter_trajectories(missing), root=missing)
    assert not report.ok
    assert any(f"{victim.name} is missing" in p for ps in report.violations.values() for p in ps)

    altered = copy_dataset(shot_dataset, tmp_path / "altered")
    victim = sorted((altered / "images").iterdir())[-1]
    victim.write_bytes(png(rgb=(9, 9, 9)))  # a valid PNG, but not the one the episode saw
    report = verify(iter_trajectories(altered), root=altered)
    assert any("does not hash to its name" in p for ps in report.violations.values() for p in ps)


def test_verify_catches_an_image_part_the_ids_do_not_stand_for(shot_dataset: Path) -> None:
    t = next(iter(iter_trajectories(shot_dataset)))
    dropped = t.model_copy(deep=True)
    dropped.messages[1]["content"] = dropped.messages[1]["content"][0]["text"]  # the image part is gone
    dropped.prompt[1]["content"] = dropped.messages[1]["content"]
    problems = verify([dropped], root=shot_dataset).violations[t.trajectory_id]
    assert any("image placeholder" in p for p in problems)
    unnamed = t.model_copy(deep=True)
    unnamed.metadata.pop("image_placeholder")
    assert any(
        "image_placeholder" in p for p in verify([unnamed], root=shot_dataset).violations[t.trajectory_id]
    )
    forged = t.model_copy(deep=True)
    forged.messages[1]["content"][1]["image"] = "sha256:../../../etc/passwd"
    assert any(
        "not an image reference" in p for p in verify([forged], root=shot_dataset).violations[t.trajectory_id]
    )


def test_cli_verify_fails_on_a_missing_image(
    shot_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from toolgym.cli import app

    monkeypatch.setattr("toolgym.core.registry._default", registry())
    assert CliRunner().invoke(app, ["verify", str(shot_dataset)]).exit_code == 0
    broken = copy_dataset(shot_dataset, tmp_path / "broken")
    next((broken / "images").iterdir()).unlink()
    result = CliRunner().invoke(app, ["verify", str(broken)])
    assert result.exit_code == 1 and "missing" in result.output and "violate" in result.output


def test_hf_export_round_trip_gives_the_same_images(shot_dataset: Path, tmp_path: Path) -> None:
    import datasets
    from PIL import Image

    out = tmp_path / "hf"
    write_hf_dataset(iter_trajectories(shot_dataset), out, images_root=shot_dataset)
    ds = datasets.load_dataset(
        str(out), split="train", cache_dir=str(tmp_path / "cache")
    )  # not ~/.cache: equal names collide
    assert isinstance(ds.features["images"].feature, datasets.Image)
    for row in ds:
        messages = json.loads(row["messages_json"])
        refs = image_refs(messages)
        assert len(row["images"]) == len(refs) == 2
        for ref, image in zip(refs, row["images"], strict=True):
            assert isinstance(image, Image.Image)
            stored = Image.open(
                io.BytesIO((shot_dataset / "images" / f"{ref.split(':')[1]}.png").read_bytes())
            )
            assert image.size == stored.size and image.tobytes() == stored.tobytes()
    raw = pq.read_table(next((out / "data").glob("train-*.parquet")))
    first = raw.column("images")[0].as_py()[0]
    assert (
        hashlib.sha256(first["bytes"]).hexdigest()
        == image_refs(json.loads(raw.column("messages_json")[0].as_py()))[0][7:]
    )


def test_hf_export_refuses_screenshots_without_their_folder(shot_dataset: Path, tmp_path: Path) -> None:
    from toolgym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="screenshots"):
        write_hf_dataset(iter_trajectories(shot_dataset), tmp_path / "hf")


def test_verl_export_carries_the_prompt_images_as_verl_reads_them(shot_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    result = write_verl_prompts(lambda: iter_raw(shot_dataset), out, images_root=shot_dataset)
    table = pq.read_table(out).to_pylist()
    assert result.rows == len(table) == 4
    for row in table:
        user = row["prompt"][-1]["content"]
        # verl's RLHFDataset splits the content on <image> and pairs the k-th with images[k]
        assert user.count("<image>") == len(row["images"]) == 1
        data = row["images"][0]["bytes"]
        assert (shot_dataset / "images" / f"{hashlib.sha256(data).hexdigest()}.png").is_file()


def test_sft_export_keeps_image_parts_and_lists_their_files(shot_dataset: Path, tmp_path: Path) -> None:
    from toolgym.trajectories.export_sft import write_sft

    out = tmp_path / "sft.jsonl"
    written, _ = write_sft(iter_trajectories(shot_dataset), out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == len(records) == 8
    for r in records:
        parts = [p for m in r["messages"] if isinstance(m["content"], list) for p in m["content"]]
        images = [p for p in parts if p["type"] == "image"]
        assert len(images) == len(r["images"]) == 2
        for part, path in zip(images, r["images"], strict=True):
            assert path == f"images/{part['image'][7:]}.png" and (shot_dataset / path).is_file()
        assert all(isinstance(m["content"], str) or m["role"] in ("user", "tool") for m in r["messages"])
