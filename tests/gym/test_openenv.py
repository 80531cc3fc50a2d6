"""toolgym's environments over OpenEnv's protocol (:mod:`toolgym.gym.openenv`, ``toolgym serve-env``),
played by OpenEnv's own clients (``openenv-core``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.required import OPENENV_HINT, missing

try:  # openenv-core, with the fastmcp and websockets its server and clients import
    from openenv.core import GenericEnvClient
except ImportError as exc:
    missing(exc, hint=OPENENV_HINT)  # a failure under CI=1, a skip elsewhere

import requests

from toolgym.core.util.http_server import BackgroundServer
from toolgym.gym.openenv import ToolgymAction, ToolgymEnvClient, make_app
from toolgym.gym.session import TextSession
from toolgym.sandboxes.memory import MemoryBackend


def keychain_action(observation: str) -> str:
    """A correct keychain move read off the last observation: follow ``start:``/``next:``, answer ``value:``."""
    kind, _, word = observation.strip().splitlines()[-1].partition(":")
    return f"<answer>{word}</answer>" if kind == "value" else f"<get>{word}</get>"


@pytest.fixture(scope="module")
def served_keychain() -> Iterator[str]:
    """``toolgym serve-env keychain`` in a process of its own; its URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolgym",
            "serve-env",
            "keychain",
            "--port",
            "0",
            "--sandbox-backend",
            "none",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the command says where it listens once the socket is bound
        assert "http://" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split("http://", 1)[1].split()[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"http://{url}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "toolgym serve-env did not come up"
            time.sleep(0.1)
        yield f"http://{url}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_openenvs_generic_client_plays_an_episode_of_toolgym_serve_env(served_keychain: str) -> None:
    """The stock client, no toolgym code on its side: a keychain episode to its reward."""

    async def play() -> tuple[float, dict[str, Any], dict[str, Any]]:
        async with GenericEnvClient(base_url=served_keychain) as client:
            result = await client.reset(seed=7)
            assert result.observation["info"]["task_id"] == "train-7"
            total = 0.0
            while not result.done:
                result = await client.step({"text": keychain_action(result.observation["text"])})
                total += result.reward or 0.0
            return total, result.observation, await client.state()

    total, last, state = asyncio.run(play())
    assert total == 1.0 and last["terminated"] and not last["truncated"]
    assert last["info"]["action_kind"] == "answer" and last["info"]["valid"]
    assert state["env"] == "keychain" and state["seed"] == 7 and state["done"] and state["step_count"] >= 2

    meta = requests.get(f"{served_keychain}/metadata", timeout=10).json()
    assert meta["name"] == "toolgym/keychain"
    schema = requests.get(f"{served_keychain}/schema", timeout=10).json()
    assert "text" in schema["action"]["properties"]


def test_the_typed_client_sees_tool_results_and_errors(served_keychain: str) -> None:
    async def play() -> None:
        async with ToolgymEnvClient(base_url=served_keychain) as client:
            result = await client.reset(seed=3)
            obs = result.observation
            assert obs.info["tools"][0]["function"]["name"] == "get" and "</get>" in obs.info["stop"]
            result = await client.step(ToolgymAction(text=keychain_action(obs.text)))
            call = result.observation.info["tool_calls"][0]
            assert call["name"] == "get" and call["output"] == result.observation.text
            result = await client.step(ToolgymAction(text="<answer>wrong</answer>"))
            assert result.done and result.reward == 0.0 and result.observation.terminated
            with pytest.raises(RuntimeError, match="call reset"):
                await client.step(ToolgymAction(text="<answer>late</answer>"))

    asyncio.run(play())


def test_each_session_has_its_own_episode_and_sandboxes() -> None:
    """Two clients at once on a sandboxed environment: their episodes do not mix, each one's
    sandbox is released when its episode ends."""
    backend = MemoryBackend()

    def solution(seed: int) -> list[str]:
        async def actions() -> list[str]:
            local = TextSession("math-python", sandbox_backend=MemoryBackend())
            await local.reset(seed)
            out = []
            while not local.done:
                action = await local.scripted_action()
                assert action is not None
                out.append(action)
                await local.step(action)
            await local.aclose()
            return out

        return asyncio.run(actions())

    plans = {seed: solution(seed) for seed in (1, 2)}
    app = make_app("math-python", max_sessions=2, sandbox_backend=backend)

    async def play(url: str) -> dict[int, float]:
        clients = {seed: ToolgymEnvClient(base_url=url) for seed in plans}
        try:
            for seed, client in clients.items():
                await client.connect()
                await client.reset(seed=seed)
            rewards = {seed: 0.0 for seed in plans}
            for turn in range(max(len(p) for p in plans.values())):
                for seed, client in clients.items():  # interleaved
                    if turn < len(plans[seed]):
                        result = await client.step(ToolgymAction(text=plans[seed][turn]))
                        rewards[seed] += result.reward or 0.0
                        if result.observation.info["tool_calls"]:
                            assert result.observation.info["tool_calls"][0]["name"] == "python"
            assert backend.counters["created"] >= 1, "the python tool ran in the server's sandboxes"
            assert all(sb.episode_id == "" for sb in backend.live), (
                "each sandbox was released as its episode ended"
            )
            return rewards
        finally:
            for client in clients.values():
                await client.close()

    with BackgroundServer(app) as server:
        rewards = asyncio.run(play(server.url))
    assert rewards == {1: 1.0, 2: 1.0}


def test_a_wrong_environment_fails_before_serving() -> None:
    with pytest.raises(Exception, match="no-such-env"):
        make_app("no-such-env")
    with pytest.raises(Exception, match="unsafe_in_process_sandbox=True"):
        make_app("math-python", sandbox_backend="memory")
