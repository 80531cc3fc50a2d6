"""The tiny vision-language models (``tiny-vl``, Qwen2.5-VL-shaped, and ``tiny-qwen3-vl``): built
here, sampled from with screenshots, and their trajectories token-faithful to the image tokens they
saw (``docs/trajectory-format.md``, "Images"). Every test runs for both; the last ones check what
``tiny-qwen3-vl``'s tower starts with (``core/llm/local/tiny_vl.py``).

A random-weight model writes no tool calls, so each episode is one model turn over a prompt with a
screenshot (the shot-adder environment of tests/trajectories/test_images.py)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trajectories.helpers import png
from tests.trajectories.test_images import copy_dataset, registry
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.errors import LLMError
from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.llm.local.vlm import image_row
from toolgym.core.llm.resolve import TINY
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.images import image_part, image_path, store_image
from toolgym.core.tokens.vision import IMAGE_PAD, VisionInputs, image_pad_runs, processor_from_record
from toolgym.core.types import GenerationRequest, SamplingParams
from toolgym.trajectories.store import iter_trajectories
from toolgym.trajectories.verify import verify

MODEL_TYPES = {"tiny-vl": "qwen2_5_vl", "tiny-qwen3-vl": "qwen3_vl"}


@pytest.fixture(scope="module", params=sorted(MODEL_TYPES))
def vl_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def vl_dir(vl_name: str) -> Path:
    return ensure_tiny_model(TINY[vl_name])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def backend(vl_dir: Path) -> Any:
    return TransformersBackend(vl_dir)


def screenshot(width: int, height: int, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), rgb)
    ImageDraw.Draw(image).rectangle([10, 10, width // 2, height // 3], fill=(20, 20, 220))
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def test_tiny_vl_builds_offline_once_with_its_image_processor(vl_name: str, vl_dir: Path) -> None:
    assert (vl_dir / "READY").is_file() and (vl_dir / "preprocessor_config.json").is_file()
    assert ensure_tiny_model(TINY[vl_name]) == vl_dir  # type: ignore[arg-type]  # cached, not rebuilt
    config = json.loads((vl_dir / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPES[vl_name] and config["vision_config"]["depth"] == 1
    # the template renders image parts itself (as HF processors call it) as toolgym's flattening does
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(vl_dir))
    messages = [{"role": "user", "content": [{"type": "text", "text": "Look: "}, image_part("a" * 64)]}]
    hf = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "Look: <|vision_start|><|image_pad|><|vision_end|><|im_end|>" in hf
    assert hf == ChatFormat(tokenizer).render(messages, add_generation_prompt=True)


def test_a_screenshot_prompt_holds_the_processors_image_tokens_and_samples(
    backend: Any, tmp_path: Path
) -> None:
    sha = store_image(tmp_path, screenshot(160, 210))
    vision = VisionInputs(backend.image_processor, root=tmp_path)
    asm = TokenAssembler(ChatFormat(backend.tokenizer, vision=vision))
    asm.start([{"role": "user", "content": [{"type": "text", "text": "Click the button."}, image_part(sha)]}])
    ids = asm.prompt_ids
    grid = backend.image_processor(images=[screenshot_pil(160, 210)], return_tensors="pt")["image_grid_thw"]
    expected = int(grid.prod()) // backend.image_processor.merge_size**2
    pad = backend.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    assert image_pad_runs(ids, pad) == [expected] and 4 <= expected <= 64

    images = [vision.load(ref) for ref in asm.image_refs]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    result = asyncio.run(backend.generate(GenerationRequest(ids, sampling, images=images)))
    assert len(result.output_ids) == 6 and result.logprobs is not None

    # the sampled logprobs are those of a full forward pass with the same pixels (what a trainer computes)
    row = image_row(backend.model, backend.image_processor, ids + result.output_ids, images)
    with torch.no_grad():
        out = backend.model(
            input_ids=torch.tensor([ids + result.output_ids]),
            position_ids=row.positions[:, None],
            pixel_values=row.pixel_values,
            image_grid_thw=row.image_grid_thw,
        )
    logp = torch.log_softmax(out.logits[0, len(ids) - 1 : -1].float(), -1)
    full = [float(logp[i, t]) for i, t in enumerate(result.output_ids)]
    assert full == pytest.approx(result.logprobs, abs=1e-4)

    # batched with a text prompt and another screenshot, each row samples what it samples alone
    text_ids = ChatFormat(backend.tokenizer).encode(
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    )
    other = TokenAssembler(ChatFormat(backend.tokenizer, vision=vision))
    other.start([{"role": "user", "content": [image_part(store_image(tmp_path, screenshot(64, 300)))]}])
    requests = [
        GenerationRequest(ids, sampling, images=images),
        GenerationRequest(text_ids, sampling),
        GenerationRequest(other.prompt_ids, sampling, images=[vision.load(r) for r in other.image_refs]),
    ]

    async def together() -> list[Any]:
        return list(await asyncio.gather(*(backend.generate(r) for r in requests)))

    alone = [asyncio.run(backend.generate(r)) for r in requests]
    batched = asyncio.run(together())
    assert backend.max_rows_seen >= 2  # (3 here: rows with and without images decoded together)
    for a, b in zip(alone, batched, strict=True):
        assert a.output_ids == b.output_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)

    with pytest.raises(LLMError, match="image-token runs"):  # another image than the prompt was rendered for
        asyncio.run(backend.generate(GenerationRequest(ids, sampling, images=[screenshot(32, 32)])))


def screenshot_pil(width: int, height: int) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(screenshot(width, height))).convert("RGB")


@pytest.fixture(scope="module")
def vl_dataset(vl_name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vl-shots")
    opts = CollectOptions(
        env="shot-adder",
        out=out,
        model=vl_name,
        episodes=2,
        sandbox_backend="none",
        engine=EngineConfig(max_turns=1, max_tokens_per_turn=8),
    )
    asyncio.run(collect(opts, registry=registry()))
    return out


def test_collected_trajectories_record_the_expanded_ids_and_verify(
    vl_dataset: Path, vl_dir: Path, tmp_path: Path
) -> None:
    trajs = list(iter_trajectories(vl_dataset))
    assert trajs and all(t.metadata.get("vision") for t in trajs)
    t = trajs[0]
    pad = t.metadata["vision"]["image_token_id"]
    prompt = t.segments[0].token_ids
    ref = next(p["image"] for p in t.prompt[-1]["content"] if p.get("type") == "image")
    processor = processor_from_record(t.metadata["vision"]["processor"])
    grid = VisionInputs(processor, root=vl_dataset).grid(ref)
    assert image_pad_runs(prompt, pad) == [grid[0] * grid[1] * grid[2] // 4]
    assert t.metadata["vision"]["sequence_images"] == [[ref]]  # the sequence's images, by reference
    assert any(s.role == "assistant" and s.logprobs for s in t.segments)
    report = verify(iter_trajectories(vl_dataset), root=vl_dataset)
    assert report.ok, report.violations
    # `toolgym verify --tokenizer tiny-vl`: the prompt re-rendered with the recorded image processor
    from transformers import AutoTokenizer

    chat = ChatFormat(AutoTokenizer.from_pretrained(str(vl_dir)))
    report = verify(iter_trajectories(vl_dataset), chat=chat, root=vl_dataset)
    assert report.ok, report.violations

    # a planted swap: another (larger) screenshot stored under the first one's reference
    swapped = copy_dataset(vl_dataset, tmp_path / "swapped")
    image_path(swapped, ref).write_bytes(png(width=96, height=200))
    report = verify(iter_trajectories(swapped), root=swapped)
    assert not report.ok
    problems = [p for ps in report.violations.values() for p in ps]
    assert any("does not hash to its name" in p for p in problems)

    # ids that hold another number of image tokens than the stored image gives
    tampered = copy_dataset(vl_dataset, tmp_path / "tampered")
    lines = (tampered / "trajectories.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["segments"][0]["token_ids"].remove(pad)
    first["segments"][0]["loss_mask"].pop()
    lines[0] = json.dumps(first)
    (tampered / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    report = verify(iter_trajectories(tampered), root=tampered)
    problems = [p for ps in report.violations.values() for p in ps]
    assert any("image-token runs" in p for p in problems), problems


def test_one_local_trainer_step_on_a_multimodal_trajectory(vl_dataset: Path, vl_dir: Path) -> None:
    import numpy as np
    from transformers import AutoModelForImageTextToText

    from toolgym.core.tokens.vision import load_image_processor
    from toolgym.training.local.batch import collate, trajectory_rows
    from toolgym.training.local.config import OptimConfig
    from toolgym.training.local.trainer import PolicyTrainer, token_logprobs

    t = next(iter(iter_trajectories(vl_dataset)))
    ones = [
        np.ones(sum(len(s.token_ids) for s in t.segments if s.sequence == q), np.float32)
        for q in range(t.num_sequences)
    ]
    rows = trajectory_rows(t, ones, images_root=vl_dataset)
    assert rows and rows[0].images  # the row carries the stored screenshot
    model = AutoModelForImageTextToText.from_pretrained(str(vl_dir)).float()
    trainer = PolicyTrainer(model, optim=OptimConfig(lr=1e-2), image_processor=load_image_processor(vl_dir))

    # the trainer's logprobs of the sampled ids, with the pixels, are the sampler's
    mb = collate(rows, [0], pad_id=0, vision=trainer._vision)
    with torch.no_grad():
        logp, _ = token_logprobs(model, mb)
    assert logp.tolist() == pytest.approx(mb.old_logprobs.tolist(), abs=1e-4)

    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer.ppo_update(rows)
    changed = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert any(k.startswith("model.visual") for k in changed)  # the gradient reached the vision tower
    assert any("language_model" in k for k in changed)


# -- what tiny-qwen3-vl's tower starts with ---------------------------------------------------------------


def tower_output(model: Any, processor: Any, image: Any) -> torch.Tensor:
    inputs = processor(images=[image], return_tensors="pt")
    with torch.no_grad():
        out = model.model.visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def page_with_box(x: int, y: int) -> Any:
    """A 160x210 white page, a yellow band on top and one outlined box (a MiniWoB-like target) at x, y."""
    from PIL import Image, ImageDraw

    page = Image.new("RGB", (160, 210), (255, 255, 255))
    draw = ImageDraw.Draw(page)
    draw.rectangle([0, 0, 160, 50], fill=(255, 255, 0))
    draw.rectangle([x, y, x + 60, y + 16], outline=(120, 120, 120))
    return page


def test_only_the_qwen3_tower_puts_positions_and_contents_into_its_features() -> None:
    """On a blank page every patch shows the same white: Qwen2.5-VL's tower (rotary positions only)
    gives every image token the same features, Qwen3-VL's (a position table) a different one per place.
    And where a box is drawn moves its tokens' features by far more in Qwen3-VL's standardised output."""
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from toolgym.core.tokens.vision import load_image_processor

    blank = Image.new("RGB", (160, 210), (255, 255, 255))
    spread = {}
    for name in MODEL_TYPES:
        path = ensure_tiny_model(TINY[name])  # type: ignore[arg-type]
        model = AutoModelForImageTextToText.from_pretrained(str(path)).float().eval()
        processor = load_image_processor(path)
        tokens = tower_output(model, processor, blank)
        spread[name] = float((tokens - tokens.mean(0)).abs().mean() / tokens.abs().mean())
        if name == "tiny-qwen3-vl":
            a, b = (
                tower_output(model, processor, page_with_box(10, 70)),
                tower_output(model, processor, page_with_box(90, 170)),
            )
            changed = (a - b).abs().mean(-1)  # per token
            assert float(changed.max()) > 0.5  # a standardised feature moves by a good part of its spread
            assert float(tokens.std()) == pytest.approx(
                1.0, abs=0.6
            )  # the calibration's scale, on a page it never saw
    assert spread["tiny-vl"] < 1e-3, spread  # all white tokens alike: no position in the features
    assert spread["tiny-qwen3-vl"] > 0.2, spread


def test_the_qwen3_tower_init_is_a_function_of_the_seed() -> None:
    """Two towers from different random weights end with the same position table (a sinusoid), and the
    calibration standardises each one's output over the synthetic pages of the seed."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from toolgym.core.llm.local.tiny_vl import (
        CALIBRATION_PAGES,
        VISION3,
        image_processor,
        init_qwen3_tower,
        synthetic_pages,
    )

    assert [p.tobytes() for p in synthetic_pages(3, seed=0)] == [
        p.tobytes() for p in synthetic_pages(3, seed=0)
    ]
    assert synthetic_pages(1, seed=0)[0].tobytes() != synthetic_pages(1, seed=1)[0].tobytes()
    config = Qwen3VLConfig(
        text_config={
            "hidden_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 64,
            "vocab_size": 32,
        },
        vision_config={**VISION3, "out_hidden_size": 64},
    )
    towers = []
    for weights_seed in (1, 2):
        torch.manual_seed(weights_seed)
        visual = Qwen3VLForConditionalGeneration(config).model.visual.float().eval()
        init_qwen3_tower(visual, image_processor(), seed=0)
        towers.append(visual)
    assert torch.equal(towers[0].pos_embed.weight, towers[1].pos_embed.weight)
    processor = image_processor()
    pages = synthetic_pages(CALIBRATION_PAGES, seed=0)[:40]
    for visual in towers:
        with torch.no_grad():
            feats = torch.cat(
                [
                    visual(
                        **{"hidden_states": i["pixel_values"], "grid_thw": i["image_grid_thw"]}
                    ).pooler_output
                    for i in (processor(images=[p], return_tensors="pt") for p in pages)
                ]
            )
        assert float(feats.mean(0).abs().mean()) < 0.3 and float(feats.std(0).mean()) == pytest.approx(
            1.0, abs=0.3
        )
