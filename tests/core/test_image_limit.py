"""A limit on the images a prompt holds (``Env.max_images``): older screenshots become a short
text in a new token sequence, every model call sees at most the limit, whatever brings the images
(the first prompt, several per observation), and the dataset still verifies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.helpers import png
from toolgym import EnvSpec, StepResult, Task, ToolTaskEnv, hookimpl, tool
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.registry import Registry
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.images import (
    OMITTED_IMAGE,
    image_part,
    image_refs,
    limit_images,
    omitted_image_refs,
    store_image,
)
from toolgym.core.types import Action, Message
from toolgym.trajectories.store import iter_trajectories
from toolgym.trajectories.verify import verify

TURNS = 5


@tool
async def look() -> str:
    """Look at the screen again."""
    return "looked"


class ManyShotsEnv(ToolTaskEnv):
    """Two 'screenshots' in the first prompt and two in every tool result: more than any limit."""

    system_prompt = "Look, then answer."
    tools = (look,)
    max_turns = TURNS + 1

    def __init__(self, max_images: int | None = None) -> None:
        super().__init__()
        self.max_images = max_images

    def load_task(self, seed: int) -> Task:
        return Task(id=f"shots-{seed}", question="What do you see?", answer="done")

    def _shots(self, n: int) -> list[dict[str, str]]:
        assert self.ctx.artifacts_dir
        root = Path(self.ctx.artifacts_dir).parent
        return [image_part(store_image(root, png(rgb=(n, k, 7)))) for k in range(2)]

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        messages, info = await super().reset(seed=seed, options=options)
        messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"]}, *self._shots(0)]
        return messages, info

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        if isinstance(result.observation, list) and result.observation and not result.terminated:
            last = result.observation[-1]
            last["content"] = [
                {"type": "text", "text": str(last["content"])},
                *self._shots(len(self._history)),
            ]
        return result

    async def scripted_action(self) -> str | None:
        if len(self._history) < TURNS:
            return '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>'
        return "done"


class ShotsPlugin:
    @hookimpl
    def toolgym_tools(self) -> list[Any]:
        return [look]

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("many-shots", ManyShotsEnv)]


def _registry() -> Registry:
    from toolgym.core.builtin import parsers as builtin

    return Registry.load(entry_points=False, plugins=[("parsers", builtin), ("shots", ShotsPlugin())])


def _collect(out: Path, **env_args: Any) -> list[Any]:
    opts = CollectOptions(
        env="many-shots", out=out, model="scripted", episodes=2, sandbox_backend="none", env_kwargs=env_args
    )
    asyncio.run(collect(opts, registry=_registry()))
    return list(iter_trajectories(out))


def test_limit_images_keeps_the_latest_and_says_where_the_others_were() -> None:
    a, b, c = (image_part(ch * 64) for ch in "abc")
    messages: list[Message] = [
        {"role": "user", "content": [{"type": "text", "text": "first"}, a, b]},
        {"role": "assistant", "content": "call"},
        {"role": "tool", "content": [{"type": "text", "text": "page"}, c]},
    ]
    kept = limit_images(messages, 2)
    assert image_refs(kept) == [b["image"], c["image"]]
    assert kept[0]["content"][1] == {"type": "text", "text": OMITTED_IMAGE, "omitted_image": a["image"]}
    assert omitted_image_refs(kept) == [a["image"]]  # the record still names what earlier calls saw
    assert kept[1] is messages[1] and kept[2] is messages[2]  # untouched messages are not copied
    assert image_refs(messages) == [a["image"], b["image"], c["image"]]  # the input is not changed
    assert image_refs(limit_images(messages, 0)) == [] and limit_images(messages, 9) == messages
    with pytest.raises(ValueError):
        limit_images(messages, -1)


def test_no_model_call_sees_more_images_than_the_limit(tmp_path: Path) -> None:
    trajectories = _collect(tmp_path / "limited", max_images=3)
    assert len(trajectories) == 2
    for t in trajectories:
        assert t.status == "ok" and t.token_faithful and len(t.steps) == TURNS + 1
        assert t.num_sequences > 1  # an image given up starts a new token sequence
        placeholder = t.metadata["image_placeholder"]
        for seq in range(t.num_sequences):
            shown = sum(
                s.text.count(placeholder) for s in t.segments if s.sequence == seq and s.role != "assistant"
            )
            assert shown <= 3, (seq, shown)
        # the record ends with what the last call saw: the latest 3 images, the rest marked
        assert len(image_refs(t.messages)) == 3
        text = json.dumps(t.messages)
        assert text.count(json.dumps(OMITTED_IMAGE)[1:-1]) == 2 * (TURNS + 1) - 3
        # the last call's prompt: every turn's text is there, with the latest 3 images
        last = [s for s in t.segments if s.sequence == t.num_sequences - 1]
        assert sum(s.text.count(placeholder) for s in last if s.role != "assistant") == 3
        assert last[0].text.count("looked") == TURNS
    report = verify(
        iter_trajectories(tmp_path / "limited"),
        chat=ChatFormat(load_tiny_tokenizer("qwen")),
        root=tmp_path / "limited",
    )
    assert report.ok, report.violations


def test_without_a_limit_every_image_stays_in_one_sequence(tmp_path: Path) -> None:
    for t in _collect(tmp_path / "all"):
        assert t.num_sequences == 1 and len(image_refs(t.messages)) == 2 * (TURNS + 1)


def test_a_text_model_is_told_once_that_it_gets_no_pixels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A text model on an environment with screenshots: the images reach it as placeholder text
    (recorded so, the dataset verifies) and one warning says so; the scripted solver says nothing."""
    from toolgym.core.rollout.config import EngineConfig

    with caplog.at_level("WARNING", logger="toolgym.rollout"):
        opts = CollectOptions(
            env="many-shots",
            out=tmp_path / "text",
            model="tiny",
            episodes=3,
            sandbox_backend="none",
            engine=EngineConfig(max_turns=1, max_tokens_per_turn=4),
        )
        asyncio.run(collect(opts, registry=_registry()))
    warned = [r for r in caplog.records if "has no image processor" in r.getMessage()]
    assert len(warned) == 1 and "observation=axtree" in warned[0].getMessage()
    trajectories = list(iter_trajectories(tmp_path / "text"))
    assert len(trajectories) == 3 and all(
        t.status == "ok" and "vision" not in t.metadata for t in trajectories
    )
    report = verify(trajectories, chat=ChatFormat(load_tiny_tokenizer("qwen")), root=tmp_path / "text")
    assert report.ok, report.violations
    caplog.clear()
    with caplog.at_level("WARNING", logger="toolgym.rollout"):
        _collect(tmp_path / "scripted")
    assert not [r for r in caplog.records if "has no image processor" in r.getMessage()]


