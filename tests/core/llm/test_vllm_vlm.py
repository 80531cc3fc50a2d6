"""The tiny vision-language models (``tiny-vl`` and ``tiny-qwen3-vl``, every test for each) served by a real vLLM (its CPU build, from
``.venv-vllm-vl``), with screenshots sent as image parts and the ids and logprobs it returns stored.

One server serves the module (quick start, float32, ``--max-model-len 4096``, ``--logprobs-mode
processed_logprobs``, ``--enable-scale-out`` for ``/inference/v1/generate``). What is checked:

- the prompt ids vLLM ran the model on (``prompt_token_ids``, after its own image-token expansion)
  equal the ids toolgym rendered with the model's image processor (the client raises otherwise),
  for prompts with one and with two screenshots of different sizes;
- the sampled ids come back with their logprobs, equal to those of the same weights in process
  (float32, the same pixels, ``log_softmax(logits / T)``) within 1e-3;
- a prompt whose image-token run is one token longer than its image gives is refused;
- ``collect --backend openai`` stores those ids and logprobs, on a small environment that shows a
  fixed screenshot (in process) and on MiniWoB with screenshot-only observations (the CLI, a real
  Chromium in Docker); ``toolgym verify`` passes on both datasets and fails when a stored screenshot
  is swapped for another.

Skipped, with the reason, where ``.venv-vllm-vl`` is absent (``bash scripts/ensure-vllm.sh --vision``).
"""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trajectories.helpers import png
from tests.trajectories.test_images import copy_dataset, registry
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.errors import ConfigError, LLMError
from toolgym.core.llm.clients.openai import OpenAICompletionsBackend
from toolgym.core.llm.local.vlm import image_row
from toolgym.core.llm.serving.server_vllm import VLLMServer, vllm_python, vllm_tiny_model
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.images import image_part, image_path, store_image
from toolgym.core.tokens.vision import IMAGE_PAD, VisionInputs, image_pad_runs, processor_from_record
from toolgym.core.types import GenerationRequest, SamplingParams
from toolgym.trajectories.store import iter_trajectories
from toolgym.trajectories.verify import verify

pytestmark = pytest.mark.slow

MAX_MODEL_LEN = 4096
"""MiniWoB's prompt (tool schemas and a screenshot) is about 3,300 tokens."""
TEMPERATURE = 0.8  # not 1: the client also probes that the server's logprobs are temperature-scaled


SERVED = {"qwen2.5-vl": "tiny-vl", "qwen3-vl": "tiny-qwen3-vl"}


@pytest.fixture(scope="module", params=sorted(SERVED))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def model_dir(family: str) -> Path:
    return vllm_tiny_model(family)


