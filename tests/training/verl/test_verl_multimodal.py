"""Rows of vision-language episodes through verl's own multimodal post-processing: the tiny VLM's
trajectories (expanded image tokens, screenshots by hash) become ``AgentLoopOutput`` rows with
``multi_modal_data``, and verl's ``AgentLoopWorker`` turns them into ``multi_modal_inputs``
(its processor re-processing the images) and M-RoPE position ids (the model's ``get_rope_index``),
then into its batch; what it computes must agree with the ids toolgym recorded. The last test runs
the whole path in verl's worker: the toolgym agent loop sampling the tiny VLM from screenshots."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="the verl bridge needs verl: pip install toolgym[verl]")

import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

from tests.core.test_image_limit import ShotsPlugin
from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.llm.resolve import TINY
from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.vision import IMAGE_PAD, VISION_START, VisionInputs
from toolgym.core.trajectory import Trajectory
from toolgym.training.verl.agent_loop import agent_loop_outputs
from toolgym.training.verl.rows import trajectory_rows

PROMPT_LEN, RESPONSE_LEN = 4096, 2048


@pytest.fixture(scope="module")
def vl_dir() -> Path:
    return ensure_tiny_model(TINY["tiny-vl"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def processor(vl_dir: Path) -> Any:
    """The tiny VLM's processor from verl's own ``hf_processor`` (which binds the model's
    ``get_rope_index`` to it). ``AutoProcessor`` would also load Qwen's video processor, which needs
    torchvision (not installed here), so it is handed the processor built without one; images
    never reach the video half."""
    import transformers
    from transformers import AutoTokenizer, Qwen2_5_VLProcessor
    from transformers.processing_utils import ProcessorMixin
    from verl.utils.tokenizer.tokenizer import hf_processor

    from toolgym.core.tokens.vision import load_image_processor

    no_video = ProcessorMixin.get_possibly_dynamic_module("BaseVideoProcessor")
    built = Qwen2_5_VLProcessor(
        image_processor=load_image_processor(vl_dir),
        tokenizer=AutoTokenizer.from_pretrained(str(vl_dir)),
        video_processor=object.__new__(type("NoVideo", (no_video,), {})),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformers.AutoProcessor, "from_pretrained", lambda *a, **k: built)
        proc = hf_processor(str(vl_dir))
    assert proc is built and hasattr(proc, "get_rope_index")
    return proc


def _episodes(root: Path, processor: Any, **env_kwargs: Any) -> list[Trajectory]:
    """Scripted episodes of the tiny VLM's token format (expanded image tokens): two screenshots in
    the first prompt and in each of five tool results."""
    chat = ChatFormat(processor.tokenizer, vision=VisionInputs(processor.image_processor))
    done: list[Trajectory] = []
    engine = RolloutEngine(
        registry=_registry(),
        policy=ScriptedPolicy(chat),
        config=EngineConfig(),
        env_kwargs=env_kwargs,
        on_trajectory=done.append,
        artifacts_dir=str(root / "artifacts"),
    )
    asyncio.run(engine.run(plan_episodes("many-shots", num_tasks=2, group_size=1)))
    assert len(done) == 2 and all(t.status == "ok" and "vision" in t.metadata for t in done)
    return done


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, processor: Any) -> tuple[Path, list[Trajectory]]:
    """At most three screenshots per prompt: several token sequences, images in the prompts."""
    root = tmp_path_factory.mktemp("vl-shots")
    return root, _episodes(root, processor, max_images=3)


@pytest.fixture(scope="module")
def all_shots(tmp_path_factory: pytest.TempPathFactory, processor: Any) -> tuple[Path, list[Trajectory]]:
    """Every screenshot kept: one token sequence, the tool results' images in the response."""
    root = tmp_path_factory.mktemp("vl-all-shots")
    return root, _episodes(root, processor)


def _registry() -> Registry:
    from toolgym.core.builtin import parsers as builtin

    return Registry.load(entry_points=False, plugins=[("parsers", builtin), ("shots", ShotsPlugin())])


