"""Collect trajectories into a dataset directory: the library side of ``toolgym collect``.

Resumable by construction: episode ids are derived from (environment, task index, seed, sample),
the store skips ids it already holds, and failed episodes (kept in ``failures*.jsonl``) are tried
again on the next run. SIGINT and SIGTERM cancel the run cleanly: episodes in flight release
their sandboxes, everything finished is on disk.

Sharding (``shard=(k, n)``): process ``k`` of ``n`` runs the task instances whose index is ``k``
modulo ``n`` (a group never straddles shards, so ARPO forks stay in their process), writes
``trajectories-<k>.jsonl`` / ``failures-<k>.jsonl`` and its own ``manifest-<k>.json``; the shared
``manifest.json`` describes the run and is written by whichever shard comes first (every shard
writes the same description, atomically). Resume works per shard, and since every shard skips
ids stored by any shard, a directory can be resumed under another shard count.

Deduplication: ids are unique per dataset by construction; ``dedup="prompt"`` also drops task
instances whose initial prompt equals an earlier one's (see :mod:`toolgym.trajectories.dedup`).
Rate limits (``max_requests_per_s``, ``max_tokens_per_min``) wrap every model call (see
:mod:`toolgym.core.ratelimit`); they are per process, so give each of ``n`` shards 1/n of the quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolgym.collect_guard import (
    RunGuard,
    check_env_kwargs,
    check_out_dir,
    check_sandbox_backend,
    unexpected_keyword,
)
from toolgym.core.chat import ChatFormat
from toolgym.core.config import EngineConfig
from toolgym.core.engine import EngineStats, EpisodeRequest, RolloutEngine, plan_episodes, trajectory_id
from toolgym.core.env import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.llm.base import ChatBackend, LLMBackend
from toolgym.core.parser_auto import AUTO as AUTO_PARSER
from toolgym.core.parser_auto import choose_parser, template_of, with_parser
from toolgym.core.policy import ChatPolicy, ModelPolicy, Policy, ScriptedPolicy
from toolgym.core.ratelimit import RateLimiter
from toolgym.core.registry import Registry, get_registry
from toolgym.core.sandbox import LazySandboxBackend
from toolgym.redact import Scrubber, redact_options, redact_url
from toolgym.trajectories.dedup import prompt_key
from toolgym.trajectories.provenance import code_version, distribution_of, runtime
from toolgym.trajectories.store import (
    MANIFEST,
    StoreWriteError,
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
    """What to collect. ``episodes`` counts task instances; each is run ``engine.group_size`` times."""

    env: str
    out: Path
    model: str = "tiny"
    backend: str | None = None
    tokenizer: str | None = None
    episodes: int = 8
    first_task: int = 0
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
    parser: str | None = None
    """None: the environment's own tool-call parser; ``auto``: the model's format, read from its chat
    template, for environments that parse function calls (:mod:`toolgym.core.parser_auto`); a
    parser's name: that parser in place of the environment's."""


@dataclass
class CollectResult:
    out: Path
    planned: int
    skipped: int
    written: int
    failed: int
    stats: EngineStats
    elapsed_s: float
    duplicates: int = 0
    """Trajectories not run because their task instance repeated an earlier prompt."""
    stopped: str | None = None
    """Why the run stopped before its end (every early episode failed alike); None when it did not."""
    all_failed: str | None = None
    """One sentence when the run went to its end but every episode of it failed; else None."""
    quarantined: list[Path] = field(default_factory=list)
    """Side files that received a damaged last record found on resume (its episode ran again)."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` → ``(K, N)`` with 0 ≤ K < N."""
    k, sep, n = text.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise ConfigError(f"--shard takes K/N with 0 ≤ K < N (e.g. 0/4 for the first of four), got {text!r}")
    return shard


def make_policy(model: str, *, backend: str | None, tokenizer: str | None, config: EngineConfig, options: dict[str, Any] | None = None) -> Policy:
    """Turn ``--model`` into a policy: ``scripted``, ``sim[:LATENCY]``, ``tiny``, a directory, a URL."""
    options = dict(options or {})
    try:
        return _make_policy(model, backend=backend, tokenizer=tokenizer, config=config, options=options)
    except TypeError as exc:
        key = unexpected_keyword(exc, options)
        if key is None:
            raise
        which = "simulated" if model.startswith("sim") else (backend or "default")
        raise ConfigError(f"--backend-arg {key}: the {which} model backend takes no option {key!r}; fix the spelling or drop it") from None