@pytest.fixture(scope="module")
def vllm(family: str, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    try:
        vllm_python(vision=True)
    except ConfigError as exc:
        reason = f"no vLLM for vision-language models here: {exc}"
        print(f"\nSKIPPED vLLM VLM tests: {reason}")
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("vllm-vl") / "vllm.log"
    with VLLMServer(
        model_dir,
        served_model_name=SERVED[family],
        max_model_len=MAX_MODEL_LEN,
        log_path=log,
        quick_start=True,
    ) as server:
        yield server


@pytest.fixture(scope="module")
def hf_model(model_dir: Path) -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def screenshot(width: int, height: int, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), rgb)
    ImageDraw.Draw(image).rectangle([10, 10, width // 2, height // 3], fill=(20, 20, 220))
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def recomputed(
    model: Any, processor: Any, prompt: list[int], images: list[bytes], output: list[int], temperature: float
) -> list[float]:
    """Logprobs of ``output`` after ``prompt`` with ``images`` under ``log_softmax(logits / T)``, in process."""
    ids = prompt + output
    row = image_row(model, processor, ids, images)
    with torch.inference_mode():
        logits = model(
            input_ids=torch.tensor([ids]),
            position_ids=row.positions[:, None],
            pixel_values=row.pixel_values,
            image_grid_thw=row.image_grid_thw,
        ).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return [float(logp[i, t]) for i, t in enumerate(output)]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def generate(client: OpenAICompletionsBackend, request: GenerationRequest) -> Any:
    async def go() -> Any:
        try:
            return await client.generate(request)
        finally:
            await client.aclose()

    return run(go())


def test_screenshots_go_as_image_parts_and_vllm_runs_the_recorded_ids(
    vllm: VLLMServer, hf_model: Any, tmp_path: Path
) -> None:
    client = OpenAICompletionsBackend(vllm.url)
    assert client.image_processor is not None  # read from the served model's directory
    vision = VisionInputs(client.image_processor, root=tmp_path)
    asm = TokenAssembler(ChatFormat(client.tokenizer, vision=vision))
    shots = [screenshot(160, 210), screenshot(64, 300, (10, 200, 10))]
    refs = [store_image(tmp_path, s) for s in shots]
    asm.start(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Click the button."},
                    image_part(refs[0]),
                    image_part(refs[1]),
                ],
            }
        ]
    )
    prompt = asm.prompt_ids
    pad = client.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    runs = image_pad_runs(prompt, pad)
    assert len(runs) == 2 and runs[0] != runs[1]  # two screenshots, two sizes
    images = [vision.load(ref) for ref in asm.image_refs]
    sampling = SamplingParams(max_new_tokens=16, temperature=TEMPERATURE, seed=7, top_logprobs=3)
    result = generate(client, GenerationRequest(prompt, sampling, "shots", images))

    assert result.meta["endpoint"] == "/inference/v1/generate"  # the ids vLLM expanded were checked
    assert result.prompt_tokens == len(prompt)
    assert result.output_ids and len(result.logprobs) == len(result.output_ids)
    assert result.top_logprobs is not None and all(len(top) == 3 for top in result.top_logprobs)
    assert result.meta["logprobs_mode"] == "processed"
    assert client.logprobs.modes == {TEMPERATURE: "processed"}  # probed with the images on the real server
    want = recomputed(hf_model, client.image_processor, prompt, images, result.output_ids, TEMPERATURE)
    gap = max(abs(a - b) for a, b in zip(result.logprobs, want, strict=True))
    print(f"\nimage-token runs {runs}, {len(result.output_ids)} sampled ids, largest logprob gap {gap:.2e}")
    assert gap < 1e-3

    # a text prompt on the same server still goes through /v1/completions
    text = ChatFormat(client.tokenizer).encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    plain = generate(
        OpenAICompletionsBackend(vllm.url), GenerationRequest(text, SamplingParams(max_new_tokens=4, seed=1))
    )
    assert plain.output_ids and "endpoint" not in plain.meta


def test_a_prompt_with_another_image_token_count_is_refused(vllm: VLLMServer, tmp_path: Path) -> None:
    client = OpenAICompletionsBackend(vllm.url)
    vision = VisionInputs(client.image_processor, root=tmp_path)
    asm = TokenAssembler(ChatFormat(client.tokenizer, vision=vision))
    asm.start([{"role": "user", "content": [image_part(store_image(tmp_path, screenshot(96, 96)))]}])
    pad = client.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    prompt = list(asm.prompt_ids)
    prompt.insert(prompt.index(pad), pad)  # one image token more than the image gives
    images = [vision.load(ref) for ref in asm.image_refs]
    with pytest.raises(LLMError, match="other prompt ids than toolgym recorded"):
        generate(
            client, GenerationRequest(prompt, SamplingParams(max_new_tokens=2, temperature=1.0), "", images)
        )


