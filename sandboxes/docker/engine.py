"""Access to the Docker engine: one API client, a thread pool for its blocking calls, a global
gate on creations and removals, and the sweep of leftover sandbox containers.

The ``docker`` SDK blocks; every call goes through ``call()`` on a dedicated thread pool so the
event loop never waits on it. The daemon serialises container creation and removal internally,
so more than a few at once only queue there: ``LIFECYCLE_GATE`` bounds them process-wide (it is
a threading semaphore, so it holds across event loops and backends).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from toolgym.core.errors import SandboxError
from toolgym.sandboxes import lifecycle

T = TypeVar("T")

LABEL = "toolgym.sandbox"
"""Every sandbox container carries it (value: the sandbox kind)."""
LIFECYCLE_GATE = threading.BoundedSemaphore(4)
_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="toolgym-docker")
_client_lock = threading.Lock()
_clients: dict[str | None, Any] = {}
_ping_cache: dict[str | None, tuple[float, bool]] = {}


def api(base_url: str | None = None) -> Any:
    """A shared low-level ``docker.APIClient`` (``base_url`` None: from the environment)."""
    with _client_lock:
        client = _clients.get(base_url)
        if client is None:
            import docker
            from docker.utils import kwargs_from_env

            try:
                if base_url:
                    client = docker.APIClient(base_url=base_url, version="auto", timeout=60, max_pool_size=64)
                else:
                    env = kwargs_from_env()
                    client = docker.APIClient(version="auto", timeout=60, max_pool_size=64, **env)
            except docker.errors.DockerException as exc:
                raise SandboxError(
                    f"cannot reach the Docker engine ({exc}); start it (scripts/ensure-docker.sh) "
                    "or use the local backend"
                ) from None
            _clients[base_url] = client
        return client


def engine_answers(base_url: str | None = None, *, cache_s: float = 5.0) -> bool:
    """Whether a Docker engine answers a ping (cached for ``cache_s`` seconds)."""
    now = time.monotonic()
    cached = _ping_cache.get(base_url)
    if cached is not None and now - cached[0] < cache_s:
        return cached[1]
    try:
        import docker
        from docker.utils import kwargs_from_env

        kwargs = {"base_url": base_url} if base_url else kwargs_from_env()
        ok = bool(docker.APIClient(timeout=3, version="1.41", **kwargs).ping())
    except Exception:
        ok = False
    _ping_cache[base_url] = (now, ok)
    return ok


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking SDK call on the Docker thread pool."""
    return await asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args, **kwargs))


def remove_container(client: Any, container_id: str, *, timeout_s: float = 10.0) -> None:
    """Force-remove a container; a missing one or one already being removed counts as done."""
    import docker

    with LIFECYCLE_GATE:
        try:
            client.remove_container(container_id, force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress (auto-remove)
                raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.inspect_container(container_id)
        except docker.errors.NotFound:
            return
        time.sleep(0.05)


def leftovers(client: Any, *, everything: bool = False) -> list[dict[str, Any]]:
    """Sandbox containers whose owner process is gone or whose TTL passed (all with ``everything``)."""
    found = []
    now = time.time()
    for c in client.containers(all=True, filters={"label": LABEL}):
        labels = c.get("Labels") or {}
        expires = labels.get("toolgym.expires", "")
        expired = expires.isdigit() and int(expires) < now
        if everything or expired or not lifecycle.owner_alive(labels.get("toolgym.owner", "")):
            found.append(c)
    return found


def sweep(client: Any, *, everything: bool = False) -> int:
    """Remove the leftover sandbox containers of the engine ``client`` talks to; how many.

    This machine's state directories are not that engine's: they belong to every sandbox made here,
    on any backend, so they are swept on their own (:func:`lifecycle.sweep_state_dirs`). A sweep of
    another engine with ``everything`` once removed them too, the live ones' included, and the
    sandboxes of other processes here lost their egress proxy socket mid-run."""
    containers = leftovers(client, everything=everything)
    if containers:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda c: remove_container(client, c["Id"]), containers))
    return len(containers)
