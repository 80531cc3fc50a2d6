"""What a warm start's floating-point rounding depends on, and torch set up so that it depends on
nothing else: on one machine, with the same ``threads``, two builds of a recipe give bit-identical
weights (``tests/training/local/test_warmstart_determinism.py``; ``bench/warmstart_repro.py`` measures
it at full size). Another CPU (other vector kernels) or another torch may round differently; what a
build ran on is kept in its ``warmstart.json`` (``floats``) so that two builds can be compared.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError


@contextlib.contextmanager
def deterministic_torch(threads: int, device: str = "cpu") -> Iterator[None]:
    """Torch set up for a repeatable build, and put back afterwards (``toolgym train`` builds a warm start
    in its own process before training): ``threads`` intra-op CPU threads (a float sum split over
    another number of threads can round differently) and deterministic algorithms (on CUDA with cuBLAS's
    fixed workspace; ops without a deterministic version warn there instead of failing the build)."""
    import torch

    if threads < 1:
        raise ConfigError(f"threads must be 1 or more, got {threads}")
    before = (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    if device != "cpu":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=device != "cpu")
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1], warn_only=before[2])


def float_provenance(threads: int, device: str) -> dict[str, Any]:
    """What a build's floating-point rounding depends on beyond its recipe, kept in ``warmstart.json``:
    two builds agree bit for bit only where these agree."""
    import torch

    out: dict[str, Any] = {
        "threads": threads,
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
    if device != "cpu":
        out["cuda_device"] = torch.cuda.get_device_name(torch.device(device))
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def weights_digest(model_dir: Path) -> str:
    """SHA-256 of a saved model's state dict (each tensor's name, dtype, shape and bytes, in name order):
    equal exactly when two builds' weights are bit for bit the same, whatever the file's metadata."""
    import hashlib

    import torch
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(str(Path(model_dir) / "model.safetensors")).items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