def _worker(processor: Any) -> AgentLoopWorker:
    """verl's agent-loop worker with only what its post-processing reads (no Ray, no servers)."""
    worker = object.__new__(AgentLoopWorker)
    worker.rollout_config = types.SimpleNamespace(prompt_length=PROMPT_LEN, response_length=RESPONSE_LEN)
    worker.tokenizer, worker.processor = processor.tokenizer, processor
    worker.mm_processor_kwargs = {}
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    return worker


def _verl_config() -> Any:
    """What verl's client reads of its config here: the rollout's lengths."""
    rollout = types.SimpleNamespace(prompt_length=PROMPT_LEN, response_length=RESPONSE_LEN)
    return types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(rollout=rollout))


def _through_verl(worker: AgentLoopWorker, outputs: list[Any]) -> list[Any]:
    async def run() -> list[Any]:
        return [await worker._agent_loop_postprocess(o, validate=False, raw_prompt=[]) for o in outputs]

    return asyncio.run(run())


@pytest.mark.parametrize(("layout", "limited"), [("trajectory", True), ("step", True), ("trajectory", False)])
def test_vlm_rows_pass_verls_multimodal_postprocessing(
    processor: Any,
    shots: tuple[Path, list[Trajectory]],
    all_shots: tuple[Path, list[Trajectory]],
    layout: str,
    limited: bool,
) -> None:
    root, trajectories = shots if limited else all_shots
    worker = _worker(processor)
    pad_id = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    merge = processor.image_processor.merge_size
    internals = []
    for t in trajectories:
        rows = trajectory_rows(t, layout)  # type: ignore[arg-type]
        outputs = agent_loop_outputs(
            t,
            layout,
            max_prompt_len=PROMPT_LEN,
            max_response_len=RESPONSE_LEN,
            images_root=root,  # type: ignore[arg-type]
        )
        assert len(rows) == len(outputs) >= 1
        for row, output, internal in zip(rows, outputs, _through_verl(worker, outputs), strict=True):
            assert 1 <= len(row.images) <= (3 if limited else 12)  # the limit holds per row too
            assert len(output.multi_modal_data["images"]) == len(row.images)
            mm = internal.multi_modal_inputs
            grids = mm["image_grid_thw"]
            assert grids.shape == (len(row.images), 3)
            # verl's processor re-processed the stored images to exactly the recorded image tokens
            ids = internal.input_ids[0][internal.attention_mask[0].bool()]
            assert int((ids == pad_id).sum()) == int(grids.prod(dim=1).sum()) // merge**2
            assert mm["pixel_values"].shape[0] == int(grids.prod(dim=1).sum())
            # M-RoPE from the model's get_rope_index: text, then (t, h, w) rows; an image's tokens
            # share one temporal position, so positions advance less than the token count
            pos = internal.position_ids
            assert pos.shape == (1, 4, PROMPT_LEN + RESPONSE_LEN)
            live = pos[0, :, internal.attention_mask[0].bool()]
            assert torch.equal(live[0], torch.arange(len(ids)))  # verl's text positions
            assert int(live[1:].max()) < len(ids) - 1  # the vision positions, compressed per image
            internals.append(internal)
    batch = worker._postprocess(internals)  # verl's own batch: multi_modal_inputs per row
    assert len(batch.non_tensor_batch["multi_modal_inputs"]) == len(internals)


