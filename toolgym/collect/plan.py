"""The preamble every collection shares, local (``toolgym.collect.run``) or on Ray
(``toolgym.collect.ray.driver``): what to collect (``CollectOptions``), checking the output
directory against the run it already holds, planning the episodes (deterministic ids, prompt
deduplication, this process's shard), skipping the ids already written, and opening the store
(writer first: its lock refuses a second writer) with the run's manifest.

Ids are unique per run: the run key (:func:`run_settings` digested by
:func:`toolgym.core.rollout.requests.run_key`) is part of every group and trajectory id, and the manifest
keeps it (``run_key``, ``run_settings``). A directory written before run keys (its manifest has no
``run_key``) is resumed with the ids it was written with.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolgym.collect.guard import check_out_dir
from toolgym.collect.redact import redact_options, redact_url
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import EpisodeRequest, plan_episodes, trajectory_id
from toolgym.core.rollout.requests import run_key
from toolgym.trajectories.dedup import prompt_key
from toolgym.trajectories.store import (
    MANIFEST,
    TrajectoryWriter,
    completed_ids,
    data_files,
    quarantine_path,
    read_manifest,
    write_manifest,
)

FINGERPRINT_KEYS = ("env", "model", "group_size", "seed", "sampling", "env_kwargs", "first_task", "dedup")
_FINGERPRINT_DEFAULTS = {"dedup": "none"}  # keys added later: older manifests lack them


@dataclass
class CollectOptions:
    """What to collect. ``episodes`` counts task instances; each is run ``group_size`` times."""

    env: str
    out: Path
    model: str = "tiny"
    backend: str | None = None
    tokenizer: str | None = None
    episodes: int = 8
    first_task: int = 0
    group_size: int = 1
    """Episodes per task instance, all with the same environment seed (with ARPO: the initial ones)."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    sandbox_backend: str = "auto"
    """``auto`` (Docker when an engine answers, else local), a backend name, or ``none``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    backend_options: dict[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    shard: tuple[int, int] | None = None
    """``(k, n)``: this process collects shard ``k`` of ``n`` (0 ≤ k < n); None: everything."""
    dedup: Literal["none", "prompt"] = "none"
    """``prompt``: skip task instances whose initial prompt equals an earlier instance's."""
    max_requests_per_s: float | None = None
    """Model requests per second, this process (retries count); None: unlimited."""
    max_tokens_per_min: float | None = None
    """Prompt + completion tokens per minute, this process; None: unlimited."""
    fail_fast: int = 8
    """Stop when the first ``fail_fast`` episodes of the run all failed with the same error; 0: never."""
    unsafe_in_process_sandbox: bool = False
    """Let a sandbox backend that isolates nothing (``memory``: the model's code runs inside this
    process, beside your API keys and files) serve a model-driven collection; refused otherwise
    (:func:`toolgym.collect.guard.check_sandbox_isolation`). Scripted runs never need it."""
    parser: str | None = None
    """None: the environment's own tool-call parser; ``auto``: the model's format, read from its chat
    template, for environments that parse function calls (:mod:`toolgym.core.parsing.auto`); a
    parser's name: that parser in place of the environment's."""

    def __post_init__(self) -> None:
        moved = self.engine.moved_group_size()  # EngineConfig(group_size=...), deprecated: it warned
        if moved is not None:
            if self.group_size not in (1, moved):
                raise ConfigError(
                    f"group_size is given twice: {self.group_size} here and {moved} in the engine settings (deprecated there)"
                )
            self.group_size = moved
        if self.group_size < 1:
            raise ConfigError(f"--group-size must be at least 1, got {self.group_size}")


def fingerprint(opts: CollectOptions) -> dict[str, Any]:
    return {
        "env": opts.env,
        "model": redact_url(opts.model),
        "group_size": opts.group_size,
        "seed": opts.engine.seed,
        "sampling": opts.engine.sampling.model_dump(),
        "env_kwargs": opts.env_kwargs,
        "first_task": opts.first_task,
        "dedup": opts.dedup,
    }


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def weights_identity(model: str) -> str | None:
    """For a model given as a local directory: a digest of its weight files' names, sizes and
    modification times (cheap: no weight is read), so a checkpoint trained into the same directory
    is another run. None for a name (``tiny``, ``scripted``) or a server URL, whose weight version
    is not known before the first answer."""
    path = Path(model)
    if not path.is_dir():
        return None
    h = hashlib.blake2b(digest_size=8)
    for f in sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def run_settings(opts: CollectOptions) -> dict[str, Any]:
    """What defines a run's episodes, for its ids: the environment and its options, the model (its
    argument, backend, tokenizer, options with secrets blanked, local weights), the parser, the group
    size, the seed, the sampling, and the engine settings that change an episode (turn and token
    limits, history rewrites, ARPO). Not: concurrency, timeouts, retries, rate limits, the task range,
    shards or deduplication, which decide which episodes run or how fast, not what they are."""
    eng = opts.engine
    return {
        "env": opts.env,
        "env_kwargs": opts.env_kwargs,
        "model": redact_url(opts.model),
        "weights": weights_identity(opts.model),
        "backend": opts.backend,
        "tokenizer": opts.tokenizer,
        "backend_options": redact_options(opts.backend_options),
        "parser": opts.parser,
        "group_size": opts.group_size,
        "seed": eng.seed,
        "sampling": eng.sampling.model_dump(),
        "engine": {
            "max_turns": eng.max_turns,
            "max_tokens_per_turn": eng.max_tokens_per_turn,
            "max_tokens_per_trajectory": eng.max_tokens_per_trajectory,
            "on_rewrite": eng.on_rewrite,
            "arpo": eng.arpo.model_dump(),
        },
    }


