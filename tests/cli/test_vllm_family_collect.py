"""Every model family against a real vLLM that toolgym starts: per family,
``toolgym serve --engine vllm tiny-<family> --quick-start``, then ``toolgym collect --model http://…
--backend openai --parser auto`` and ``toolgym verify``.

Each family gets a server of its own, serving that family's tiny model (its tokenizer, chat template
and generation config, head size 32 for vLLM's CPU kernels): vLLM's tokenizer is the one it detokenizes
and applies stop strings with, and the stop token ids the client sends are the family's. So the test
runs each family's whole path: its template renders the prompt ids toolgym sends, vLLM samples from
them, ``--parser auto`` picks the family's parser from the template, and the stored ids verify,
prompt against template included. The ids stored are the ones vLLM sampled: their logprobs, recomputed
by the same weights in process (float32, at the collection's temperature), equal the logprobs vLLM
returned.

Cost: a vLLM start is two Python processes importing vLLM (about 10 s of CPU each);
``--quick-start`` (eager, no worker process) takes the rest of a start (torch.compile, a third
process) away: 20 CPU-seconds to ``/health`` against 37-41 by default. Servers start ``CONCURRENT`` at
a time in the background, in test order, while earlier families collect; each stops when its test
ends. The whole module: 5.8 CPU-minutes (8.3 min of wall on two cores at a load of 35-50, with
other test runs beside it), so about 3 min on two idle cores. The tiny models have random
weights, so episodes end at their first reply (an answer) in practice: what is tested is each family's
format and path, not the model's skill.

Skipped, with the reason, only where ``.venv-vllm`` is absent (``bash scripts/ensure-vllm.sh``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from threading import Event
from typing import Any

import httpx
import pytest

from tests.cli.helpers import Runner
from tests.core.family_helpers import FAMILIES, FAMILY_PARSER
from toolgym.core.errors import ConfigError
from toolgym.core.llm.serving.server_vllm import free_port, vllm_model_dir, vllm_python

CONCURRENT = 3
"""Servers alive at once (each holds about 1 GiB of KV cache and 1 GiB of process memory)."""
START_TIMEOUT_S = 600
TEMPERATURE = 0.8  # not 1: the client also probes that the server's logprobs are temperature-scaled


class Fleet:
    """Starts ``toolgym serve --engine vllm`` for each family in order, ``CONCURRENT`` at a time, in
    the background; a family's server stops when :meth:`release` is called for it."""

    def __init__(self, families: list[str], logs: Path) -> None:
        self.logs = logs
        self.up: dict[str, Future[str]] = {f: Future() for f in families}
        self.start_s: dict[str, float] = {}
        self.released = {f: Event() for f in families}
        self.pool = ThreadPoolExecutor(max_workers=CONCURRENT, thread_name_prefix="vllm-fleet")
        self.jobs = [self.pool.submit(self._serve, f) for f in families]

    def url(self, family: str) -> str:
        """The server's address once ``/health`` answers (raises what its start raised)."""
        return self.up[family].result(timeout=START_TIMEOUT_S * len(self.up))

    def release(self, family: str) -> None:
        self.released[family].set()

    def close(self) -> None:
        for event in self.released.values():
            event.set()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _serve(self, family: str) -> None:
        if self.released[family].is_set():  # closed before its turn
            self.up[family].set_exception(RuntimeError("the fleet was closed"))
            return
        port = free_port()
        log, out = self.logs / f"vllm-{family}.log", self.logs / f"serve-{family}.out"
        cmd = [
            sys.executable,
            "-m",
            "toolgym",
            "serve",
            "--engine",
            "vllm",
            f"tiny-{family}",
            "--quick-start",
            "--port",
            str(port),
            "--log-file",
            str(log),
        ]
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        with open(out, "wb") as sink:
            proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            while not _healthy(url):
                if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                    raise RuntimeError(
                        f"`toolgym serve --engine vllm tiny-{family}` did not come up; "
                        f"its output: {_tail(out)}; vLLM's log: {_tail(log)}"
                    )
                time.sleep(0.5)
            self.start_s[family] = time.monotonic() - started
            self.up[family].set_result(url)
            self.released[family].wait()
        except BaseException as exc:
            if not self.up[family].done():
                self.up[family].set_exception(exc)
        finally:
            _stop(proc)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: ``toolgym serve`` stops its vLLM (process group) and exits."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    try:
        vllm_python()
    except ConfigError as exc:
        reason = f"no real vLLM here: {exc}"
        print(f"\nSKIPPED vLLM family tests: {reason}")
        pytest.skip(reason)
    selected = [
        item.callspec.params["family"]
        for item in request.session.items
        if item.module is request.module
        and "family" in getattr(getattr(item, "callspec", None), "params", {})
    ]
    for family in selected:  # built here once, not raced by the servers
        vllm_model_dir(f"tiny-{family}")
    fleet = Fleet(selected, tmp_path_factory.mktemp("vllm-fleet"))
    try:
        yield fleet
    finally:
        fleet.close()
        print(
            f"\nvLLM start (s, {CONCURRENT} at a time): "
            + ", ".join(f"{f} {s:.0f}" for f, s in fleet.start_s.items())
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_family_collects_from_a_real_vllm_and_verifies(
    family: str, fleet: Fleet, tmp_path: Path, cli: Runner
) -> None:
    out = tmp_path / family
    try:
        url = fleet.url(family)
        done = cli(
            "collect",
            "--env",
            "math-python",
            "--model",
            url,
            "--backend",
            "openai",
            "--parser",
            "auto",
            "-n",
            "4",
            "--max-turns",
            "3",
            "--max-tokens-per-turn",
            "40",
            "--temperature",
            str(TEMPERATURE),
            "--sandbox-backend",
            "none",
            "--no-progress",
            "--out",
            str(out),
        )
    finally:
        fleet.release(family)  # the next family's server may start now
    assert done.code == 0, done.text
    assert "4 trajectories written, 0 failed" in done.text, done.text
    manifest = json.loads((out / "manifest.json").read_text())
    environment = manifest["environment"]
    assert (
        environment.get("parser_used", environment["parser"]) == FAMILY_PARSER[family]
    )  # recorded where it differs
    model_dir = vllm_model_dir(f"tiny-{family}")
    assert model_dir is not None
    done = cli("verify", str(out), "--tokenizer", str(model_dir))
    assert done.code == 0 and "all invariants hold" in done.text, done.text

    from toolgym.trajectories.store import iter_trajectories

    trajectories = list(iter_trajectories(out))
    assert len(trajectories) == 4 and all(t.status.value == "ok" for t in trajectories)
    assert all(t.steps and all(s.llm is not None for s in t.steps) for t in trajectories)
    print(
        f"\n{family}: steps per episode {[len(t.steps) for t in trajectories]}, "
        f"actions {sorted({s.action_kind for t in trajectories for s in t.steps})}"
    )
    gap, checked = sampled_logprob_gap(model_dir, trajectories)
    assert checked >= 4 and gap < 1e-3, (gap, checked)


def sampled_logprob_gap(model_dir: Path, trajectories: list[Any]) -> tuple[float, int]:
    """The largest |stored logprob − the same weights' log_softmax(logits / T) at that sampled id|
    over every sampled token, recomputed in process on each stored sequence; and how many tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    worst, checked = 0.0, 0
    for trajectory in trajectories:
        temperature = float(trajectory.sampling["temperature"])
        sequences: dict[int, list[Any]] = {}
        for segment in trajectory.segments:
            sequences.setdefault(segment.sequence, []).append(segment)
        for segments in sequences.values():
            ids = [i for s in segments for i in s.token_ids]
            with torch.inference_mode():
                logp = torch.log_softmax(
                    model(input_ids=torch.tensor([ids])).logits[0].float() / temperature, dim=-1
                )
            at = 0
            for segment in segments:
                for k, (token, mask) in enumerate(zip(segment.token_ids, segment.loss_mask, strict=True)):
                    if mask:
                        assert segment.logprobs is not None and at + k > 0
                        worst = max(worst, abs(float(logp[at + k - 1, token]) - segment.logprobs[k]))
                        checked += 1
                at += len(segment.token_ids)
    return worst, checked
