"""One collection over several processes on this machine: ``toolgym collect --processes N``.

One asyncio engine tops out near one core (about 0.17 ms of CPU per turn: rendering the chat template,
tokenizing the delta, parsing, tools), so tens of thousands of live episodes against a fast model
leave the other cores idle. Here process ``k`` of ``N`` collects shard ``k/N`` of the run
(:mod:`toolgym.collect.run`: task index ``k`` modulo ``N``, its own ``trajectories-<k>.jsonl``) into
the same directory, with ``1/N`` of the episodes, model calls, sandboxes and rate limits each. The
directory is one dataset, as with ``--shard``: readers see every shard's file, ids are the run's
(shards never overlap), and a rerun resumes, under any process count. The parent shows one progress
display, summed over the processes (each sends its counters four times a second), and one summary.

Processes are started with ``spawn`` (a clean interpreter: no event loop, threads or sandboxes
inherited). Each logs to ``toolgym-<k>.log`` in the output directory. Ctrl-C or SIGTERM in the
parent stops every process, which close their sandboxes and keep what they finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgym.collect.plan import CollectOptions
from toolgym.core.errors import ConfigError, ToolgymError
from toolgym.core.rollout.stats import EngineStats

AUTO_EPISODES_PER_PROCESS = 2000
"""``processes="auto"`` starts one process per this many live episodes (``--concurrency``), at most
one per core: below it one engine keeps up (2,000 episodes at 2 s per model call are 1,000 turns a
second, about a third of a core; ``bench/engine_efficiency.py``)."""


def auto_processes(concurrency: int, cpus: int | None = None) -> int:
    """The process count ``--processes auto`` picks for ``concurrency`` live episodes."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, min(cpus, math.ceil(concurrency / AUTO_EPISODES_PER_PROCESS)))


def shard_options(opts: CollectOptions, k: int, n: int) -> CollectOptions:
    """Process ``k``'s share of the run: shard ``k/n`` and ``1/n`` of every per-process budget."""
    engine = opts.engine.model_copy(
        update={
            "max_live_episodes": max(1, math.ceil(opts.engine.max_live_episodes / n)),
            "max_llm_calls": max(1, math.ceil(opts.engine.max_llm_calls / n)),
            "max_sandboxes": max(1, math.ceil(opts.engine.max_sandboxes / n)),
        }
    )
    return dataclasses.replace(
        opts,
        engine=engine,
        shard=(k, n),
        max_requests_per_s=opts.max_requests_per_s / n if opts.max_requests_per_s else None,
        max_tokens_per_min=opts.max_tokens_per_min / n if opts.max_tokens_per_min else None,
    )


@dataclasses.dataclass
class ProcessesResult:
    """What the processes did together (the fields the CLI's summary reads from a ``CollectResult``)."""

    out: Path
    processes: int
    planned: int = 0
    skipped: int = 0
    written: int = 0
    failed: int = 0
    duplicates: int = 0
    elapsed_s: float = 0.0
    stats: EngineStats = dataclasses.field(default_factory=EngineStats)
    stopped: str | None = None
    all_failed: str | None = None
    quarantined: list[Path] = dataclasses.field(default_factory=list)


EMPTY: dict[str, Any] = {
    "planned": 0,
    "skipped": 0,
    "written": 0,
    "failed": 0,
    "duplicates": 0,
    "stopped": None,
    "all_failed": None,
    "quarantined": [],
}
"""The summary of a process stopped before it could send its own (its shard resumes on a rerun)."""


def merge_stats(parts: list[EngineStats], started_at: float) -> EngineStats:
    """One display's counters from each process's latest ones."""
    out = EngineStats(started_at=started_at)
    for s in parts:
        out.total += s.total
        out.done += s.done
        out.running += s.running
        out.failed += s.failed
        out.reward_sum += s.reward_sum
        out.generated_tokens += s.generated_tokens
        out.turns += s.turns
        out.forks_refused += s.forks_refused
        out.fork_refused_reason = s.fork_refused_reason or out.fork_refused_reason
        out.group_sizes.update(s.group_sizes)
    return out


