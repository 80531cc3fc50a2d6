"""The places where toolgym touches verl internals that have no extension point (all but the last on
the CPU path only).

Each shim is one named function, written against verl 0.9.1 and kept by
``tests/training/verl/test_cpu_platform.py`` (which fails when verl's version or the patched
attribute changes). Everything else on the CPU path goes through verl's registries
(``PlatformRegistry``, ``RolloutReplicaRegistry``, ``EngineRegistry``).

- :func:`register_rollout_adapter`: verl looks up the worker-side rollout adapter of a rollout
  name in the private dict ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (base.py:89), which has
  no ``register`` function; the entry is added to it.
- :func:`patch_resource_check`: ``ResourcePoolManager._check_resource_available``
  (single_controller/ray/base.py:226) counts only the ``GPU``/``NPU`` Ray resources, so a pool on
  the CPU platform is refused ("Total available GPUs 0 ..."); with the ``cpu`` platform selected,
  the patched check counts Ray ``CPU`` instead, and otherwise calls verl's own.
- :func:`patch_process_group_backend`: ``initialize_global_process_group_ray``
  (utils/distributed.py:89) builds the backend string ``f"cpu:gloo,{device}:{backend}"``, which
  for device ``cpu`` is ``"cpu:gloo,cpu:gloo"`` and torch refuses ("Duplicate device type cpu");
  with the ``cpu`` platform selected and no backend given, the patched function passes
  ``"cpu:gloo"``. It is replaced in ``verl.utils.distributed`` before
  ``verl.workers.engine_workers`` imports it by name (and there too if that is already imported).
- :func:`patch_forward_only_offload`: the KL reference model's CPU-offload policy without pinned memory.
- :func:`patch_trl_value_head` (every platform): ``apply_monkey_patch``
  (models/transformers/monkey_patch.py:352) imports TRL's ``AutoModelForCausalLMWithValueHead``
  whenever TRL is installed, from ``trl.experimental.ppo`` or ``trl``; TRL 1.x has it in neither, so
  with ``toolgym[trl]`` beside ``toolgym[verl]`` every actor failed to build ("cannot import name
  'AutoModelForCausalLMWithValueHead'"). When TRL has no such class, verl's
  ``is_trl_available`` answers ``False`` (only a TRL value-head critic needs it; toolgym trains none).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("toolgym.verl")

VERL_VERSION = "0.9.1"
"""The verl release these shims were written and tested against."""


def _check_version() -> None:
    import verl

    if verl.__version__ != VERL_VERSION:
        log.warning(
            "toolgym's CPU shims were written for verl %s, found %s: re-check cpu_shims.py",
            VERL_VERSION,
            verl.__version__,
        )


def register_rollout_adapter(name: str, target: str, mode: str = "async") -> None:
    """Make ``get_rollout_class(name, mode)`` return the class at ``target`` (``"module.Class"``)."""
    from verl.workers.rollout import base

    _check_version()
    registry = getattr(base, "_ROLLOUT_REGISTRY", None)
    if not isinstance(registry, dict):
        raise RuntimeError(
            f"verl {_version()} has no dict verl.workers.rollout.base._ROLLOUT_REGISTRY; "
            "toolgym's CPU rollout needs cpu_shims.register_rollout_adapter updated"
        )
    registry[(name, mode)] = target


_ORIGINAL_CHECK: Any = None


def patch_resource_check() -> None:
    """Let ``ResourcePoolManager`` count Ray CPUs, not GPUs, when verl's platform is ``cpu`` (idempotent)."""
    global _ORIGINAL_CHECK
    from verl.single_controller.ray.base import ResourcePoolManager

    _check_version()
    if _ORIGINAL_CHECK is not None:
        return
    _ORIGINAL_CHECK = ResourcePoolManager._check_resource_available

    def _check_resource_available(self: Any) -> None:
        from verl.plugin.platform import get_platform

        if get_platform().device_name != "cpu":
            return _ORIGINAL_CHECK(self)
        import ray

        available = sum(
            node.get("CPU", 0) for node in ray._private.state.available_resources_per_node().values()
        )
        required = sum(n for nodes in self.resource_pool_spec.values() for n in nodes)
        if available < required:
            raise ValueError(
                f"the CPU platform needs {required} Ray CPUs for its worker pools, Ray has {available} free: "
                "lower trainer.n_gpus_per_node or start Ray with more num_cpus"
            )
        return None

    ResourcePoolManager._check_resource_available = _check_resource_available  # type: ignore[method-assign]


