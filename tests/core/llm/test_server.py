"""The model server's own endpoints: health, model listing, fault control, request checks."""

from __future__ import annotations

import httpx

from toolgym.core.llm.local.transformers_backend import TransformersBackend
from toolgym.core.llm.serving.server import serve


def test_serve_a_backend_and_control_faults_over_http(local: TransformersBackend) -> None:
    with serve(local, model_name="mine") as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.get("/health").status_code == 200
            assert http.get("/v1/models").json()["data"][0]["id"] == "mine"
            assert http.get("/get_model_info").json()["model_path"] == local.model_path
            assert (
                http.post("/toolgym/faults", json={"fail_next": 1, "status": 500, "retry_after_s": 0}).json()[
                    "fail_next"
                ]
                == 1
            )
            failed = http.post(
                "/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}
            )
            assert failed.status_code == 500 and failed.headers["retry-after"] == "0"
            assert http.get("/toolgym/faults").json()["failed"] == 1
            batch = http.post(
                "/generate",
                json={
                    "text": ["hello", "hi there"],
                    "sampling_params": {"max_new_tokens": 3, "temperature": 0},
                },
            )
            assert [len(r["output_ids"]) for r in batch.json()] == [3, 3]
            done = http.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2, "logprobs": 2})
            choice = done.json()["choices"][0]
            assert len(choice["logprobs"]["tokens"]) == 2 and all(
                len(t) >= 2 for t in choice["logprobs"]["top_logprobs"]
            )
            assert done.json()["usage"]["completion_tokens"] == 2
    assert local.weight_version is not None  # the borrowed backend is left running


def test_bad_requests_get_readable_400s(server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        cases = [
            ("/generate", {"sampling_params": {}}, "input_ids"),
            ("/generate", {"input_ids": [1], "stream": True}, "streaming"),
            ("/generate", {"input_ids": [1], "sampling_params": {"temperature": -1}}, "temperature"),
            ("/v1/completions", {"prompt": [1], "n": 2}, "n must be 1"),
            ("/v1/completions", {"prompt": ["a", 3]}, "prompt"),
            ("/v1/chat/completions", {"messages": []}, "messages"),
        ]
        for path, body, words in cases:
            answer = http.post(path, json=body)
            assert answer.status_code == 400, (path, body, answer.text)
            assert words in answer.json()["error"]["message"]
        assert http.post("/generate", content=b"{not json").status_code == 400