def _make_policy(model: str, *, backend: str | None, tokenizer: str | None, config: EngineConfig, options: dict[str, Any]) -> Policy:
    if model == "scripted":
        return ScriptedPolicy(ChatFormat(_tokenizer(tokenizer)))
    if model == "sim" or model.startswith("sim:"):
        from toolgym.core.llm.testing import SimulatedBackend

        latency = float(model.split(":", 1)[1]) if ":" in model else 0.05
        replay = options.pop("replay", None)
        if replay not in (None, "scripted"):
            raise ConfigError(f"--backend-arg replay={replay}: the simulated model replays only the env's scripted solver (replay=scripted)")
        if replay == "scripted":  # the env's solver turns (SWE: the gold patch through the tools), each after the latency
            return ScriptedPolicy(ChatFormat(_tokenizer(tokenizer)), latency_s=latency)
        return ModelPolicy(SimulatedBackend(tokenizer=_tokenizer(tokenizer), latency_s=latency, **options), config)
    try:
        from toolgym.core.llm.resolve import make_backend
    except ImportError as exc:  # pragma: no cover - only while the backends module is absent
        raise ConfigError(f"model backends are unavailable ({exc})") from None
    made = make_backend(model, backend, tokenizer=tokenizer, **options)
    if isinstance(made, ChatBackend):
        return ChatPolicy(made, config)
    if isinstance(made, LLMBackend):
        return ModelPolicy(made, config)
    raise ConfigError(f"backend for {model!r} is neither a token backend nor a chat backend")


def _tokenizer(path: str | None) -> Any:
    """The tokenizer for ``--tokenizer`` (default: the tiny model's), loaded without transformers
    when the directory has a fast tokenizer: scripted and simulated runs start in a fraction of a
    second."""
    from toolgym.core.llm.resolve import TINY
    from toolgym.core.tokenizer import load_tokenizer

    if path is None or path in TINY:
        from toolgym.core.llm.tiny import ensure_tiny_model

        return load_tokenizer(ensure_tiny_model(TINY[path or "tiny"], with_weights=False))  # type: ignore[arg-type]
    return load_tokenizer(path)


def _fingerprint(opts: CollectOptions) -> dict[str, Any]:
    return {
        "env": opts.env,
        "model": redact_url(opts.model),
        "group_size": opts.engine.group_size,
        "seed": opts.engine.seed,
        "sampling": opts.engine.sampling.model_dump(),
        "env_kwargs": opts.env_kwargs,
        "first_task": opts.first_task,
        "dedup": opts.dedup,
    }


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
        new, was = _fingerprint(opts), old.get("fingerprint", {})
        diff = [k for k in FINGERPRINT_KEYS if was.get(k, _FINGERPRINT_DEFAULTS.get(k)) != new[k]]
        if diff:
            raise ConfigError(
                f"{out} holds a different run (differs in: {', '.join(diff)}); "
                "use another --out, or --overwrite to replace it"
            )


def resolve_parser(opts: CollectOptions, registry: Registry, policy: Policy) -> tuple[Registry, str | None]:
    """Apply ``opts.parser``: the registry the engine should use, and the name of the parser that
    replaces the environment's (None when the environment's own stays)."""
    if not opts.parser:
        return registry, None
    if opts.parser != AUTO_PARSER:
        registry.parser(opts.parser)  # an unknown name fails here, listing the known ones
    env_parser = registry.env(opts.env).make(**opts.env_kwargs).parser
    chosen = choose_parser(opts.parser, env_parser, template_of(policy), registry)
    if chosen is None:
        return registry, None
    return with_parser(registry, env_parser, chosen), chosen.name


def _module_of(obj: Any) -> str:
    if isinstance(obj, str):
        return obj.partition(":")[0]
    return getattr(obj, "__module__", None) or type(obj).__module__


def describe_environment(opts: CollectOptions, registry: Registry) -> dict[str, Any]:
    """The environment and tools a run uses, with the packages (and versions) that provide them."""
    spec = registry.env(opts.env)
    module = _module_of(spec.entry)
    out: dict[str, Any] = {"name": opts.env, "plugin": spec.plugin, "entry": spec.entry if isinstance(spec.entry, str) else f"{module}:{getattr(spec.entry, '__qualname__', '?')}",
                           "package": distribution_of(module), "kwargs": opts.env_kwargs}
    try:  # an instance shows the tools actually bound (ToolTaskEnv looks some up by name)
        env = spec.make(**opts.env_kwargs)
        env.bind(EpisodeContext(episode_id="manifest", registry=registry))
        out["parser"] = env.parser
        out["num_tasks"] = env.num_tasks
        out["tools"] = [
            {"name": t.name, "plugin": getattr(t, "plugin", ""), "module": _module_of(t.fn), "package": distribution_of(_module_of(t.fn))}
            for t in env.tools
        ]
    except Exception as exc:  # describing must never stop a collection
        out["describe_error"] = f"{type(exc).__name__}: {exc}"
    return out


