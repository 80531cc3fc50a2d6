"""The warm pool and lifecycle every backend shares (``PooledBackend``).

- ``acquire(kind)`` hands out an idle sandbox of that kind after a liveness ping (skipped when
  its agent answered within ``ping_fresh_s``: a sandbox just back from its checked reset); with
  none idle but one of the kind in its reset (released, not yet back), it waits up to
  ``reuse_wait_s`` for that one rather than make another (a reset is milliseconds for Python and
  about half a second for a browser, where a new sandbox starts a Chromium); else it creates one.
  Then it tops the kind's idle list back up to its warm target in the background.
- ``release(sandbox)`` returns at once; in the background the sandbox is reset (every process
  but the agent killed, work directory, /tmp and home wiped) and checked. It is destroyed instead
  when it is broken (agent dead or hung), poisoned (processes survived the reset, memory, pids or
  disk still near their limits), or when the idle list is full.
- The reset is not taken on the sandbox's word: after it, the host checks from outside
  (``_host_check``: its own view of the sandbox's processes) that only the agent it started
  with is left, with the attributes it started with (resource limits, nice value, CPU affinity,
  scheduling, I/O priority: code of its uid can change them, and everything the agent starts
  inherits them; ``hostprocs.attributes_changed``), and destroys the sandbox otherwise. Only
  then does the agent start the next episode's interpreter (``prestart``).
- A sandbox's **kept session** (``AgentSandbox.kept_python``: the browser tools' Playwright and
  Chromium) survives the reset when the episode ran no code of its own in the sandbox and the
  session's renewal cell (closing every browser context) succeeded; the host then allows exactly
  one process tree under the agent beside it (``hostprocs.only_expected``'s ``kept_under``).
  Otherwise it is killed with the rest, and the next episode starts a new one.
- A reset empties every writable place, but some kernel counters go on from where the last
  episode left them (loopback bytes, inode numbers, the PID counter: the README's "What carries
  over between episodes"). So an idle sandbox is never handed to an episode of a group
  (``GROUP_LABEL`` in ``acquire``'s labels) it has already served, for as long as it lives: a
  sample cannot pass its answer to a sibling, nor to the same task's group of a later epoch. The
  next idle sandbox is taken instead, or a new one made. After the host's check, ``_after_reset``
  resets from outside what the backend can (the memory cgroup's peak, on Docker).
- ``aclose()`` destroys everything the backend made. Sandboxes are also registered with
  ``lifecycle`` so that an exiting process destroys them, and the first ``acquire`` sweeps away
  leftovers of dead processes.

Subclasses implement ``_create`` and ``_destroy`` (and ``_sweep``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.core.sandbox import GROUP_LABEL
from toolgym.core.sandbox_profiles import DEFAULT_PROFILES, SandboxProfile, resolve_profiles
from toolgym.sandboxes import lifecycle
from toolgym.sandboxes.sandbox import AgentSandbox

log = logging.getLogger("toolgym.sandboxes")

REUSE_WAIT_S = 2.0
"""How long ``acquire`` waits, by default, for a released sandbox to come back from its reset
rather than create one (a browser sandbox resets in about 0.5 s and starts in 1.5 s or more)."""

POISON_FRACTION = 0.9
"""A reset sandbox whose memory or pids use is still above this share of its limit is destroyed."""
PING_FRESH_S = 1.0
"""An idle sandbox whose agent answered less than this long ago (seconds) is handed out without a
ping. The ping is a liveness check only (an agent that died closes its channel, which takes the
sandbox out of the idle list at once; the ping catches one that hangs); the reset's checks are not
affected."""


class PooledBackend(ABC):
    """A sandbox backend with a warm pool (see the module docstring)."""

    name = ""
    ping_fresh_s = PING_FRESH_S

    def __init__(
        self,
        *,
        warm: int | Mapping[str, int] = 0,
        max_idle: int = 16,
        profiles: Mapping[str, SandboxProfile | Mapping[str, Any]] | None = None,
        run_id: str | None = None,
        create_concurrency: int = 4,
        start_timeout_s: float = 60.0,
        reuse_wait_s: float = REUSE_WAIT_S,
    ) -> None:
        """``warm``: idle sandboxes to keep ready, per kind (an int applies to ``python``);
        ``max_idle``: most idle sandboxes kept per kind after release; ``create_concurrency``:
        creations and removals in flight at once; ``reuse_wait_s``: how long ``acquire`` waits for a
        sandbox in its reset before it makes a new one (0: never waits)."""
        self.reuse_wait_s = float(reuse_wait_s)
        self.profiles = resolve_profiles(profiles)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.owner = lifecycle.owner_id()
        self.max_idle = max_idle
        self.start_timeout_s = start_timeout_s
        self.warm_targets: dict[str, int] = (
            dict(warm) if isinstance(warm, Mapping) else ({"python": warm} if warm else {})
        )
        self.counters = {
            "created": 0,
            "reused": 0,
            "destroyed": 0,
            "poisoned": 0,
            "dead_in_pool": 0,
            "kept_from_group": 0,
            "waited_for_reset": 0,
        }
        """``kept_from_group``: idle sandboxes passed over because they had served the acquiring
        episode's group; ``waited_for_reset``: acquires that waited for a sandbox in its reset and got it."""
        self._served: dict[str, set[str]] = {}
        """Sandbox id -> the groups whose episodes it has served (``GROUP_LABEL``)."""
        self._warned_places: set[str] = set()
        self._idle: dict[str, deque[AgentSandbox]] = {}
        self._creating: dict[str, int] = {}
        self._recycling: dict[str, set[AgentSandbox]] = {}
        """Released sandboxes of each kind in their background reset."""
        self._waiters: dict[str, int] = {}
        self._back: dict[str, asyncio.Condition] = {}
        """Per kind: notified whenever a reset ends (the sandbox back in the idle list, or destroyed)."""
        self._live: dict[str, AgentSandbox] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._create_concurrency = create_concurrency
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self._create_errors: dict[str, tuple[float, str]] = {}

    # -- to implement ----------------------------------------------------------------------------

    @abstractmethod
    async def _create(
        self,
        kind: str,
        profile: SandboxProfile,
        *,
        sandbox_id: str,
        episode_id: str,
        labels: Mapping[str, str],
    ) -> AgentSandbox:
        """Make one sandbox and return it once its agent is connected."""

    @abstractmethod
    async def _destroy(self, sandbox: AgentSandbox) -> None:
        """Remove the sandbox for good; idempotent, never raises for an already-gone one."""

    @abstractmethod
    def _destroy_sync(self, sandbox: AgentSandbox) -> None:
        """Blocking ``_destroy``, for interpreter exit."""

    async def _sweep(self) -> int:
        """Remove leftovers of dead processes; how many."""
        return 0

    async def _note_start(self, sandbox: AgentSandbox) -> None:
        """Record, from the host, what a fresh sandbox is made of (for ``_host_check``)."""

    async def _host_check(self, sandbox: AgentSandbox) -> str | None:
        """After a reset: None when the host itself sees the sandbox as fresh, else why not.
        A backend that cannot look from outside never reuses a sandbox."""
        return f"the {self.name} backend cannot check a reset from outside; sandboxes are made anew"

    async def _after_reset(self, sandbox: AgentSandbox) -> None:
        """After a checked reset: reset from outside the counters the backend can (and record in
        ``sandbox.handle["counters"]`` which, for the audit). Never raises for a counter it cannot."""

    # -- the SandboxBackend protocol --------------------------------------------------------------

    def profile(self, kind: str) -> SandboxProfile:
        """The profile of ``kind``: this backend's, else one registered since, else the defaults."""
        return self.profiles.get(kind) or DEFAULT_PROFILES.get(kind) or SandboxProfile()

    async def start(self) -> None:
        """Sweep leftovers and start warming the pool; called by the first ``acquire``."""
        if self._started:
            return
        if self._start_lock is None:
            self._loop = asyncio.get_running_loop()
            self._start_lock = asyncio.Lock()
            self._slots = asyncio.Semaphore(self._create_concurrency)
        async with self._start_lock:
            if self._started:
                return
            swept = await self._sweep()
            if swept:
                log.info("removed %d leftover sandboxes of processes that are gone", swept)
            self._started = True
        for kind in self.warm_targets:
            self._replenish(kind)

    async def acquire(
        self, kind: str, *, episode_id: str = "", labels: Mapping[str, str] | None = None
    ) -> AgentSandbox:
        """A ready sandbox of ``kind``: a pinged idle one that has not served the episode's group
        (``labels[GROUP_LABEL]``), else a new one."""
        if self._closed:
            raise SandboxError(f"the {self.name} sandbox backend is closed; create a new one")
        await self.start()
        group = (labels or {}).get(GROUP_LABEL, "")
        idle = self._idle.setdefault(kind, deque())
        sandbox = await self._take_idle(kind, group)
        if sandbox is None and self._worth_waiting(kind, group, self._waiters.get(kind, 0)):
            sandbox = await self._wait_for_reset(kind, group)
        if sandbox is None:
            if group and idle:
                self.counters["kept_from_group"] += 1
            sandbox = await self._create_one(kind, episode_id=episode_id, labels=labels or {})
        if group:
            self._served.setdefault(sandbox.id, set()).add(group)
        sandbox.episode_id = episode_id
        self._note_holder(sandbox, episode_id, labels or {})
        self._replenish(kind)
        return sandbox

    async def _take_idle(self, kind: str, group: str) -> AgentSandbox | None:
        """An idle sandbox of ``kind`` that has not served ``group`` and answers, taken from the list."""
        idle = self._idle.setdefault(kind, deque())
        while True:
            candidate = next((c for c in idle if not group or group not in self._served.get(c.id, ())), None)
            if candidate is None:
                return None
            idle.remove(candidate)
            try:
                if time.monotonic() - candidate.channel.last_heard >= self.ping_fresh_s:
                    await candidate.ping(timeout=2.0)
            except SandboxError:
                self.counters["dead_in_pool"] += 1
                self._discard(candidate)
                continue
            self.counters["reused"] += 1
            return candidate

    def _worth_waiting(self, kind: str, group: str, others: int) -> bool:
        """Whether more sandboxes of ``kind`` in their reset could serve ``group`` than ``others``
        (acquires already waiting) count on."""
        if self.reuse_wait_s <= 0:
            return False
        usable = sum(
            1 for s in self._recycling.get(kind, ()) if not group or group not in self._served.get(s.id, ())
        )
        return usable > others

    async def _wait_for_reset(self, kind: str, group: str) -> AgentSandbox | None:
        """An idle sandbox once a reset of ``kind`` brings one back, within ``reuse_wait_s``; None
        when the time is up or no reset that could serve ``group`` is left in flight."""
        back = self._back.setdefault(kind, asyncio.Condition())
        deadline = time.monotonic() + self.reuse_wait_s
        self._waiters[kind] = self._waiters.get(kind, 0) + 1
        try:
            while True:
                sandbox = await self._take_idle(kind, group)
                if sandbox is not None:
                    self.counters["waited_for_reset"] += 1
                    return sandbox
                left = deadline - time.monotonic()
                if left <= 0 or not self._worth_waiting(kind, group, self._waiters[kind] - 1):
                    return None
                async with back:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(back.wait(), left)
        finally:
            self._waiters[kind] -= 1

    async def release(self, sandbox: AgentSandbox, *, broken: bool = False) -> None:  # type: ignore[override]
        """Give a sandbox back; it is reset for reuse in the background, or destroyed."""
        if sandbox.id not in self._live:
            return
        self._note_holder(sandbox, "", {})
        if broken or sandbox.broken or self._closed:
            self._discard(sandbox)
            return
        self._recycling.setdefault(sandbox.kind, set()).add(sandbox)  # before its task runs
        # out again when the task ends, even one cancelled before it ever ran (no `finally` then)
        self._spawn(
            self._recycle(sandbox),
            f"recycle-{sandbox.id}",
            on_done=lambda: self._recycling.get(sandbox.kind, set()).discard(sandbox),
        )

    async def aclose(self) -> None:
        """Destroy every sandbox this backend made (idle and handed out); safe to call twice."""
        self._closed = True
        for sandbox in list(self._live.values()):
            self._discard(sandbox)
        await self.settle()

    async def settle(self) -> None:
        """Wait until background work (resets, creations, removals) is done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def prewarm(self, kind: str, count: int, *, timeout_s: float | None = None) -> None:
        """Keep ``count`` idle sandboxes of ``kind`` and wait until they are ready."""
        await self.start()
        self.warm_targets[kind] = count
        self._replenish(kind)
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s + 10.0 * count)
        while len(self._idle.get(kind, ())) < count:
            if kind in self._create_errors and self._create_errors[kind][0] > deadline - 3600:
                raise SandboxError(self._create_errors[kind][1])
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"could not warm {count} {kind!r} sandboxes in time; see `toolgym sandbox doctor`"
                )
            await asyncio.sleep(0.02)

    def idle_count(self, kind: str) -> int:
        return len(self._idle.get(kind, ()))

    def discard_idle(self, kind: str | None = None) -> bool:
        """Destroy one idle sandbox (of ``kind``, or of any kind), oldest first, to free its room
        on the host; whether there was one."""
        for k, idle in self._idle.items():
            if idle and (kind is None or k == kind):
                self._discard(idle[0])
                return True
        return False

    @property
    def live(self) -> list[AgentSandbox]:
        """Every sandbox of this backend not yet destroyed (idle or handed out)."""
        return list(self._live.values())

    # -- internals -------------------------------------------------------------------------------

    def _spawn(self, coro: Any, name: str, on_done: Callable[[], None] | None = None) -> None:
        """Run ``coro`` in the background on the backend's loop (``aclose`` waits for it);
        ``on_done`` runs when its task ends, however it ends."""

        def start() -> None:
            task = self._loop.create_task(coro, name=name)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if on_done is not None:
                task.add_done_callback(lambda _: on_done())

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            start()
        else:  # a channel closed from another thread, or outside the loop
            self._loop.call_soon_threadsafe(start)

    async def _create_one(self, kind: str, *, episode_id: str, labels: Mapping[str, str]) -> AgentSandbox:
        assert self._slots is not None
        sandbox_id = uuid.uuid4().hex[:12]
        async with self._slots:
            if self._closed:
                raise SandboxError(f"the {self.name} sandbox backend is closed; create a new one")
            sandbox = await self._create(
                kind, self.profile(kind), sandbox_id=sandbox_id, episode_id=episode_id, labels=labels
            )
            try:
                await self._note_start(sandbox)
            except BaseException:
                sandbox.channel.close("the sandbox was destroyed")
                await self._destroy(sandbox)
                lifecycle.remove_sandbox_dir(sandbox.id)
                raise
        self.counters["created"] += 1
        self._live[sandbox.id] = sandbox
        lifecycle.track(sandbox.id, lambda: self._destroy_sync(sandbox))
        sandbox.channel.on_close(lambda _reason: self._on_channel_closed(sandbox))
        return sandbox

    def _on_channel_closed(self, sandbox: AgentSandbox) -> None:
        """An idle sandbox whose agent died leaves the pool at once."""
        idle = self._idle.get(sandbox.kind)
        if idle is not None and sandbox in idle:
            idle.remove(sandbox)
            self.counters["dead_in_pool"] += 1
            self._discard(sandbox)

    def _replenish(self, kind: str) -> None:
        if self._closed:
            return
        failed = self._create_errors.get(kind)
        if failed is not None and time.monotonic() - failed[0] < 5.0:
            return  # back off after a failed creation rather than loop on it
        deficit = self.warm_targets.get(kind, 0) - len(self._idle.get(kind, ())) - self._creating.get(kind, 0)
        for _ in range(max(deficit, 0)):
            self._creating[kind] = self._creating.get(kind, 0) + 1
            self._spawn(self._warm_one(kind), f"warm-{kind}")

    async def _warm_one(self, kind: str) -> None:
        try:
            sandbox = await self._create_one(kind, episode_id="", labels={})
        except Exception as exc:
            if not self._closed:
                self._create_errors[kind] = (time.monotonic(), str(exc))
                log.warning("could not warm a %r sandbox: %s", kind, exc)
            return
        finally:
            self._creating[kind] -= 1
        self._create_errors.pop(kind, None)
        if self._closed:
            self._discard(sandbox)
        else:
            self._idle.setdefault(kind, deque()).append(sandbox)

    async def _recycle(self, sandbox: AgentSandbox) -> None:
        try:
            await self._reset_for_reuse(sandbox)
        finally:
            self._recycling.get(sandbox.kind, set()).discard(sandbox)
            back = self._back.get(sandbox.kind)
            if back is not None:
                async with back:
                    back.notify_all()

    async def _reset_for_reuse(self, sandbox: AgentSandbox) -> None:
        try:
            stats = await asyncio.wait_for(sandbox.reset(prestart=False, keep=True), 30.0)
            if stats.get("kept_note"):
                log.debug("sandbox %s: its kept session was not kept: %s", sandbox.id, stats["kept_note"])
            reason = self.poison_reason(sandbox, stats) or await self._host_check(sandbox)
            if reason is None:
                await self._after_reset(sandbox)
                await asyncio.wait_for(sandbox.prestart(), 20.0)
        except (TimeoutError, SandboxError):
            self._discard(sandbox)
            return
        if reason is not None:
            self.counters["poisoned"] += 1
            self._warn_unwipeable(sandbox, stats)
            log.info("destroying sandbox %s after reset: %s", sandbox.id, reason)
            self._discard(sandbox)
            return
        idle = self._idle.setdefault(sandbox.kind, deque())
        if self._closed or len(idle) >= max(self.max_idle, self.warm_targets.get(sandbox.kind, 0)):
            self._discard(sandbox)
            return
        idle.append(sandbox)

    def _warn_unwipeable(self, sandbox: AgentSandbox, stats: Mapping[str, Any]) -> None:
        """One warning line per place the reset cannot clean (each time a sandbox of this kind is
        made anew for it, the operator should hear once why sandboxes are not reused)."""
        for place in (stats.get("leftovers") or {}).get("unwipeable") or []:
            if f"{sandbox.kind}:{place}" not in self._warned_places:
                self._warned_places.add(f"{sandbox.kind}:{place}")
                text = " ".join(str(place).split())
                log.warning(
                    "%s sandboxes are made anew after each episode: the reset cannot clean %s "
                    "(mount it read-only, or give the sandbox a directory of its own)",
                    sandbox.kind,
                    text,
                )

    @staticmethod
    def poison_reason(sandbox: AgentSandbox, stats: Mapping[str, Any]) -> str | None:
        """Why a freshly reset sandbox must not be reused, or None when it is clean."""
        if stats.get("processes"):
            return f"{stats['processes']} processes survived the reset"
        left = stats.get("leftovers") or {}
        if left.get("files"):
            return f"files survived the wipe in {left['files']}"
        if left.get("sysv"):
            return f"{left['sysv']} System V IPC objects survived the reset"
        if left.get("unwipeable"):
            return f"writable places the reset cannot restore: {left['unwipeable']}"
        for used, limit, what in (
            ("memory_bytes", "memory_limit_bytes", "memory"),
            ("pids", "pids_limit", "pids"),
        ):
            u, lim = stats.get(used), stats.get(limit)
            if u is not None and lim and u > POISON_FRACTION * lim:
                return f"{what} use {u} is still near its limit {lim}"
        for path, disk in (stats.get("disk") or {}).items():
            if disk.get("size") and disk["used"] > 0.5 * disk["size"]:
                return f"{path} is still {disk['used']} bytes full after the wipe"
        return None

    def _discard(self, sandbox: AgentSandbox) -> None:
        """Destroy in the background (tracked, so ``aclose`` waits for it)."""
        if self._live.pop(sandbox.id, None) is None:
            return
        self._served.pop(sandbox.id, None)
        idle = self._idle.get(sandbox.kind)
        if idle is not None and sandbox in idle:
            idle.remove(sandbox)
        self.counters["destroyed"] += 1
        self._spawn(self._destroy_tracked(sandbox), f"destroy-{sandbox.id}")

    async def _destroy_tracked(self, sandbox: AgentSandbox) -> None:
        assert self._slots is not None
        try:
            sandbox.channel.close("the sandbox was destroyed")
            async with self._slots:
                await self._destroy(sandbox)
        except Exception as exc:
            log.warning("could not destroy sandbox %s: %s", sandbox.id, exc)
        finally:
            lifecycle.untrack(sandbox.id)
            lifecycle.remove_sandbox_dir(sandbox.id)

    def _note_holder(self, sandbox: AgentSandbox, episode_id: str, labels: Mapping[str, str]) -> None:
        """Record who holds a sandbox in its state directory (``toolgym sandbox ls`` reads it):
        labels of pooled containers cannot change after creation. Overwritten in place, then cut to
        length: truncating to zero first makes ext4 flush the file on close (about 1 ms, on every
        acquire and release); a reader that meets a half-written file gets no holder."""
        data = json.dumps({"episode": episode_id, "labels": dict(labels), "since": time.time()}).encode()
        with contextlib.suppress(OSError):
            fd = os.open(lifecycle.state_root() / sandbox.id / "holder.json", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
