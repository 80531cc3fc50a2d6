"""What makes a composed verl config run on the CPU (``toolgym train ... verl.trainer.device=cpu``).

:func:`apply_cpu` sets the verl keys the CPU path needs (README, "verl on a laptop"): rollout
replica ``toolgym_cpu`` with the ``naive`` weight sync, one trainer rank, SDPA attention, float32
FSDP (the rollout samples in float32, so the actor's ``old_log_probs`` match the rollout's
logprobs), one reward worker and one TransferQueue storage unit (each is a Ray actor that imports
verl: on two cores every extra one costs seconds). :func:`check_cpu_budget` refuses a model that
cannot fit in the host's memory before any worker starts. :func:`ray_init_kwargs` is what
``ray.init`` needs so that every worker selects the ``cpu`` platform.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from toolgym.core.errors import ConfigError

from .cpu_platform import ENV, PLATFORM_NAME
from .cpu_rollout import REPLICA_NAME

FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
SETTINGS: dict[str, Any] = {
    "trainer.device": "cpu",
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 1,
    "actor_rollout_ref.rollout.name": REPLICA_NAME,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "naive",
    "actor_rollout_ref.rollout.free_cache_engine": False,
    "actor_rollout_ref.model.use_remove_padding": False,
    "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision": FP32,
    "actor_rollout_ref.ref.fsdp_config.mixed_precision": FP32,
    "reward.num_workers": 1,
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
}
"""verl keys set on the CPU path (dotted path → value), whatever the file says."""
RAY_CPUS = 8
"""Ray's logical CPUs (not cores): the trainer rank, the TaskRunner, TransferQueue's controller and
storage unit each hold one; Ray packs them onto the host's cores."""
BYTES_PER_PARAM = 20
"""Host bytes per parameter on the CPU path: float32 weights, gradients and Adam's two moments in
the actor (16), and the rollout's float32 copy (4)."""
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def wants_cpu(cfg: DictConfig) -> bool:
    """Whether the composed config asks for the CPU path (``trainer.device=cpu`` or ``rollout.name=toolgym_cpu``)."""
    device = OmegaConf.select(cfg, "trainer.device", default=None, throw_on_missing=False)
    name = OmegaConf.select(cfg, "actor_rollout_ref.rollout.name", default=None, throw_on_missing=False)
    return device == "cpu" or name == REPLICA_NAME


def apply_cpu(cfg: DictConfig) -> None:
    """Set :data:`SETTINGS` on ``cfg`` (in place)."""
    with open_dict(cfg):
        for key, value in SETTINGS.items():
            OmegaConf.update(cfg, key, value, force_add=True, merge=False)


def resolve_tiny(cfg: DictConfig) -> None:
    """``model.path: tiny`` (or ``tiny-<family>``) names toolgym's tiny test model, built once and cached."""
    path = str(cfg.actor_rollout_ref.model.path)
    if path == "tiny" or (path.startswith("tiny-") and not Path(path).exists()):
        from toolgym.core.llm.local.tiny import ensure_tiny_model

        family = path.partition("-")[2] or "qwen"
        cfg.actor_rollout_ref.model.path = str(ensure_tiny_model(family))  # type: ignore[arg-type]


def model_params(model_dir: Path) -> int | None:
    """Parameters of a local Hugging Face model directory, from its weight files' sizes; None if unknown."""
    files = [*model_dir.glob("*.safetensors"), *model_dir.glob("*.bin")]
    if not files:
        return None
    try:
        dtype = str(json.loads((model_dir / "config.json").read_text()).get("torch_dtype") or "float32")
    except (OSError, ValueError):
        dtype = "float32"
    return sum(f.stat().st_size for f in files) // DTYPE_BYTES.get(dtype, 4)


def available_bytes() -> int:
    """Host memory available now (``SC_AVPHYS_PAGES``)."""
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_cpu_budget(model_path: str, available: int | None = None) -> None:
    """Refuse (one sentence) a model whose CPU training needs more than the host's free memory.

    The need is parameters × :data:`BYTES_PER_PARAM`; parameters come from the weight files of a
    local directory (a hub name is not looked up: nothing is downloaded to check it)."""
    params = model_params(Path(model_path).expanduser()) if Path(model_path).expanduser().is_dir() else None
    if params is None:
        return
    free = available_bytes() if available is None else available
    need = params * BYTES_PER_PARAM
    if need > free:
        raise ConfigError(
            f"model {model_path} has about {params / 1e9:.2f}B parameters and needs about {need / 2**30:.1f} GiB "
            f"to train on the CPU ({BYTES_PER_PARAM} bytes each), but {free / 2**30:.1f} GiB is free: "
            "use a smaller model (e.g. actor_rollout_ref.model.path=tiny) or train on a GPU machine with rollout.name=vllm"
        )


def ray_env_vars() -> dict[str, str]:
    """Env vars every Ray worker needs on the CPU path."""
    return {
        ENV: PLATFORM_NAME,
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "TRANSFER_QUEUE_ENABLE": "1",
    }


def ray_init_kwargs(extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """``ray.init`` keyword arguments for a local Ray on the CPU path."""
    return {
        "num_cpus": RAY_CPUS,
        "include_dashboard": False,
        "runtime_env": {"env_vars": {**ray_env_vars(), **(extra_env or {})}},
    }