def collection_run_key(opts: CollectOptions) -> str:
    """The run key of a fresh collection with these options (see :func:`run_settings`)."""
    return run_key(run_settings(opts))


def _resumed_run_key(opts: CollectOptions) -> str:
    """The run key to plan with: a fresh one, or "" for a directory written before run keys (its ids
    have none, and resuming must find them). ``prepare_output`` has refused a mismatch already."""
    old = read_manifest(opts.out) if opts.out.exists() else None
    if old is not None and "run_key" not in old:
        return ""
    return collection_run_key(opts)


def prepare_output(opts: CollectOptions) -> None:
    """Create, check or wipe the output directory; refuse to mix two different runs."""
    out = opts.out
    if opts.overwrite and opts.shard is not None:
        raise ConfigError(
            "--overwrite cannot be combined with --shard: it would delete what the other shards write; "
            "empty the directory once, then start the shards"
        )
    check_out_dir(out)
    if opts.overwrite and out.exists():
        files = [*data_files(out), *out.glob("failures*.jsonl")]
        for p in [*files, *map(quarantine_path, files), *out.glob("manifest-*.json"), out / MANIFEST]:
            p.unlink(missing_ok=True)
        shutil.rmtree(out / "artifacts", ignore_errors=True)
    old = read_manifest(out)
    if old is not None:
        new, was = fingerprint(opts), old.get("fingerprint", {})
        diff = [k for k in FINGERPRINT_KEYS if was.get(k, _FINGERPRINT_DEFAULTS.get(k)) != new[k]]
        if not diff and "run_key" in old and old["run_key"] != collection_run_key(opts):
            was_settings, now = old.get("run_settings", {}), run_settings(opts)
            diff = [k for k in now if was_settings.get(k) != now[k]] or ["run key"]
        if diff:
            raise ConfigError(
                f"{out} holds a different run (differs in: {', '.join(diff)}); "
                "use another --out, or --overwrite to replace it"
            )


async def drop_duplicate_prompts(
    requests: list[EpisodeRequest],
    opts: CollectOptions,
    registry: Registry,
    sandboxes: Any,
    *,
    concurrency: int = 16,
) -> tuple[list[EpisodeRequest], dict[str, Any]]:
    """Keep the requests of task instances whose initial prompt no earlier instance (in plan order)
    had. Resets each instance once to see its prompt; deterministic, so every shard agrees."""
    spec = registry.env(opts.env)
    groups = list(dict.fromkeys((r.group_id, r.seed) for r in requests))
    slots = asyncio.Semaphore(concurrency)

    async def key_of(group_id: str, seed: int) -> str:
        async with slots:
            env = spec.make(**opts.env_kwargs)
            ctx = EpisodeContext(episode_id=f"dedup-{group_id}", sandbox_backend=sandboxes, registry=registry)
            try:
                env.bind(ctx)
                messages, _ = await asyncio.wait_for(env.reset(seed=seed), opts.engine.env_timeout_s)
                return prompt_key(messages, [t.schema for t in env.tools])
            finally:
                with contextlib.suppress(Exception):
                    await env.close()
                await ctx.aclose()

    owner: dict[str, str] = {}
    dropped: list[dict[str, str]] = []
    for start in range(0, len(groups), 1024):  # bounded number of coroutines alive at once
        chunk = groups[start : start + 1024]
        keys = await asyncio.gather(*(key_of(g, s) for g, s in chunk))
        for (group_id, _), key in zip(chunk, keys, strict=True):
            first = owner.setdefault(key, group_id)
            if first != group_id:
                dropped.append({"group_id": group_id, "duplicate_of": first})
    gone = {d["group_id"] for d in dropped}
    kept = [r for r in requests if r.group_id not in gone]
    return kept, {
        "by": "prompt",
        "dropped_groups": len(gone),
        "dropped_trajectories": len(requests) - len(kept),
        "examples": dropped[:20],
    }