def describe_run(opts: CollectOptions, registry: Registry, policy: Policy, planned: int) -> dict[str, Any]:
    """The run-level manifest: what produced the dataset (identical for every shard)."""
    plugins = {}
    for name in sorted(registry.plugin_names):
        plugin = registry.pm.get_plugin(name)
        if plugin is None:  # blocked after registration: nothing of it runs
            continue
        module = plugin.__name__ if hasattr(plugin, "__file__") else type(plugin).__module__
        plugins[name] = {"module": module, "package": distribution_of(module)}
    return {
        "toolgym_version": code_version(),
        "fingerprint": _fingerprint(opts),
        "model_name": getattr(policy, "name", opts.model),
        "model": {"arg": opts.model, "name": getattr(policy, "name", opts.model), "backend": opts.backend,
                  "tokenizer": opts.tokenizer, "backend_options": redact_options(opts.backend_options)},
        "policy": policy.kind,
        "token_faithful": policy.token_faithful,
        "sampling": {**opts.engine.sampling.model_dump(), "max_tokens_per_turn": opts.engine.max_tokens_per_turn},
        "environment": describe_environment(opts, registry),
        "engine": opts.engine.model_dump(),
        "episodes": opts.episodes,
        "planned_trajectories": planned,
        "plugins": sorted(registry.plugin_names),
        "plugin_packages": plugins,
        "runtime": runtime(),
        "rate_limits": {"requests_per_s": opts.max_requests_per_s, "tokens_per_min": opts.max_tokens_per_min, "scope": "per process"},
        "num_shards": opts.shard[1] if opts.shard else 1,
    }


