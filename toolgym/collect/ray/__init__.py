"""toolgym beyond one machine: collections spread over Ray actors (``collect_ray``), each actor an
asyncio rollout engine with its own sandbox pool, results written by the driver into one store.

Ray is imported only when a collection starts (``pip install 'toolgym[ray]'``). Sandboxes on other
machines' Docker engines live in ``toolgym.sandboxes.remote``. See docs/scaling.md.
"""

from __future__ import annotations

from toolgym.collect.ray.dispatch import Dispatcher, DispatchStats, NoWorkersLeft
from toolgym.collect.ray.driver import RayCollectResult, RayOptions, collect_ray
from toolgym.collect.ray.worker import RolloutWorker, WorkerSpec

__all__ = [
    "DispatchStats",
    "Dispatcher",
    "NoWorkersLeft",
    "RayCollectResult",
    "RayOptions",
    "RolloutWorker",
    "WorkerSpec",
    "collect_ray",
]