def stored_samples(
    requests: list[EpisodeRequest], done: set[str], opts: CollectOptions
) -> dict[str, list[int]]:
    """For an ARPO resume: the sample indices already stored of each group still to run (initial
    samples and forks; a fork's index is below twice the budget plus the initial count)."""
    arpo = opts.engine.arpo
    span = 2 * arpo.budget + max(arpo.initial, opts.group_size)
    out: dict[str, list[int]] = {}
    for group_id in {r.group_id for r in requests}:
        indices = [i for i in range(span) if trajectory_id(group_id, i) in done]
        if indices:
            out[group_id] = indices
    return out


@dataclass
class CollectPlan:
    """The episodes of one collection process."""

    planned: list[EpisodeRequest]
    """Every episode of the run, before deduplication and sharding."""
    requests: list[EpisodeRequest]
    """This process's episodes: deduplicated, of its shard."""
    done: set[str]
    """Trajectory ids the output directory already holds."""
    todo: list[EpisodeRequest]
    """``requests`` not yet in ``done``: what this run executes."""
    dedup: dict[str, Any] | None = None
    """What ``dedup="prompt"`` dropped (for the manifest); None without it."""
    run_key: str = ""
    """The key in every group and trajectory id ("" for a directory written before run keys)."""

    @property
    def duplicates(self) -> int:
        """Trajectories not run because their task instance repeated an earlier prompt."""
        return int(self.dedup["dropped_trajectories"]) if self.dedup else 0


def check_options(opts: CollectOptions, registry: Registry) -> None:
    """The checks every collection makes before anything else: a known environment, at least one
    episode, a known deduplication."""
    registry.env(opts.env)  # fail early on an unknown name
    if opts.episodes < 1:
        raise ConfigError("--episodes must be at least 1")
    if opts.dedup not in ("none", "prompt"):
        raise ConfigError(f"--dedup must be 'none' or 'prompt', got {opts.dedup!r}")


async def plan_collection(opts: CollectOptions, registry: Registry, sandboxes: Any) -> CollectPlan:
    """Check the options and the output directory (``prepare_output``), plan the episodes, drop
    repeated prompts (``sandboxes`` are where the instances reset for it), keep this process's
    shard and skip the ids already written. Call ``check_options`` first."""
    prepare_output(opts)
    key = _resumed_run_key(opts)
    planned = plan_episodes(
        opts.env,
        num_tasks=opts.episodes,
        group_size=opts.group_size,
        seed=opts.engine.seed,
        first_task=opts.first_task,
        run=key,
    )
    requests, dedup_info = planned, None
    if opts.dedup == "prompt":
        requests, dedup_info = await drop_duplicate_prompts(planned, opts, registry, sandboxes)
    if opts.shard is not None:
        k, n = opts.shard
        requests = [r for r in requests if r.task_index % n == k]
    done = completed_ids(opts.out) if opts.out.exists() else set()
    return CollectPlan(
        planned, requests, done, [r for r in requests if r.trajectory_id not in done], dedup_info, key
    )


def open_store(
    opts: CollectOptions,
    run: dict[str, Any],
    plan: CollectPlan,
    *,
    scrub: Callable[[bytes], bytes] | None = None,
) -> tuple[TrajectoryWriter, dict[str, Any]]:
    """Open this process's writer, then write the manifest: the run's (``run``, with the plan's
    dedup record) when unsharded; when sharded, the run's if none is there yet and this shard's own.
    Returns the writer and the manifest to finish (``state``, counts) at the end."""
    if plan.dedup is not None:
        run["dedup"] = plan.dedup
    if plan.run_key:
        run["run_key"], run["run_settings"] = plan.run_key, run_settings(opts)
    shard = opts.shard[0] if opts.shard else None
    writer = TrajectoryWriter(
        opts.out, shard=shard, scrub=scrub
    )  # first: its lock refuses a second writer of this shard
    if shard is None:
        manifest = {**run, "started_at": time.time(), "state": "running"}
        write_manifest(opts.out, manifest)
        return writer, manifest
    if read_manifest(opts.out) is None:
        write_manifest(opts.out, run)
    manifest = {
        "shard": shard,
        "num_shards": run["num_shards"],
        "planned_trajectories": len(plan.requests),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "toolgym_version": run["toolgym_version"],
        "started_at": time.time(),
        "state": "running",
    }
    write_manifest(opts.out, manifest, shard=shard)
    return writer, manifest
