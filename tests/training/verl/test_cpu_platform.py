"""verl's trainer on CPU: the platform ``cpu`` and the rollout replica ``toolgym_cpu``, found
through verl's own registries (loaded by the ``verl.plugins`` entry point), their one-sentence
errors, the replica's server on the tiny model, and the guards on the two verl-internal shims."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.required import need_module

need_module("verl")

from toolgym.core.errors import ConfigError

PROBE = """
import json
import verl  # loads toolgym through the verl.plugins entry point: nothing toolgym is imported here
from verl.plugin.platform import get_platform
from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class
from verl.workers.engine.base import EngineRegistry
p = get_platform()
print(json.dumps({
    "platform": f"{type(p).__module__}.{type(p).__name__}",
    "device": get_device_name(), "backend": get_nccl_backend(), "ray_resource": get_resource_name(),
    "ray_options": p.ray_resource_options(0.5),
    "replica": get_rollout_replica_class("toolgym_cpu").__name__,
    "adapter": get_rollout_class("toolgym_cpu", "async").__name__,
    "fsdp_engine": EngineRegistry.get_engine_cls("language_model", "fsdp").__name__,
}))
"""


def test_verl_finds_the_cpu_platform_and_replica_by_name() -> None:
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "platform": "toolgym.training.verl.cpu_platform.PlatformCPU",
        "device": "cpu",
        "backend": "gloo",
        "ray_resource": "CPU",
        "ray_options": {"num_cpus": 0.5},
        "replica": "ToolgymCPUReplica",
        "adapter": "ToolgymCPUServerAdapter",
        "fsdp_engine": "FSDPEngineWithLMHead",
    }


def test_cpu_platform_is_opt_in_and_answers_without_a_device() -> None:
    import torch

    from toolgym.training.verl.cpu_platform import register_platform

    platform = register_platform()()
    assert not platform.is_platform_available(use_smi_check=True)  # auto-detection never picks it
    assert platform.is_available()
    assert torch.zeros(1).to(platform.current_device()).device.type == "cpu"
    platform.manual_seed(3)
    a = torch.rand(2)
    platform.manual_seed_all(3)
    assert torch.equal(a, torch.rand(2))
    for no_op in (
        platform.empty_cache,
        platform.synchronize,
        platform.profiler_start,
        platform.profiler_stop,
    ):
        assert no_op() is None
    with platform.nvtx_range("x"):
        pass


def test_missing_verl_extra_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgym.training.verl import cpu_platform

    real = importlib.util.find_spec
    monkeypatch.setattr(
        cpu_platform.importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a)
    )
    with pytest.raises(ConfigError) as info:
        cpu_platform.use_cpu_platform()
    message = str(info.value)
    assert "\n" not in message and "pip install 'toolgym[verl]'" in message


def test_unknown_replica_lists_the_registered_ones() -> None:
    from toolgym.training.verl.cpu_rollout import replica_class

    assert replica_class("toolgym_cpu").__name__ == "ToolgymCPUReplica"
    with pytest.raises(ConfigError) as info:
        replica_class("vllm_cpu")
    message = str(info.value)
    assert "\n" not in message and "'vllm_cpu'" in message
    for known in ("toolgym_cpu", "vllm", "sglang"):
        assert known in message


def test_server_generates_and_takes_the_actors_weights(tiny_model: Path) -> None:
    import torch

    from toolgym.training.verl.cpu_rollout import ToolgymCPUServer

    server = ToolgymCPUServer(str(tiny_model), 0, response_length=6, max_model_len=64, serve_http=False)

    async def run() -> None:
        params = {"temperature": 0, "top_p": 1.0, "top_k": -1, "logprobs": True, "max_tokens": 100}
        first = await server.generate([1, 2, 3], dict(params), "r0")
        assert 1 <= len(first.token_ids) <= 6 and len(first.log_probs) == len(first.token_ids)
        with server.backend.paused() as model:
            state = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
        assert await server.update_weights(state, global_steps=7) == len(state)
        after = await server.generate([1, 2, 3], dict(params), "r1")
        assert after.extra_fields["global_steps"] == 7
        assert all(
            lp == pytest.approx(after.log_probs[0]) for lp in after.log_probs
        )  # uniform: all-zero weights
        with pytest.raises(ConfigError, match="same model"):
            await server.update_weights({"not.a.weight": torch.zeros(1)}, global_steps=8)
        await server.backend.aclose()

    asyncio.run(run())


# --- the shims on verl internals (training/verl/cpu_shims.py): fail when verl changes under them ---


def test_shims_still_match_verl() -> None:
    import verl
    from verl.single_controller.ray.base import ResourcePoolManager
    from verl.workers.rollout import base

    from toolgym.training.verl import cpu_shims

    assert verl.__version__ == cpu_shims.VERL_VERSION == "0.9.1", "re-check cpu_shims.py against this verl"
    assert isinstance(base._ROLLOUT_REGISTRY, dict)
    assert ("vllm", "async") in base._ROLLOUT_REGISTRY  # keys are still (name, mode) tuples
    assert list(inspect.signature(base.get_rollout_class).parameters) == ["rollout_name", "mode"]
    original = cpu_shims._ORIGINAL_CHECK or ResourcePoolManager._check_resource_available
    assert list(inspect.signature(original).parameters) == ["self"]
    assert original.__qualname__ == "ResourcePoolManager._check_resource_available"
    from verl.utils import distributed

    init = cpu_shims._ORIGINAL_INIT or distributed.initialize_global_process_group_ray
    assert init.__module__ == "verl.utils.distributed"
    assert str(inspect.signature(init)) == "(timeout_second=None, backend=None)"
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in inspect.getsource(
        init
    )  # why the shim exists
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    assert (cpu_shims._ORIGINAL_OFFLOAD or transformer_impl.CPUOffloadPolicy) is CPUOffloadPolicy
    assert "offload_policy = CPUOffloadPolicy(pin_memory=True)" in inspect.getsource(
        transformer_impl
    )  # why the forward-only offload shim exists
    from verl.models.transformers import monkey_patch

    source = inspect.getsource(monkey_patch.apply_monkey_patch)
    assert "if is_trl_available():" in source and "import AutoModelForCausalLMWithValueHead" in source
    assert monkey_patch.is_trl_available.__module__ in ("verl.utils.import_utils", cpu_shims.__name__)


def test_verl_builds_actors_beside_trl_without_a_value_head() -> None:
    """With TRL 1.x installed (toolgym[trl]), verl's monkey patch would import a class TRL no longer
    has: the shim makes verl's ``is_trl_available`` say False there, in every module that took it."""
    need_module("trl")
    from verl.models.transformers import monkey_patch
    from verl.utils import import_utils

    from toolgym.training.verl import cpu_shims

    cpu_shims.patch_trl_value_head()  # the plugin did it already; idempotent
    if cpu_shims.trl_has_value_head():
        assert import_utils.is_trl_available()  # an older TRL keeps verl's own path
    else:
        assert not import_utils.is_trl_available() and not monkey_patch.is_trl_available()


def test_device_module_answers_verls_cuda_calls_on_the_host() -> None:
    from toolgym.training.verl.cpu_platform import register_platform

    device = register_platform()().device_module
    assert device.memory_reserved() == device.max_memory_allocated() == 0
    free, total = device.mem_get_info()
    assert 0 < free <= total
    device.set_rng_state(device.get_rng_state())
    for no_op in (device.empty_cache, device.ipc_collect, device.synchronize):
        assert no_op() is None
    assert device.Stream is not None  # the rest is torch.cpu's