async def drop_duplicate_prompts(
    requests: list[EpisodeRequest], opts: CollectOptions, registry: Registry, sandboxes: Any, *, concurrency: int = 16
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
    return kept, {"by": "prompt", "dropped_groups": len(gone), "dropped_trajectories": len(requests) - len(kept), "examples": dropped[:20]}


def stored_samples(requests: list[EpisodeRequest], done: set[str], config: EngineConfig) -> dict[str, list[int]]:
    """For an ARPO resume: the sample indices already stored of each group still to run (initial
    samples and forks; a fork's index is below twice the budget plus the initial count)."""
    span = 2 * config.arpo.budget + max(config.arpo.initial, config.group_size)
    out: dict[str, list[int]] = {}
    for group_id in {r.group_id for r in requests}:
        indices = [i for i in range(span) if trajectory_id(group_id, i) in done]
        if indices:
            out[group_id] = indices
    return out


async def collect(
    opts: CollectOptions,
    *,
    registry: Registry | None = None,
    policy: Policy | None = None,
    on_progress: Callable[[EngineStats], None] | None = None,
    on_warm: Callable[[int, int, str, str], None] | None = None,
) -> CollectResult:
    """Run the collection; returns counts. Resumes whatever ``opts.out`` already holds.
    ``on_warm`` shows the warm-up of per-task images before the episodes (``RolloutEngine.on_warm``)."""
    registry = registry or get_registry()
    registry.env(opts.env)  # fail early on an unknown name
    if opts.episodes < 1:
        raise ConfigError("--episodes must be at least 1")
    if opts.dedup not in ("none", "prompt"):
        raise ConfigError(f"--dedup must be 'none' or 'prompt', got {opts.dedup!r}")
    check_env_kwargs(registry, opts.env, opts.env_kwargs)
    check_sandbox_backend(registry, opts.sandbox_backend)
    prepare_output(opts)
    sandboxes = None if opts.sandbox_backend == "none" else LazySandboxBackend(registry, opts.sandbox_backend)
    planned = plan_episodes(opts.env, num_tasks=opts.episodes, group_size=opts.engine.group_size, seed=opts.engine.seed, first_task=opts.first_task)
    requests, dedup_info = planned, None
    if opts.dedup == "prompt":
        requests, dedup_info = await drop_duplicate_prompts(planned, opts, registry, sandboxes)
    if opts.shard is not None:
        k, n = opts.shard
        requests = [r for r in requests if r.task_index % n == k]
    done = completed_ids(opts.out) if opts.out.exists() else set()
    todo = [r for r in requests if r.trajectory_id not in done]
    policy = policy or make_policy(opts.model, backend=opts.backend, tokenizer=opts.tokenizer, config=opts.engine, options=opts.backend_options)
    registry, parser_used = resolve_parser(opts, registry, policy)
    limiter = None
    if (opts.max_requests_per_s or opts.max_tokens_per_min) and not isinstance(policy, ScriptedPolicy):
        limiter = RateLimiter(requests_per_s=opts.max_requests_per_s, tokens_per_min=opts.max_tokens_per_min)
        policy.limiter = limiter
    run = describe_run(opts, registry, policy, len(planned))
    if parser_used is not None:
        run["environment"]["parser_used"] = parser_used
    if dedup_info is not None:
        run["dedup"] = dedup_info
    shard = opts.shard[0] if opts.shard else None
    scrubber = Scrubber.for_collection(model=opts.model, backend_options=opts.backend_options)
    run = scrubber.obj(run)
    writer = TrajectoryWriter(opts.out, shard=shard, scrub=scrubber.bytes)  # first: its lock refuses a second writer of this shard
    if shard is None:
        manifest = {**run, "started_at": time.time(), "state": "running"}
        write_manifest(opts.out, manifest)
    else:
        if read_manifest(opts.out) is None:
            write_manifest(opts.out, run)
        manifest = {"shard": shard, "num_shards": run["num_shards"], "planned_trajectories": len(requests),
                    "host": socket.gethostname(), "pid": os.getpid(), "toolgym_version": run["toolgym_version"],
                    "started_at": time.time(), "state": "running"}
        write_manifest(opts.out, manifest, shard=shard)
    me = asyncio.current_task()
    guard = RunGuard(writer.write, fail_fast=opts.fail_fast, stop=lambda: me and me.cancel(), failures_file=writer.failures_path.name,
                     scrub=scrubber.text)
    engine = RolloutEngine(
        registry=registry, policy=policy, config=opts.engine, sandbox_backend=sandboxes,  # type: ignore[arg-type]
        env_kwargs=opts.env_kwargs, artifacts_dir=str(opts.out / "artifacts"), on_trajectory=guard,
    )
    engine.on_warm = on_warm
    started = time.perf_counter()
    ticker: asyncio.Task[None] | None = None
    if on_progress is not None:
        async def tick() -> None:
            while True:
                on_progress(engine.stats)
                await asyncio.sleep(0.25)

        ticker = asyncio.create_task(tick())
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, lambda: me and me.cancel())
    state = "interrupted"
    stats = EngineStats()
    try:
        stats = await engine.run(todo, stored=stored_samples(todo, done, opts.engine) if opts.engine.arpo.enabled else None)
        state = "complete" if writer.failed == 0 else "complete_with_failures"
    except asyncio.CancelledError:
        if guard.reason is None or me is None:
            raise  # SIGTERM, or our caller cancelled us
        me.uncancel()  # the guard stopped the run; say why below
        state = "write_error" if guard.write_error is not None else "stopped"
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
        if ticker is not None:
            ticker.cancel()
            on_progress(engine.stats)  # type: ignore[misc]
        writer.close()
        if sandboxes is not None:
            await asyncio.shield(sandboxes.aclose())
        if hasattr(policy, "backend"):
            with contextlib.suppress(Exception):
                await policy.backend.aclose()  # type: ignore[union-attr]
        manifest.update(state=state, finished_at=time.time(), written=writer.written, failed=writer.failed)
        if limiter is not None:
            manifest["rate_limit_stats"] = {"requests": limiter.requests, "tokens": limiter.tokens, "waited_s": round(limiter.waited_s, 3)}
        if guard.reason is not None:
            manifest["stopped_because"] = guard.reason
        try:
            write_manifest(opts.out, scrubber.obj(manifest), shard=shard)
        except StoreWriteError:
            if guard.write_error is None:
                raise  # after a write error the disk is likely still full: report the first error
    if guard.write_error is not None:
        raise guard.write_error
    duplicates = dedup_info["dropped_trajectories"] if dedup_info else 0
    return CollectResult(opts.out, len(requests), len(requests) - len(todo), writer.written, writer.failed, stats,
                         time.perf_counter() - started, duplicates, stopped=guard.reason,
                         all_failed=None if guard.reason else guard.all_failed(), quarantined=writer.quarantined)