def _child(opts: CollectOptions, k: int, n: int, messages: Any) -> None:
    """Process ``k``: collect shard ``k/n``, sending counters and, at the end, its result."""
    from toolgym import logs
    from toolgym.collect.run import collect
    from toolgym.core.registry import get_registry

    logs.log_to_file(opts.out, f"toolgym-{k}.log")
    last = [0.0]

    def progress(stats: EngineStats) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.25:
            last[0] = now
            messages.put(("stats", k, dataclasses.replace(stats, group_sizes=dict(stats.group_sizes))))

    try:
        result = asyncio.run(
            collect(shard_options(opts, k, n), registry=get_registry(), on_progress=progress)
        )
    except BaseException as exc:
        messages.put(("error", k, f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    summary = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name != "stats"}
    messages.put(("stats", k, result.stats))
    messages.put(("done", k, summary))


async def collect_processes(
    opts: CollectOptions, processes: int, *, on_progress: Callable[[EngineStats], None] | None = None
) -> ProcessesResult:
    """Run the collection as ``processes`` processes of one shard each (see the module docstring)."""
    if processes < 2:
        raise ConfigError(f"collect_processes runs 2 or more processes, got {processes}: call collect()")
    if opts.shard is not None:
        raise ConfigError("--processes splits the run into shards itself: drop --shard")
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(opts, k, processes, messages), daemon=False)
        for k in range(processes)
    ]
    started = time.perf_counter()
    latest: dict[int, EngineStats] = {}
    finished: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    stopping: set[int] = set()
    """Processes told to stop because another one's fail-fast guard stopped the run."""
    for p in procs:
        p.start()
    try:
        while len(finished) + len(errors) < processes:
            try:
                kind, k, payload = await asyncio.to_thread(messages.get, True, 0.25)
            except queue.Empty:
                dead = [
                    k
                    for k, p in enumerate(procs)
                    if not p.is_alive() and k not in finished and k not in errors
                ]
                for k in dead:  # a process that died without a word (killed, out of memory)
                    await asyncio.sleep(0.5)  # its last messages may still be in the pipe
                    if k not in finished and k not in errors and messages.empty():
                        if k in stopping:
                            finished[k] = {**EMPTY, "stopped": "stopped with the run"}
                        else:
                            errors[k] = f"process {k} exited with code {procs[k].exitcode} before it finished"
                continue
            if kind == "stats":
                latest[k] = payload
                if on_progress is not None and len(latest) == processes:  # totals known for all
                    on_progress(merge_stats(list(latest.values()), started))
            elif kind == "done":
                finished[k] = payload
                if payload["stopped"] and not stopping:  # fail-fast in one shard stops the whole run
                    stopping.update(j for j, p in enumerate(procs) if p.is_alive() and j != k)
                    for j in stopping:
                        procs[j].terminate()
            elif k in stopping:
                finished[k] = {**EMPTY, "stopped": "stopped with the run"}
            else:
                errors[k] = payload
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: collect() cancels cleanly and keeps what it finished
        for p in procs:
            await asyncio.to_thread(p.join, 30)
            if p.is_alive():
                p.kill()
        with contextlib.suppress(Exception):
            messages.close()
    if errors:
        first = min(errors)
        raise ToolgymError(
            f"{len(errors)} of {processes} collection processes failed; process {first}: {errors[first]} "
            f"(its log: {opts.out / f'toolgym-{first}.log'}; run the command again to resume)"
        )
    result = ProcessesResult(
        opts.out,
        processes,
        stats=merge_stats(list(latest.values()), started),
        elapsed_s=time.perf_counter() - started,
    )
    for k in sorted(finished):
        summary = finished[k]
        for name in ("planned", "skipped", "written", "failed", "duplicates"):
            setattr(result, name, getattr(result, name) + summary[name])
        if summary["stopped"] and k not in stopping:
            result.stopped = result.stopped or summary["stopped"]
        result.quarantined += summary["quarantined"]
    fails = [s["all_failed"] for s in finished.values()]
    if fails and all(fails):
        result.all_failed = fails[0]
    return result
