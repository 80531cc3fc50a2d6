"""The SGLang client against SGLang's published ``/generate`` shapes (version 0.5.23, from its
source; no SGLang server runs on this machine, see README, Engines): request fields it accepts,
and non-streaming answers with ``meta_info.output_token_logprobs`` as [logprob, token_id, text]
triples and ``meta_info.finish_reason`` objects, parsed directly and through a replaying server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.errors import LLMError
from toolgym.core.llm.clients.sglang import SGLangBackend, generate_payload, parse_generate_response
from toolgym.core.types import GenerationRequest, SamplingParams

SHAPES = json.loads(Path(__file__).with_name("sglang_0_5_23_shapes.json").read_text())
ANSWERS: dict[str, Any] = SHAPES["answers"]


def test_every_field_the_client_sends_is_one_sglang_declares() -> None:
    sp = SamplingParams(
        max_new_tokens=8,
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        stop=("</action>",),
        stop_token_ids=(151645,),
        seed=5,
        top_logprobs=3,
    )
    body = generate_payload([1, 2, 3], sp)
    assert set(body) <= set(SHAPES["generate_request_fields"]), set(body) - set(
        SHAPES["generate_request_fields"]
    )
    assert set(body["sampling_params"]) <= set(SHAPES["sampling_params_fields"])
    assert body["input_ids"] == [1, 2, 3] and body["return_logprob"] is True and body["top_logprobs_num"] == 3
    assert "text" not in body  # token in: SGLang must not re-tokenize


def test_stop_token_answer() -> None:
    answer = ANSWERS["stop_token"]
    r = parse_generate_response(answer, 2)
    triples = answer["meta_info"]["output_token_logprobs"]
    assert r.output_ids == answer["output_ids"] == [t[1] for t in triples]
    assert r.logprobs == [t[0] for t in triples]
    assert r.finish_reason == "stop" and r.meta["matched_stop"] == 151645
    assert r.top_logprobs == [
        [(t[1], t[0]) for t in pos] for pos in answer["meta_info"]["output_top_logprobs"]
    ]
    assert r.prompt_tokens == 12 and r.weight_version == "default" and r.meta["cached_tokens"] == 0


def test_stop_string_answer_with_text_in_the_triples() -> None:
    answer = ANSWERS["stop_string_with_text_in_logprobs"]
    r = parse_generate_response(answer)
    assert (
        r.output_ids == answer["output_ids"]
    )  # the stop string's tokens stay (no_stop_trim), only text is trimmed
    assert r.finish_reason == "stop" and r.meta["matched_stop"] == "</action>"
    assert r.logprobs == [t[0] for t in answer["meta_info"]["output_token_logprobs"]]


def test_length_answer() -> None:
    r = parse_generate_response(ANSWERS["length"])
    assert (r.output_ids, r.finish_reason, r.logprobs) == ([603, 1378], "length", [-2.25, -0.75])


def test_aborts_are_errors_retried_only_when_transient() -> None:
    with pytest.raises(LLMError, match="overloaded") as info:
        parse_generate_response(ANSWERS["abort_overloaded"])
    assert info.value.transient
    with pytest.raises(LLMError, match="context length") as info:
        parse_generate_response(ANSWERS["abort_bad_request"])
    assert not info.value.transient


def test_a_triple_for_another_token_is_refused() -> None:
    answer = json.loads(json.dumps(ANSWERS["length"]))
    answer["meta_info"]["output_token_logprobs"][1][1] = 7
    with pytest.raises(LLMError, match="not token-faithful"):
        parse_generate_response(answer)


class _Replay(BaseHTTPRequestHandler):
    """Answers ``/generate`` with a recorded answer and keeps the bodies it was sent."""

    answer: dict[str, Any] = {}
    bodies: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        if self.path == "/get_server_info":
            self._send(200, {"context_length": 8192})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
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


def test_the_backend_round_trip_against_a_replayed_answer(replay: str) -> None:
    _Replay.answer = ANSWERS["stop_token"]
    backend = SGLangBackend(replay, tokenizer="tiny", model_name="m")
    assert backend.max_context_len == 8192

    async def go() -> Any:
        try:
            return await backend.generate(
                GenerationRequest(
                    [5, 6, 7], SamplingParams(max_new_tokens=3, temperature=1.0, top_logprobs=2), "r1"
                )
            )
        finally:
            await backend.aclose()

    r = asyncio.run(go())
    (body,) = _Replay.bodies
    assert (
        body["input_ids"] == [5, 6, 7] and body["return_logprob"] is True and body["logprob_start_len"] == -1
    )
    assert body["sampling_params"]["max_new_tokens"] == 3 and set(body) <= set(
        SHAPES["generate_request_fields"]
    )
    assert (
        r.output_ids == [13048, 1052, 151645] and r.finish_reason == "stop" and r.meta["request_id"] == "r1"
    )
    assert r.logprobs == pytest.approx([-0.6931471824645996, -1.2039728164672852, -0.010050326585769653])