@pytest.fixture(scope="module")
def dataset(vllm: VLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm-vl-shots")
    opts = CollectOptions(
        env="shot-adder",
        out=out,
        model=vllm.url,
        backend="openai",
        episodes=3,
        sandbox_backend="none",
        engine=EngineConfig.model_validate(
            {"max_turns": 1, "max_tokens_per_turn": 12, "sampling": {"temperature": TEMPERATURE}}
        ),
    )
    run(collect(opts, registry=registry()))
    return out


def sampled_logprob_gap(model: Any, dataset: Path) -> tuple[float, int]:
    """The largest |stored logprob − the same weights' ``log_softmax(logits / T)`` at that sampled id|
    over every sampled token of ``dataset``, each sequence recomputed in one forward pass with its
    stored screenshots; and how many tokens were compared."""
    worst, checked = 0.0, 0
    for t in iter_trajectories(dataset):
        temperature = float(t.sampling["temperature"])
        vision = t.metadata["vision"]
        processor = processor_from_record(vision["processor"])
        sequences: dict[int, list[Any]] = {}
        for segment in t.segments:
            sequences.setdefault(segment.sequence, []).append(segment)
        for number, segments in sequences.items():
            ids = [i for s in segments for i in s.token_ids]
            images = [image_path(dataset, ref).read_bytes() for ref in vision["sequence_images"][number]]
            row = image_row(model, processor, ids, images)
            with torch.inference_mode():
                logits = model(
                    input_ids=torch.tensor([ids]),
                    position_ids=row.positions[:, None],
                    pixel_values=row.pixel_values,
                    image_grid_thw=row.image_grid_thw,
                ).logits[0]
            logp = torch.log_softmax(logits.float() / temperature, dim=-1)
            at = 0
            for segment in segments:
                for k, (token, mask) in enumerate(zip(segment.token_ids, segment.loss_mask, strict=True)):
                    if mask:
                        assert segment.logprobs is not None and at + k > 0
                        worst = max(worst, abs(float(logp[at + k - 1, token]) - segment.logprobs[k]))
                        checked += 1
                at += len(segment.token_ids)
    return worst, checked


def test_collect_stores_vllms_ids_and_logprobs_and_verify_checks_the_images(
    dataset: Path, hf_model: Any, tmp_path: Path
) -> None:
    trajectories = list(iter_trajectories(dataset))
    assert len(trajectories) == 3 and all(t.status.value == "ok" for t in trajectories)
    for t in trajectories:
        vision = t.metadata["vision"]
        grids = VisionInputs(processor_from_record(vision["processor"]), root=dataset)
        want = [g[0] * g[1] * g[2] // 4 for g in map(grids.grid, vision["sequence_images"][0])]
        assert image_pad_runs(t.segments[0].token_ids, vision["image_token_id"]) == want
        assert any(s.role == "assistant" and s.logprobs for s in t.segments)
    gap, checked = sampled_logprob_gap(hf_model, dataset)
    print(f"\n{checked} stored logprobs recomputed in process, largest gap {gap:.2e}")
    assert checked >= 3 and gap < 1e-3

    report = verify(iter_trajectories(dataset), root=dataset)
    assert report.ok, report.violations
    swapped = copy_dataset(dataset, tmp_path / "swapped")
    ref = trajectories[0].metadata["vision"]["sequence_images"][0][0]
    image_path(swapped, ref).write_bytes(png(width=96, height=200))  # another screenshot under its name
    report = verify(iter_trajectories(swapped), root=swapped)
    problems = [p for ps in report.violations.values() for p in ps]
    assert not report.ok and any("does not hash to its name" in p for p in problems), problems


def toolgym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolgym", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.skipif(shutil.which("docker") is None, reason="MiniWoB's browser runs in Docker")
def test_screenshot_only_miniwob_through_vllm_collects_and_verifies(
    vllm: VLLMServer, hf_model: Any, tmp_path: Path
) -> None:
    """``toolgym collect --env miniwob --env-arg observation=screenshot --backend openai`` against the
    real vLLM, a real Chromium rendering the task. The random-weight model calls no tool, so each
    episode is one call over the first screenshot (prompts with two screenshots: the first test)."""
    out = tmp_path / "miniwob"
    done = toolgym(
        "collect", "--env", "miniwob", "--model", vllm.url, "--backend", "openai",
        "--env-arg", "task=click-test", "--env-arg", "observation=screenshot",
        "-n", "2", "--max-turns", "2", "--max-tokens-per-turn", "16", "--temperature", str(TEMPERATURE),
        "--sandbox-backend", "docker", "--no-progress", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 trajectories written, 0 failed" in done.stdout + done.stderr, done.stdout + done.stderr
    trajectories = list(iter_trajectories(out))
    assert all(t.steps and all(s.llm is not None for s in t.steps) for t in trajectories)
    assert all(t.metadata["vision"]["sequence_images"][0] for t in trajectories)  # screenshots, seen
    gap, checked = sampled_logprob_gap(hf_model, out)
    print(
        f"\nMiniWoB: steps {[len(t.steps) for t in trajectories]}, {checked} logprobs, largest gap {gap:.2e}"
    )
    assert checked >= 2 and gap < 1e-3

    verified = toolgym("verify", str(out))
    assert verified.returncode == 0 and "all invariants hold" in verified.stdout + verified.stderr
    swapped = copy_dataset(out, tmp_path / "swapped")
    ref = trajectories[0].metadata["vision"]["sequence_images"][0][0]
    first = image_path(swapped, ref)
    other = next(p for p in (swapped / "images").iterdir() if p != first)
    first.write_bytes(other.read_bytes())  # another real screenshot under the first one's name
    report = verify(iter_trajectories(swapped), root=swapped)  # what `toolgym verify` runs
    problems = [p for ps in report.violations.values() for p in ps]
    assert not report.ok and any("does not hash to its name" in p for p in problems), problems
