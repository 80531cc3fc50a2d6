"""Secrets given for black-box collection never land in what toolgym writes or prints.

A fake OpenAI-compatible chat server takes the collection (``--backend openai-chat``) while the
secrets come in every way a user gives them: ``$OPENAI_API_KEY``, ``--backend-arg api_key=``, a
token inside ``--backend-arg extra_body=``, credentials in the server URL. The server also echoes
the Authorization header back in a 401 error for one run, as a careless proxy would, so that the
failure reason carries it. Then every file under the dataset (trajectories, failures, manifests,
the HTML report) and everything the commands printed is searched for each secret.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Runner

ENV_KEY = "sk-envsecret-0123456789abcdef"
ARG_KEY = "sk-argsecret-fedcba9876543210"
BODY_TOKEN = "body-token-5555aaaa6666bbbb"
URL_PASSWORD = "urlpass-7777cccc8888dddd"
SECRETS = (ENV_KEY, ARG_KEY, BODY_TOKEN, URL_PASSWORD)


class ChatServer:
    """``/v1/chat/completions`` answering ``count[1]``; with ``echo_auth`` a 401 that repeats the
    request's Authorization header and body. Runs in a thread with its own event loop."""

    def __init__(self, *, echo_auth: bool = False) -> None:
        self.echo_auth = echo_auth
        self.seen_auth: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (ln.partition(":") for ln in head.split("\r\n")[1:])
                    if k
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen_auth.append(headers.get("authorization", ""))
                if self.echo_auth:
                    status, out = (
                        401,
                        json.dumps(
                            {
                                "error": {
                                    "message": f"bad credentials {headers.get('authorization')} for {body.decode()[:2000]}"
                                }
                            }
                        ),
                    )
                else:
                    status, out = (
                        200,
                        json.dumps(
                            {
                                "id": "c",
                                "model": "fake",
                                "choices": [
                                    {
                                        "index": 0,
                                        "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "count[1]"},
                                    }
                                ],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 2},
                            }
                        ),
                    )
                data = out.encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def __enter__(self) -> ChatServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as s:
        yield s


def _leaks(root: Path, printed: str) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {s}" for s in SECRETS if s.encode() in data]
    found += [f"output: {s}" for s in SECRETS if s in printed]
    return found


def _collect(cli: Runner, url: str, out: Path, *extra: str) -> str:
    body = json.dumps({"metadata": {"session_token": BODY_TOKEN}})
    done = cli(
        "collect",
        "--env",
        "counter",
        "--model",
        url,
        "--backend",
        "openai-chat",
        "--tokenizer",
        "tiny",
        "--backend-arg",
        "served_model=fake",
        "--backend-arg",
        f"extra_body={body}",
        "--sandbox-backend",
        "none",
        "--no-progress",
        "-n",
        "3",
        "--env-arg",
        "target=1",
        "--out",
        out,
        *extra,
    )
    return done.text + f" [exit {done.code}]"


@pytest.mark.parametrize("how", ["env-var", "backend-arg", "url-credentials"])
def test_secrets_stay_out_of_datasets_reports_and_output(
    cli: Runner, tmp_path: Path, server: ChatServer, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    creds = f"user:{URL_PASSWORD}@" if how == "url-credentials" else ""
    url = f"http://{creds}127.0.0.1:{server.port}/v1"
    out = tmp_path / "run"
    extra = ("--backend-arg", f"api_key={ARG_KEY}") if how == "backend-arg" else ()
    printed = _collect(cli, url, out, *extra)
    assert "[exit 0]" in printed and "3 trajectories written" in printed, printed
    used = {"env-var": ENV_KEY, "backend-arg": ARG_KEY, "url-credentials": "Basic "}[how]
    assert server.seen_auth and all(used in a for a in server.seen_auth), (
        server.seen_auth
    )  # the secret was used
    for args in (("show", out), ("verify", out), ("report", out, "--out", out / "report")):
        done = cli(*args)
        assert done.code == 0, done.text
        printed += done.text
    assert (out / "report" / "index.html").exists()
    assert _leaks(out, printed) == []


def test_a_server_that_echoes_the_key_in_its_errors_leaks_nothing(
    cli: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    with ChatServer(echo_auth=True) as echo:
        out = tmp_path / "run"
        printed = _collect(
            cli,
            f"http://user:{URL_PASSWORD}@127.0.0.1:{echo.port}/v1",
            out,
            "--backend-arg",
            f"api_key={ARG_KEY}",
        )
    assert "[exit 1]" in printed and "bad credentials" in printed, printed  # the reason is still told
    failures = (out / "failures.jsonl").read_text()
    assert "bad credentials" in failures
    assert _leaks(out, printed) == []


@pytest.mark.parametrize("echo", [False, True], ids=["ok", "server-echoes-key"])
def test_secrets_stay_out_of_ray_collections(cli: Runner, tmp_path: Path, echo: bool) -> None:
    """The Ray driver writes the dataset, failures and manifest itself: the same scrubbing as a local
    collection, also when the server puts the key into its error messages (a built-in environment:
    Ray's workers load only installed plugins)."""
    out = tmp_path / "run"
    body = json.dumps({"metadata": {"session_token": BODY_TOKEN}})
    with ChatServer(echo_auth=echo) as server:
        done = cli(
            "collect",
            "--env",
            "math-python",
            "--model",
            f"http://127.0.0.1:{server.port}/v1",
            "--backend",
            "openai-chat",
            "--tokenizer",
            "tiny",
            "--backend-arg",
            "served_model=fake",
            "--backend-arg",
            f"extra_body={body}",
            "--backend-arg",
            f"api_key={ARG_KEY}",
            "--sandbox-backend",
            "none",
            "--no-progress",
            "-n",
            "3",
            "--out",
            out,
            "--ray",
            "local",
            "--ray-workers",
            "1",
        )
    printed = done.text + f" [exit {done.code}]"
    if echo:
        assert "bad credentials" in (out / "failures.jsonl").read_text(), printed  # the reason is still told
    else:
        assert done.code == 0 and "3 trajectories written" in printed, printed
    assert server.seen_auth and all(ARG_KEY in a for a in server.seen_auth), server.seen_auth
    assert _leaks(out, printed) == []