def test_scripted_demonstrations_in_a_vlms_token_format(tmp_path: Path) -> None:
    """``--model scripted --tokenizer tiny-vl``: the solver's episodes record each screenshot as
    the VLM's expanded image tokens (``metadata.vision``), so a VLM can be warm-started on them;
    with the image limit too, and verify re-processes the images."""
    from toolgym.core.tokens.vision import IMAGE_PAD, image_pad_runs

    out = tmp_path / "vl"
    opts = CollectOptions(
        env="many-shots",
        out=out,
        model="scripted",
        tokenizer="tiny-vl",
        episodes=1,
        sandbox_backend="none",
        env_kwargs={"max_images": 3},
    )
    asyncio.run(collect(opts, registry=_registry()))
    [t] = iter_trajectories(out)
    vision = t.metadata["vision"]
    assert t.status == "ok" and vision["image_token_id"] and t.num_sequences > 1
    for seq, refs in enumerate(vision["sequence_images"]):
        runs = image_pad_runs(t.sequence_ids(seq), vision["image_token_id"])
        assert len(runs) == len(refs) <= 3 and all(n > 1 for n in runs)  # expanded, not one placeholder
    tokenizer = load_tiny_tokenizer("qwen2.5-vl")
    assert tokenizer.convert_tokens_to_ids(IMAGE_PAD) == vision["image_token_id"]
    report = verify(iter_trajectories(out), chat=ChatFormat(tokenizer), root=out)
    assert report.ok, report.violations
    # an image only earlier calls saw (taken out of the final messages) is still checked
    [gone, *_] = omitted_image_refs(t.messages)
    (out / "images" / f"{gone[7:]}.png").write_bytes(png(width=96, rgb=(9, 9, 9)))
    report = verify(iter_trajectories(out), chat=ChatFormat(tokenizer), root=out)
    assert not report.ok and "does not hash to its name" in str(report.violations)
