"""verl's platform ``cpu``: verl's trainer on a machine without an accelerator.

verl resolves its platform once per process (``verl.plugin.platform.get_platform``): the name in
``VERL_PLATFORM``, else the first registered platform that finds its device, else ``nvidia``. This
module registers ``cpu`` in ``verl.plugin.platform.PlatformRegistry``; :mod:`.plugin` imports it
on ``import verl`` (the ``verl.plugins`` entry point), in the driver and in every Ray worker, so
``VERL_PLATFORM=cpu`` (set by :func:`use_cpu_platform`, passed on to the workers in Ray's
``runtime_env``) selects it everywhere. It never selects itself: auto-detection skips it.

What it answers: device ``cpu`` (``torch.cpu`` as the device module), communication backend
``gloo``, no Ray accelerator (a worker asks for CPUs, ``{"num_cpus": n}``), seeding through
``torch.manual_seed``, and no-ops for the allocator, cache, profiler and synchronisation calls.

:func:`use_cpu_platform` is the one call a user makes; it has no verl import, so that a missing
``verl`` extra is reported in one sentence instead of an ``ImportError`` deep in a worker.
"""

from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from toolgym.core.errors import ConfigError

PLATFORM_NAME = "cpu"
"""The name verl's registry and ``VERL_PLATFORM`` know this platform by."""
ENV = "VERL_PLATFORM"


def require_verl() -> None:
    """Raise :class:`ConfigError` (one sentence) when verl is not installed."""
    if importlib.util.find_spec("verl") is None:
        raise ConfigError(
            "the CPU platform for verl needs verl, which is not installed: "
            "pip install 'toolgym[verl]' (verl 0.9.1)"
        )


def use_cpu_platform() -> dict[str, str]:
    """Select the ``cpu`` platform in this process; returns the env vars Ray workers need.

    Call it before anything calls ``get_platform()`` (verl caches the first answer); pass the
    returned mapping as ``ray.init(runtime_env={"env_vars": ...})`` so workers pick it too.
    """
    require_verl()
    os.environ[ENV] = PLATFORM_NAME
    register_platform()
    return {ENV: PLATFORM_NAME}


def register_platform() -> type:
    """Register :class:`PlatformCPU` with verl (idempotent) and return it."""
    from verl.plugin.platform import PlatformRegistry

    cls = _platform_class()
    if PlatformRegistry.get(PLATFORM_NAME) is not cls:
        PlatformRegistry.register(platform=PLATFORM_NAME)(cls)
    if os.environ.get(ENV, "").strip().lower() == PLATFORM_NAME:
        from . import cpu_shims

        cpu_shims.patch_process_group_backend()
        _register_cpu_engines()
        cpu_shims.patch_forward_only_offload()
    return cls


_CLASS: type | None = None


def _platform_class() -> type:
    """Build the class on first use: its base class is verl's, and this module imports without verl."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import torch
    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's platform interface answered for the host CPU (no accelerator, gloo collectives)."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> ModuleType:
            return _device_module()

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            # opt-in only (VERL_PLATFORM=cpu): auto-detection must keep finding real accelerators
            return False

        def current_device(self) -> Any:
            # verl passes get_device_id() straight to .to(...) / FSDP's device_id / torch.device(...)
            # (e.g. workers/engine/fsdp/transformer_impl.py:935, utils/fsdp_utils.py:507), where an
            # int means cuda:<int>; a torch.device("cpu") keeps every such tensor on the host
            return torch.device("cpu")

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            # verl reads and sets it around workers; a name no library acts on keeps that harmless
            return "TOOLGYM_VERL_VISIBLE_CPUS"

        def get_device_uuid(self, device_id: int) -> str:
            return f"cpu-{device_id}"

        def ray_resource_name(self) -> str:
            # RayResourcePool.get_placement_groups sets bundle[<this>] = 1: "CPU" keeps bundles CPU-only
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        @contextmanager
        def nvtx_range(self, msg: str) -> Any:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def cudart(self) -> Any:
            return None

    PlatformCPU.__module__ = __name__
    PlatformCPU.__qualname__ = "PlatformCPU"
    _CLASS = PlatformCPU
    return _CLASS


_MODULE: ModuleType | None = None


def _device_module() -> ModuleType:
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes on ``get_torch_device()`` that it lacks.

    verl calls e.g. ``memory_reserved`` / ``mem_get_info`` / ``get_rng_state`` / ``ipc_collect`` on
    the device module (``utils/memory_utils.py:47``, ``engine_workers.py:691``); on the host they
    are zeros, the host RNG and no-ops. Anything else is ``torch.cpu``'s own.
    """
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    import torch

    def zero(*_: Any, **__: Any) -> int:
        return 0

    def nothing(*_: Any, **__: Any) -> None:
        return None

    def mem_get_info(*_: Any) -> tuple[int, int]:
        page, pages, free = (
            os.sysconf("SC_PAGE_SIZE"),
            os.sysconf("SC_PHYS_PAGES"),
            os.sysconf("SC_AVPHYS_PAGES"),
        )
        return free * page, pages * page

    class CPUDeviceModule(ModuleType):
        def __getattr__(self, name: str) -> Any:
            return getattr(torch.cpu, name)

    module = CPUDeviceModule(
        "toolgym_verl_cpu_device", "torch.cpu with verl's CUDA-only calls as host no-ops"
    )
    calls: dict[str, Any] = {
        "memory_reserved": zero,
        "memory_allocated": zero,
        "max_memory_reserved": zero,
        "max_memory_allocated": zero,
        "mem_get_info": mem_get_info,
        "empty_cache": nothing,
        "ipc_collect": nothing,
        "reset_peak_memory_stats": nothing,
        "set_per_process_memory_fraction": nothing,
        "set_device": nothing,
        "synchronize": nothing,
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "get_device_name": lambda *_: "cpu",
        "get_rng_state": lambda *_: torch.get_rng_state(),
        "set_rng_state": lambda state, *_: torch.set_rng_state(state),
        "manual_seed": torch.manual_seed,
        "manual_seed_all": torch.manual_seed,
    }
    for name, fn in calls.items():
        setattr(module, name, fn)
    _MODULE = module
    return _MODULE


def _register_cpu_engines() -> None:
    """Register verl's FSDP engines for device ``cpu`` through verl's public ``EngineRegistry``.

    verl registers them for ``cuda`` and ``npu`` only (``workers/engine/fsdp/transformer_impl.py``
    1143 and 1594); the lookup is by ``get_device_name()``. Done only when ``cpu`` is selected,
    since importing the engine module resolves the platform.
    """
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl as fsdp

    for model_type, cls_name in (
        ("language_model", "FSDPEngineWithLMHead"),
        ("value_model", "FSDPEngineWithValueHead"),
    ):
        cls = getattr(fsdp, cls_name, None)
        backends = EngineRegistry._engines.get(model_type, {})
        if cls is None or all(PLATFORM_NAME in backends.get(b, {}) for b in ("fsdp", "fsdp2")):
            continue
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=PLATFORM_NAME)(cls)


def register_with_verl() -> None:
    """:mod:`.plugin`'s hook: register the platform (verl is being imported, so it is there)."""
    register_platform()