def test_a_cut_response_never_splits_an_image(
    processor: Any, all_shots: tuple[Path, list[Trajectory]]
) -> None:
    root, trajectories = all_shots
    t = trajectories[0]
    [row] = trajectory_rows(t, "trajectory")[:1]
    pad_id = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    start_id = processor.tokenizer.convert_tokens_to_ids(VISION_START)
    first_pad = row.response_ids.index(pad_id)  # an image of a tool result, inside the response
    limit = first_pad + 3  # would cut that image's run
    [cut, *_] = trajectory_rows(t, "trajectory", max_response_len=limit)
    assert cut.response_ids == row.response_ids[: first_pad - 1]  # before its vision-start marker
    assert row.response_ids[first_pad - 1] == start_id
    assert cut.meta.truncated_tokens == len(row.response_ids) - len(cut.response_ids)
    assert len(cut.images) == len(row.images) - sum(
        1 for _ in _runs_after(row.response_ids, pad_id, first_pad)
    )
    [output, *_] = agent_loop_outputs(t, "trajectory", max_response_len=limit, images_root=root)
    [internal] = _through_verl(_worker(processor), [output])
    assert internal.multi_modal_inputs["image_grid_thw"].shape[0] == len(cut.images)


def _runs_after(ids: list[int], pad_id: int, start: int) -> list[int]:
    runs, prev = [], False
    for i in range(start, len(ids)):
        if ids[i] == pad_id and not prev:
            runs.append(i)
        prev = ids[i] == pad_id
    return runs


def test_image_tokens_the_model_sampled_make_the_row_untrainable(
    processor: Any, shots: tuple[Path, list[Trajectory]]
) -> None:
    t = shots[1][0].model_copy(deep=True)
    pad_id = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    sampled = next(s for s in t.segments if s.role == "assistant")
    sampled.token_ids = [*sampled.token_ids[:-1], pad_id, sampled.token_ids[-1]]
    sampled.loss_mask = [1] * len(sampled.token_ids)
    with pytest.raises(ConfigError, match="sampled image tokens"):
        trajectory_rows(t, "step")


def test_rows_with_images_need_the_images(shots: tuple[Path, list[Trajectory]], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="images_root"):
        agent_loop_outputs(shots[1][0], "step")
    with pytest.raises(ConfigError, match="cannot be read"):
        agent_loop_outputs(shots[1][0], "step", images_root=tmp_path)


def test_the_tiny_vlms_sampled_episodes_pass_too(processor: Any, tmp_path: Path) -> None:
    """Episodes the tiny VLM sampled from a screenshot prompt (logprobs, its own image tokens), as
    ``collect --model tiny-vl`` stores them, through verl's post-processing."""
    from tests.trajectories.test_images import registry
    from toolgym.collect.run import CollectOptions, collect
    from toolgym.trajectories.store import iter_trajectories

    opts = CollectOptions(
        env="shot-adder",
        out=tmp_path,
        model="tiny-vl",
        episodes=2,
        sandbox_backend="none",
        engine=EngineConfig(max_turns=1, max_tokens_per_turn=8),
    )
    asyncio.run(collect(opts, registry=registry()))
    outputs = [
        o for t in iter_trajectories(tmp_path) for o in agent_loop_outputs(t, "step", images_root=tmp_path)
    ]
    assert len(outputs) == 2 and all(o.response_logprobs for o in outputs)
    for output, internal in zip(outputs, _through_verl(_worker(processor), outputs), strict=True):
        assert len(output.multi_modal_data["images"]) == 1
        grids = internal.multi_modal_inputs["image_grid_thw"]
        ids = internal.input_ids[0][internal.attention_mask[0].bool()]
        pad_id = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        assert (
            int((ids == pad_id).sum())
            == int(grids.prod(dim=1).sum()) // processor.image_processor.merge_size**2
        )


