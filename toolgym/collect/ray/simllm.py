"""A simulated LLM server for rehearsing distributed runs: SGLang's ``/generate`` with a fixed
latency and a fixed answer, no model and almost no CPU.

Every ``POST /generate`` waits ``latency_s`` and answers ``text`` (tokenized once with the given
tokenizer, EOS appended) as ``output_ids`` with logprobs, in the shape ``SGLangBackend`` parses,
so a collection against it is token-faithful and latency-bound, which is what a real inference
server looks like from the rollout side. ``GET /get_model_info`` and ``GET /health`` answer too.
Plain asyncio HTTP/1.1 with keep-alive; stdlib plus the tokenizer.

    python -m toolgym.collect.ray.simllm --port 30000 --latency 0.5 --text '<tool_call>...'
    toolgym collect --model http://127.0.0.1:30000 --tokenizer tiny --ray auto ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import Any

from toolgym.core.tokens.chat import ChatFormat


class SimLLMServer:
    """Answers ``/generate`` after ``latency_s`` seconds with the ids of ``text`` + EOS."""

    def __init__(
        self, tokenizer: Any, *, text: str = "ok", latency_s: float = 0.5, model_path: str = "simulated"
    ) -> None:
        chat = ChatFormat(tokenizer)
        self.ids = chat.encode(text) + sorted(chat.eos_token_ids)[:1]
        self.text = text
        self.latency_s = latency_s
        self.model_path = model_path
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen; returns the port."""
        self._server = await asyncio.start_server(self._serve, host, port, limit=1 << 24)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                status, payload = await self._handle(method, path, body)
                data = json.dumps(payload).encode()
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    "Connection: keep-alive\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _handle(self, method: str, path: str, body: bytes) -> tuple[str, Any]:
        if method == "POST" and path == "/generate":
            request = json.loads(body or b"{}")
            self.requests += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.latency_s)
            finally:
                self.in_flight -= 1
            limit = int((request.get("sampling_params") or {}).get("max_new_tokens", len(self.ids)))
            ids = self.ids[:limit]
            finish = {"type": "stop"} if len(ids) == len(self.ids) else {"type": "length", "length": limit}
            return "200 OK", {
                "text": self.text,
                "output_ids": ids,
                "meta_info": {
                    "id": str(self.requests),
                    "finish_reason": finish,
                    "prompt_tokens": len(request.get("input_ids") or []),
                    "completion_tokens": len(ids),
                    "output_token_logprobs": [[-0.5, t, None] for t in ids],
                },
            }
        if path == "/get_model_info":
            return "200 OK", {"model_path": self.model_path, "tokenizer_path": None}
        if path == "/health":
            return "200 OK", {"ok": True, "requests": self.requests, "peak_in_flight": self.peak_in_flight}
        return "404 Not Found", {"error": f"no route {method} {path}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per /generate")
    ap.add_argument("--text", default="ok", help="what every answer says")
    ap.add_argument("--tokenizer", default="tiny", help="tiny | tiny-llama | a local tokenizer directory")
    args = ap.parse_args()
    from toolgym.core.llm.resolve import load_tokenizer

    server = SimLLMServer(load_tokenizer(args.tokenizer), text=args.text, latency_s=args.latency)

    async def run() -> None:
        port = await server.start(args.host, args.port)
        print(f"simulated LLM on http://{args.host}:{port} (latency {args.latency:g}s)", flush=True)
        started = time.monotonic()
        try:
            await asyncio.Event().wait()
        finally:
            print(f"{server.requests} requests in {time.monotonic() - started:.0f}s", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
