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
The shared preamble (options, output checks, planning, resume, opening the store) is in
:mod:`toolgym.collect.plan`, which ``toolgym.collect.ray.driver`` uses too.
Rate limits (``max_requests_per_s``, ``max_tokens_per_min``) wrap every model call (see
:mod:`toolgym.core.util.ratelimit`); they are per process, so give each of ``n`` shards 1/n of the quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.collect.guard import (
    RunGuard,
    apply_scripted_defaults,
    check_env_kwargs,
    check_sandbox_backend,
    check_sandbox_isolation,
    check_scripted_solver,
)
from toolgym.collect.plan import (
    CollectOptions,
    check_options,
    fingerprint,
    open_store,
    plan_collection,
    stored_samples,
)
from toolgym.collect.redact import Scrubber, redact_options
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.parsing.auto import AUTO as AUTO_PARSER
from toolgym.core.parsing.auto import choose_parser, template_of, with_parser
from toolgym.core.registry import Registry, get_registry
from toolgym.core.rollout.engine import EngineStats, RolloutEngine
from toolgym.core.rollout.policies import make_policy
from toolgym.core.rollout.policy import Policy, ScriptedPolicy
from toolgym.core.sandbox import lazy_sandbox_backend
from toolgym.core.util.ratelimit import RateLimiter
from toolgym.trajectories.provenance import code_version, distribution_of, runtime
from toolgym.trajectories.store import StoreWriteError, write_manifest


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
    out: dict[str, Any] = {
        "name": opts.env,
        "plugin": spec.plugin,
        "entry": spec.entry
        if isinstance(spec.entry, str)
        else f"{module}:{getattr(spec.entry, '__qualname__', '?')}",
        "package": distribution_of(module),
        "kwargs": opts.env_kwargs,
    }
    try:  # an instance shows the tools actually bound (ToolTaskEnv looks some up by name)
        env = spec.make(**opts.env_kwargs)
        env.bind(EpisodeContext(episode_id="manifest", registry=registry))
        out["parser"] = env.parser
        out["num_tasks"] = env.num_tasks
        out["tools"] = [
            {
                "name": t.name,
                "plugin": getattr(t, "plugin", ""),
                "module": _module_of(t.fn),
                "package": distribution_of(_module_of(t.fn)),
            }
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
        "fingerprint": fingerprint(opts),
        "model_name": getattr(policy, "name", opts.model),
        "model": {
            "arg": opts.model,
            "name": getattr(policy, "name", opts.model),
            "backend": opts.backend,
            "tokenizer": opts.tokenizer,
            "backend_options": redact_options(opts.backend_options),
        },
        "policy": policy.kind,
        "token_faithful": policy.token_faithful,
        "sampling": {
            **opts.engine.sampling.model_dump(),
            "max_tokens_per_turn": opts.engine.max_tokens_per_turn,
        },
        "environment": describe_environment(opts, registry),
        "engine": opts.engine.model_dump(),
        "episodes": opts.episodes,
        "planned_trajectories": planned,
        "plugins": sorted(registry.plugin_names),
        "plugin_packages": plugins,
        "runtime": runtime(),
        "rate_limits": {
            "requests_per_s": opts.max_requests_per_s,
            "tokens_per_min": opts.max_tokens_per_min,
            "scope": "per process",
        },
        "num_shards": opts.shard[1] if opts.shard else 1,
    }


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
    check_options(opts, registry)
    check_env_kwargs(registry, opts.env, opts.env_kwargs)
    apply_scripted_defaults(registry, opts)
    check_scripted_solver(registry, opts)
    check_sandbox_backend(registry, opts.sandbox_backend)
    check_sandbox_isolation(registry, opts, policy)
    sandboxes = lazy_sandbox_backend(registry, opts.sandbox_backend)
    plan = await plan_collection(opts, registry, sandboxes)
    done, todo = plan.done, plan.todo
    if policy is None:
        # off the event loop: a server's client asks it for its model and context length with blocking
        # requests (10 s timeouts), and a server answering on this loop, or a slow one, would stall it
        policy = await asyncio.to_thread(
            make_policy,
            opts.model,
            backend=opts.backend,
            tokenizer=opts.tokenizer,
            config=opts.engine,
            options=opts.backend_options,
        )
    registry, parser_used = resolve_parser(opts, registry, policy)
    limiter = None
    if (opts.max_requests_per_s or opts.max_tokens_per_min) and not isinstance(policy, ScriptedPolicy):
        limiter = RateLimiter(requests_per_s=opts.max_requests_per_s, tokens_per_min=opts.max_tokens_per_min)
        policy.limiter = limiter
    run = describe_run(opts, registry, policy, len(plan.planned))
    if parser_used is not None:
        run["environment"]["parser_used"] = parser_used
    shard = opts.shard[0] if opts.shard else None
    scrubber = Scrubber.for_collection(model=opts.model, backend_options=opts.backend_options)
    writer, manifest = open_store(opts, scrubber.obj(run), plan, scrub=scrubber.bytes)
    me = asyncio.current_task()
    guard = RunGuard(
        writer.write,
        fail_fast=opts.fail_fast,
        stop=lambda: me and me.cancel(),
        failures_file=writer.failures_path.name,
        scrub=scrubber.text,
    )
    engine = RolloutEngine(
        registry=registry,
        policy=policy,
        config=opts.engine,
        sandbox_backend=sandboxes,  # type: ignore[arg-type]
        env_kwargs=opts.env_kwargs,
        artifacts_dir=str(opts.out / "artifacts"),
        on_trajectory=guard,
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
        stats = await engine.run(
            todo, stored=stored_samples(todo, done, opts) if opts.engine.arpo.enabled else None
        )
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
            manifest["rate_limit_stats"] = {
                "requests": limiter.requests,
                "tokens": limiter.tokens,
                "waited_s": round(limiter.waited_s, 3),
            }
        if guard.reason is not None:
            manifest["stopped_because"] = guard.reason
        try:
            write_manifest(opts.out, scrubber.obj(manifest), shard=shard)
        except StoreWriteError:
            if guard.write_error is None:
                raise  # after a write error the disk is likely still full: report the first error
    if guard.write_error is not None:
        raise guard.write_error
    return CollectResult(
        opts.out,
        len(plan.requests),
        len(plan.requests) - len(todo),
        writer.written,
        writer.failed,
        stats,
        time.perf_counter() - started,
        plan.duplicates,
        stopped=guard.reason,
        all_failed=None if guard.reason else guard.all_failed(),
        quarantined=writer.quarantined,
    )