def test_a_vlm_samples_through_verls_client_from_its_pixels(
    processor: Any, vl_dir: Path, tmp_path: Path
) -> None:
    """The agent loop's generation path with a vision-language model: prompts with expanded image
    tokens, the pixels sent as verl's ``image_data`` (here to an in-process tiny VLM behind verl's
    client interface), the episode's rows then through verl's post-processing."""
    import io

    from PIL import Image

    from tests.trajectories.test_images import registry
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.rollout.policy import ModelPolicy
    from toolgym.core.tokens.images import image_path, image_refs
    from toolgym.training.verl.backend import LocalLLMServerClient, VerlServerBackend

    model = TransformersBackend(vl_dir)
    seen: list[list[bytes]] = []
    generate = model.generate

    async def spy(request: Any) -> Any:
        seen.append(list(request.images))
        return await generate(request)

    model.generate = spy  # type: ignore[method-assign]
    chat = ChatFormat(processor.tokenizer, vision=VisionInputs(processor.image_processor))
    backend = VerlServerBackend(
        LocalLLMServerClient(_verl_config(), model),
        processor.tokenizer,
        {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True},
        request_id="vlm-episode",
        eos_token_ids=chat.eos_token_ids,
    )
    config = EngineConfig(max_turns=1, max_tokens_per_turn=8)
    done: list[Trajectory] = []
    engine = RolloutEngine(
        registry=registry(),
        policy=ModelPolicy(backend, config, chat=chat),
        config=config,
        on_trajectory=done.append,
        artifacts_dir=str(tmp_path / "artifacts"),
    )
    asyncio.run(engine.run(plan_episodes("shot-adder", num_tasks=1, group_size=1)))
    [t] = done
    assert t.status == "ok", t.status_reason
    assert t.metadata["vision"]["sequence_images"] == [image_refs(t.prompt)]
    [[sent]] = seen  # one call, one image: the prompt's screenshot, as pixels
    stored = image_path(tmp_path, image_refs(t.prompt)[0]).read_bytes()
    assert Image.open(io.BytesIO(sent)).tobytes() == Image.open(io.BytesIO(stored)).convert("RGB").tobytes()
    [output] = agent_loop_outputs(t, "step", images_root=tmp_path)
    assert output.response_logprobs
    [internal] = _through_verl(_worker(processor), [output])
    assert internal.multi_modal_inputs["image_grid_thw"].shape == (1, 3)


def test_verls_agent_loop_worker_runs_a_vlm_episode_end_to_end(
    processor: Any, vl_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's ``AgentLoopWorker.generate_sequences`` with the tiny VLM as the model (its processor
    from verl's ``HFModelConfig``): the toolgym agent loop samples from screenshots through verl's
    client interface and returns rows whose images verl turns into ``multi_modal_inputs`` and
    M-RoPE positions for the batch."""
    import uuid

    import numpy as np
    import transformers
    from verl.protocol import DataProto
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl_helpers import write_config

    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.training.verl import compose
    from toolgym.training.verl.agent_loop import ToolgymAgentLoop
    from toolgym.training.verl.backend import LocalLLMServerClient

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", lambda *a, **k: processor)
    monkeypatch.setattr(ToolgymAgentLoop, "registry_factory", staticmethod(_registry))
    path = write_config(tmp_path, vl_dir, env="many-shots", layout="trajectory", group_size=2)
    overrides = [
        "toolgym.images_dir=" + str(tmp_path / "shots"),
        "verl.data.max_prompt_length=1024",
        "verl.actor_rollout_ref.rollout.prompt_length=1024",
    ]
    cfg, _ = compose.compose_config(path, overrides, data_dir=tmp_path)
    model = TransformersBackend(vl_dir)
    worker = AgentLoopWorker(cfg, LocalLLMServerClient(cfg, model))
    assert worker.processor is processor
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, worker.tokenizer, None)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4())], dtype=object)
    out = asyncio.run(worker.generate_sequences(batch.repeat(2, interleave=True)))
    assert len(out) == 2  # one row per episode (one token sequence each)
    inputs = out.non_tensor_batch["multi_modal_inputs"]
    pad_id = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    for i in range(len(out)):
        grids = inputs[i]["image_grid_thw"]
        ids = out.batch["input_ids"][i][out.batch["attention_mask"][i].bool()]
        assert grids.shape[0] >= 1  # the first prompt's screenshots at least
        assert (
            int((ids == pad_id).sum())
            == int(grids.prod(dim=1).sum()) // processor.image_processor.merge_size**2
        )
    assert out.batch["position_ids"].shape[1] == 4  # verl's text row and the (t, h, w) rows
    assert any((tmp_path / "shots" / "images").iterdir())
