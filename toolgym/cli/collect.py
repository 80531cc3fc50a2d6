"""``toolgym collect``: run episodes and store their trajectories."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer

from toolgym.cli.common import (
    MCP_ALLOW_HELP,
    MCP_HELP,
    err_console,
    key_values,
    name_mcp_servers,
    registry_or_exit,
    shown,
)
from toolgym.core.errors import ConfigError
from toolgym.core.util.terminal import visible

# EngineConfig / SamplingConfig / ArpoConfig field → the option that sets it (--group-size is the ARPO
# initial count's; CollectOptions checks it otherwise)
_FLAGS = {
    "max_live_episodes": "--concurrency",
    "max_llm_calls": "--llm-concurrency",
    "max_sandboxes": "--sandboxes",
    "llm_timeout_s": "--llm-timeout",
    "episode_timeout_s": "--episode-timeout",
    "max_turns": "--max-turns",
    "max_tokens_per_turn": "--max-tokens-per-turn",
    "max_tokens_per_trajectory": "--max-tokens-per-trajectory",
    "initial": "--group-size",
    "budget": "--arpo-budget",
    "on_rewrite": "--on-rewrite",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "top_k": "--top-k",
    "top_logprobs": "--top-logprobs",
}


def option_error(exc: Exception) -> ConfigError:
    """A pydantic ValidationError from the engine settings → one sentence naming the option."""
    first = exc.errors()[0]  # type: ignore[attr-defined]
    field = str(first.get("loc", ("?",))[-1])
    ctx = first.get("ctx") or {}
    if first.get("type") == "greater_than_equal":
        rule = f"must be at least {ctx.get('ge')}"
    elif first.get("type") == "less_than_equal":
        rule = f"must be at most {ctx.get('le')}"
    else:
        rule = str(first.get("msg", "is invalid")).replace("Input should be", "must be")
    return ConfigError(f"{_FLAGS.get(field, field)} {rule}, got {first.get('input')!r}")


def process_count(processes: str, *, concurrency: int, ray: str | None, shard: str | None) -> int:
    """``--processes``: ``auto`` or a count; more than one refuses ``--ray`` and ``--shard``."""
    from toolgym.collect.processes import auto_processes

    if processes.strip().lower() == "auto":
        return 1 if ray or shard else auto_processes(concurrency)
    try:
        n = int(processes)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"--processes takes a count of 1 or more, or auto; got {processes!r}")
    if n > 1 and (ray or shard):
        raise ConfigError(
            "--processes splits the run on this machine: it does not combine with --ray or --shard"
        )
    return n


def command(
    env: str = typer.Option(
        None, "--env", "--task", help="Environment or task name (see `toolgym envs list`)."
    ),
    model: str = typer.Option(
        "tiny",
        help="tiny | tiny-llama | tiny-<family> (qwen3, qwen3-coder, mistral, llama4) | scripted | sim[:LATENCY] | HF model dir | http(s)://server",
    ),
    backend: str = typer.Option(
        None,
        help="For a server URL: sglang (default), openai (completions with token ids) or openai-chat (text only).",
    ),
    tokenizer: str = typer.Option(
        None, help="Tokenizer dir (for servers and scripted runs; default: the model's own, or the tiny one)."
    ),
    episodes: int = typer.Option(
        8,
        "--tasks",
        "--episodes",
        "-n",
        help="Task instances to run; each is sampled --group-size times, so the run has "
        "tasks × group size episodes (--episodes is the old name of this option).",
    ),
    group_size: int = typer.Option(
        1, "--group-size", "-k", help="Samples per task instance (same environment seed)."
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Dataset directory (created; resumed if it holds the same run)."
    ),
    first_task: int = typer.Option(0, help="Index of the first task instance."),
    seed: int = typer.Option(0, help="Base seed: task i uses environment seed SEED+i."),
    max_turns: int = typer.Option(None, help="Turn limit per episode (default: the environment's own)."),
    max_tokens_per_turn: int = typer.Option(512, help="Sampled tokens per model call."),
    max_tokens_per_trajectory: int = typer.Option(8192, help="Context budget per token sequence."),
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling threshold."),
    top_k: int = typer.Option(0, help="Top-k truncation (0 = off)."),
    top_logprobs: int = typer.Option(0, help="Alternatives per position to record."),
    concurrency: int = typer.Option(32, help="Episodes running at once."),
    llm_concurrency: int = typer.Option(64, help="Model requests in flight at once."),
    sandboxes: int = typer.Option(16, help="Sandboxes held at once."),
    sandbox_backend: str = typer.Option(
        "auto",
        help="auto | docker | local | docker-hosts | none | memory (in-process test double: NO isolation, the model's code runs inside this process beside your API keys and files; refused unless --model scripted or --unsafe-in-process-sandbox).",
    ),
    unsafe_in_process_sandbox: bool = typer.Option(
        False,
        "--unsafe-in-process-sandbox",
        help="Let an in-process sandbox backend (memory) run a model's tool calls: no isolation at all; only for trusted models in tests.",
    ),
    episode_timeout: float = typer.Option(3600.0, help="Seconds per episode."),
    llm_timeout: float = typer.Option(300.0, help="Seconds per model call attempt."),
    on_rewrite: str = typer.Option(
        "new_sequence", help="When the chat template rewrites history: new_sequence | untrainable."
    ),
    arpo: bool = typer.Option(
        False,
        help="ARPO: fork episodes after tool results by entropy (needs --top-logprobs from the backend).",
    ),
    arpo_budget: int = typer.Option(
        16, help="ARPO: most trajectories per task (M); --group-size is the initial N."
    ),
    env_arg: list[str] = typer.Option(
        [], "--env-arg", help="KEY=VALUE passed to the environment (repeatable)."
    ),
    backend_arg: list[str] = typer.Option(
        [], "--backend-arg", help="KEY=VALUE passed to the model backend (repeatable)."
    ),
    overwrite: bool = typer.Option(False, help="Replace what --out holds instead of resuming it."),
    shard: str = typer.Option(
        None,
        "--shard",
        help="K/N: collect shard K of N (task index mod N = K) into --out beside the other shards.",
    ),
    dedup: str = typer.Option(
        "none",
        "--dedup",
        help="none | prompt: skip task instances whose initial prompt repeats an earlier one.",
    ),
    max_requests_per_s: float = typer.Option(
        None, "--max-requests-per-s", help="Rate limit on model requests per second (this process)."
    ),
    max_tokens_per_min: float = typer.Option(
        None, "--max-tokens-per-min", help="Rate limit on prompt+completion tokens per minute (this process)."
    ),
    ray: str = typer.Option(
        None,
        "--ray",
        help="Spread the episodes over Ray actors: auto (this machine's cluster) | HOST:PORT | ray://HOST:PORT | local (docs/scaling.md).",
    ),
    ray_workers: int = typer.Option(
        2,
        "--ray-workers",
        help="With --ray: rollout actors, each running --concurrency episodes with its own sandbox pool.",
    ),
    fail_fast: int = typer.Option(
        8, "--fail-fast", help="Stop when the first N episodes all fail with the same error (0: never)."
    ),
    processes: str = typer.Option(
        "auto",
        "--processes",
        help="N: split the run into N processes on this machine (shards of one dataset, one progress display); "
        "auto: one per 2,000 --concurrency, at most one per core (1 with --ray or --shard).",
    ),
    parser: str = typer.Option(
        None,
        "--parser",
        help="auto: parse tool calls in the model's own format, read from its chat template (docs/model_families.md) | NAME: this parser | default: the environment's.",
    ),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    mcp: list[str] = typer.Option(None, "--mcp", help=MCP_HELP),
    mcp_allow: list[str] = typer.Option(None, "--mcp-allow", help=MCP_ALLOW_HELP),
) -> None:
    """Run episodes of an environment with a model and store them as a trajectory dataset."""
    from pydantic import ValidationError

    from toolgym.collect.processes import ProcessesResult, collect_processes
    from toolgym.collect.run import CollectOptions, CollectResult, collect, parse_shard
    from toolgym.core.rollout.arpo import ArpoConfig
    from toolgym.core.rollout.config import EngineConfig, SamplingConfig

    if not env:
        raise ConfigError("give --env NAME (or --task NAME); `toolgym envs list` shows them")
    if fail_fast < 0:
        raise ConfigError(f"--fail-fast must be at least 0 (0 turns it off), got {fail_fast}")
    name_mcp_servers(mcp, mcp_allow)
    registry = registry_or_exit()
    try:
        engine = EngineConfig(
            max_live_episodes=concurrency,
            max_llm_calls=llm_concurrency,
            max_sandboxes=sandboxes,
            llm_timeout_s=llm_timeout,
            episode_timeout_s=episode_timeout,
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            max_tokens_per_trajectory=max_tokens_per_trajectory,
            seed=seed,
            on_rewrite=on_rewrite,  # type: ignore[arg-type]
            arpo=ArpoConfig(enabled=arpo, budget=max(arpo_budget, group_size), initial=group_size),
            sampling=SamplingConfig(
                temperature=temperature, top_p=top_p, top_k=top_k, top_logprobs=top_logprobs
            ),
        )
    except ValidationError as exc:
        raise option_error(exc) from None
    opts = CollectOptions(
        env=env,
        out=out,
        model=model,
        backend=backend,
        tokenizer=tokenizer,
        episodes=episodes,
        first_task=first_task,
        group_size=group_size,
        engine=engine,
        sandbox_backend=sandbox_backend,
        env_kwargs=key_values(env_arg, "--env-arg"),
        backend_options=key_values(backend_arg, "--backend-arg"),
        overwrite=overwrite,
        shard=parse_shard(shard) if shard else None,
        dedup=dedup,  # type: ignore[arg-type]
        max_requests_per_s=max_requests_per_s,
        max_tokens_per_min=max_tokens_per_min,
        fail_fast=fail_fast,
        parser=parser,
        unsafe_in_process_sandbox=unsafe_in_process_sandbox,
    )
    from toolgym import logs
    from toolgym.cli.progress import EngineProgress
    from toolgym.collect.guard import check_out_dir
    from toolgym.collect.redact import Scrubber

    check_out_dir(out)
    logs.add_scrubber(Scrubber.for_collection(model=model, backend_options=opts.backend_options).text)
    log_file = logs.log_to_file(out)  # every record at DEBUG, whatever the terminal shows
    logging.getLogger("toolgym.collect.run").info("collect %s with %s into %s", env, model, out)
    tasks = range(first_task, first_task + episodes)
    total = group_size * (
        len(tasks) if opts.shard is None else sum(1 for i in tasks if i % opts.shard[1] == opts.shard[0])
    )
    label = "episodes" if group_size == 1 else f"episodes ({total // group_size} tasks × {group_size})"
    n_processes = process_count(processes, concurrency=concurrency, ray=ray, shard=shard)
    if n_processes > 1:
        label += f" · {n_processes} processes"
    bar = EngineProgress(err_console(), total=total, enabled=progress, label=label)
    result: CollectResult | ProcessesResult
    with bar:
        if n_processes > 1:
            result = asyncio.run(collect_processes(opts, n_processes, on_progress=bar.update))
        elif ray:
            from toolgym.collect.ray import RayOptions, collect_ray

            ray_opts = RayOptions(address=ray, num_workers=ray_workers)
            result = asyncio.run(collect_ray(opts, ray_opts, registry=registry, on_progress=bar.update))
        else:
            result = asyncio.run(collect(opts, registry=registry, on_progress=bar.update, on_warm=bar.warm))
    c = err_console()
    for side in result.quarantined:
        c.print(f"[yellow]a damaged last record was moved to {side} and its episode collected again[/]")
    c.print(
        f"[bold]{result.written}[/] trajectories written, [red]{result.failed}[/] failed, "
        f"{result.skipped} already there · mean reward {result.stats.mean_reward:.3f} · "
        f"{result.elapsed_s:.1f}s → {shown(result.out)}",
        soft_wrap=True,  # a path is never broken across lines
    )
    c.print(f"log: {shown(log_file)}", soft_wrap=True)
    if (groups := result.stats.group_size_summary()) is not None:
        c.print(f"ARPO {groups}")
    if result.stats.forks_refused:
        c.print(
            f"[yellow]ARPO: {result.stats.forks_refused} forks refused: replaying their parent's tool calls did not give back "
            f"the recorded results (last: {shown(result.stats.fork_refused_reason)})[/]"
        )
    if ray:
        d = result.dispatch  # type: ignore[union-attr]
        c.print(
            f"ray: {ray_workers} workers · {d.worker_deaths} died, {d.replacements} replaced, {d.retried} episodes retried elsewhere"
        )
    if result.duplicates:
        c.print(
            f"{result.duplicates} trajectories not run: their task's prompt repeats an earlier task's (--dedup prompt)"
        )
    if result.failed:
        name = "failures.jsonl" if opts.shard is None else f"failures-{opts.shard[0]:05d}.jsonl"
        if n_processes > 1:
            name = "failures-*.jsonl"
        c.print(
            f"[yellow]failures and their reasons: {shown(result.out / name)} (run again to retry them)[/]",
            soft_wrap=True,
        )
    stopped = result.stopped or result.all_failed
    if stopped:
        typer.secho(f"error: {visible(stopped)}", fg="red", err=True)  # it quotes an episode's error
        raise typer.Exit(1)