_ORIGINAL_INIT: Any = None


def patch_process_group_backend() -> None:
    """Make verl's Ray process-group init use ``cpu:gloo`` alone on the ``cpu`` platform (idempotent)."""
    global _ORIGINAL_INIT
    import sys

    from verl.utils import distributed

    _check_version()
    if _ORIGINAL_INIT is not None:
        return
    _ORIGINAL_INIT = distributed.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
        from verl.plugin.platform import get_platform

        if backend is None and get_platform().device_name == "cpu":
            backend = "cpu:gloo"
        return _ORIGINAL_INIT(timeout_second=timeout_second, backend=backend)

    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    workers = sys.modules.get("verl.workers.engine_workers")
    if workers is not None:
        workers.initialize_global_process_group_ray = initialize_global_process_group_ray  # type: ignore[attr-defined]


_ORIGINAL_OFFLOAD: Any = None


def patch_forward_only_offload() -> None:
    """On the ``cpu`` platform, the CPU-offload policy verl gives forward-only FSDP2 engines (the KL
    reference model: ``workers/engine/fsdp/transformer_impl.py``, ``CPUOffloadPolicy(pin_memory=True)``)
    does not pin memory: pinning needs an accelerator ("Cannot access accelerator device"), and on the
    CPU the parameters are in host memory already (idempotent)."""
    global _ORIGINAL_OFFLOAD
    from verl.workers.engine.fsdp import transformer_impl

    _check_version()
    if _ORIGINAL_OFFLOAD is not None:
        return
    _ORIGINAL_OFFLOAD = transformer_impl.CPUOffloadPolicy

    def offload_policy(*args: Any, pin_memory: bool = True, **kwargs: Any) -> Any:
        from verl.plugin.platform import get_platform

        if get_platform().device_name == "cpu":
            pin_memory = False
        return _ORIGINAL_OFFLOAD(*args, pin_memory=pin_memory, **kwargs)

    transformer_impl.CPUOffloadPolicy = offload_policy  # type: ignore[misc,assignment]


def patch_trl_value_head() -> None:
    """Make verl's ``is_trl_available`` say ``False`` when the installed TRL lacks the value-head model
    verl's monkey patch imports (idempotent; patched where verl's modules imported it by name)."""
    import sys

    from verl.utils import import_utils

    if getattr(import_utils.is_trl_available, "toolgym_shim", False) or not import_utils.is_trl_available():
        return
    if trl_has_value_head():
        return
    _check_version()

    def is_trl_available() -> bool:
        return False

    is_trl_available.toolgym_shim = True  # type: ignore[attr-defined]
    import_utils.is_trl_available = is_trl_available  # type: ignore[assignment]
    for name in ("verl.models.transformers.monkey_patch", "verl.utils.model"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "is_trl_available"):
            module.is_trl_available = is_trl_available  # type: ignore[attr-defined]


def trl_has_value_head() -> bool:
    """Whether the installed TRL has ``AutoModelForCausalLMWithValueHead`` where verl looks for it
    (without importing ``trl.experimental``, which warns on import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        return False
    if (Path(spec.origin).parent / "experimental" / "ppo").exists():
        return True
    import trl

    return "AutoModelForCausalLMWithValueHead" in dir(trl)


def _version() -> str:
    import verl

    return str(verl.__version__)
