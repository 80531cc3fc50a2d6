"""``toolgym serve``: serve a local model over SGLang's and OpenAI's HTTP protocols.

``--engine toolgym`` (the default) is toolgym's own small server (tests and demos, with injected
faults); ``--engine vllm`` starts a real vLLM server from ``.venv-vllm`` (installed by
``scripts/ensure-vllm.sh``) with ``--logprobs-mode processed_logprobs``, on a free port unless
``--port`` is given, logging to a file, and stops it on Ctrl-C. ``tiny`` and every ``tiny-<family>``
(docs/model_families.md) are served by either engine; vLLM gets the family's tiny model built for its
CPU kernels (head size 32). ``--quick-start`` starts vLLM eager and without a worker process.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import typer

ENGINES = ("toolgym", "vllm")


def command(
    model_arg: str = typer.Argument(None, metavar="[MODEL]", help="Same as --model."),
    model: str = typer.Option(
        "tiny", help="tiny | tiny-<family> (docs/model_families.md) | a local Hugging Face model directory."
    ),
    engine: str = typer.Option(
        "toolgym", help="toolgym (its own test server) | vllm (a real vLLM from .venv-vllm)."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(
        None, help="Port to listen on (default: 30000 for toolgym, a free one for vllm; 0 = any free port)."
    ),
    served_name: str = typer.Option(
        None, "--served-model-name", help="Model name the OpenAI endpoints report (default: --model)."
    ),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N (toolgym engine)."),
    dtype: str = typer.Option(None, help="float32 (CPU default), bfloat16, float16 or auto."),
    max_batch_size: int = typer.Option(16, help="Requests decoded together (toolgym engine)."),
    max_model_len: int = typer.Option(1024, help="Context length (vllm engine: --max-model-len)."),
    log_file: Path = typer.Option(
        None, help="Where the vllm engine's output goes (default: /tmp/vllm-PORT.log)."
    ),
    quick_start: bool = typer.Option(
        False,
        help="vllm engine: start eager, without a worker process (half the CPU time of a start; slower decoding on large models).",
    ),
    fail_first: int = typer.Option(
        0, help="Answer the first N generation requests with --fail-status (to test retries)."
    ),
    fail_status: int = typer.Option(503, help="HTTP status of injected failures."),
    latency: float = typer.Option(
        0.0, help="Seconds added before every generation request (to test timeouts)."
    ),
) -> None:
    """Serve a local model for tests and demos: SGLang /generate, OpenAI /v1/completions and
    /v1/chat/completions, with optional injected faults; or a real vLLM server (--engine vllm).
    Stops on Ctrl-C."""
    from toolgym.core.errors import ConfigError

    model = model_arg or model
    if engine not in ENGINES:
        raise ConfigError(f"unknown --engine {engine!r}; use one of {', '.join(ENGINES)}")
    if engine == "vllm":
        _serve_vllm(
            model,
            host=host,
            port=port or 0,
            served_name=served_name,
            dtype=dtype or "float32",
            max_model_len=max_model_len,
            log_file=log_file,
            quick_start=quick_start,
        )
        return
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        typer.secho(
            "error: `toolgym serve` needs FastAPI and uvicorn: pip install 'toolgym[dev]' (or pip install fastapi uvicorn)",
            fg="red",
            err=True,
        )
        raise typer.Exit(2) from None
    from toolgym.core.llm.serving.server import Faults, serve

    faults = Faults(fail_next=fail_first, status=fail_status, latency_s=latency)
    typer.echo(f"loading {model} ...", err=True)
    with serve(
        model,
        host=host,
        port=30000 if port is None else port,
        model_name=served_name or model,
        faults=faults,
        device=device,
        dtype=dtype,
        max_batch_size=max_batch_size,
    ) as server:
        typer.echo(f"toolgym serve: {served_name or model} listening on {server.url}", err=False)
        typer.echo(
            f"  try: toolgym collect --model {server.url} --env ... (backends: sglang, openai, openai-chat)",
            err=True,
        )
        _wait(lambda: True)


def _serve_vllm(
    model: str,
    *,
    host: str,
    port: int,
    served_name: str | None,
    dtype: str,
    max_model_len: int,
    log_file: Path | None,
    quick_start: bool,
) -> None:
    from toolgym.core.errors import ConfigError
    from toolgym.core.llm.serving.server_vllm import VLLMServer, vllm_model_dir

    directory = vllm_model_dir(model)
    if directory is None:
        raise ConfigError(
            f"--engine vllm serves 'tiny', 'tiny-<family>' or a local Hugging Face model directory; {model!r} is none of them"
        )
    server = VLLMServer(
        directory,
        host=host,
        port=port,
        served_model_name=served_name or model,
        dtype=dtype,
        max_model_len=max_model_len,
        log_path=log_file,
        quick_start=quick_start,
    )
    typer.echo(f"starting vLLM on {server.url} (log: {server.log_path}) ...", err=True)
    with server:
        typer.echo(f"toolgym serve: vLLM serving {served_name or model} on {server.url}", err=False)
        typer.echo(f"  try: toolgym collect --model {server.url} --backend openai --env ...", err=True)
        _wait(lambda: server.process is not None and server.process.poll() is None)
        if server.process is not None and server.process.poll() is not None:
            raise ConfigError(
                f"vLLM exited with status {server.process.returncode}; see its log {server.log_path}"
            )


def _wait(alive: Any) -> None:
    """Sleep until Ctrl-C or SIGTERM (or until ``alive()`` turns false)."""
    signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly when a test harness terminates us
    try:
        while alive():
            time.sleep(1.0)
    except KeyboardInterrupt:
        typer.echo("stopping", err=True)


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt
