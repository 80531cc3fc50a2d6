"""Shared pieces of the benchmarks: a cheap tool-calling environment and measurement helpers."""

from __future__ import annotations

import itertools
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym import EnvSpec, StepResult, ToolTaskEnv, hookimpl, tool
from toolgym.core.registry import Registry
from toolgym.core.types import Action, ActionKind

CALL_TEXT = '<tool_call>\n{"name": "lookup", "arguments": {"key": "population of Paris"}}\n</tool_call>'


_lookups = itertools.count()


@tool
async def lookup(key: str) -> str:
    """Look a key up in a small in-memory table."""
    # every answer differs, as real tool outputs do, so no tokenizer cache can skip the work
    return f"{key}: 2,102,650 (2023 estimate, record {next(_lookups)})"


class BenchEnv(ToolTaskEnv):
    """Every turn the model calls ``lookup``; the episode ends after ``turns`` turns (or a number of
    turns drawn from the seed between ``min_turns`` and ``turns`` when ``vary`` is set)."""

    tools = [lookup]

    def __init__(self, turns: int = 8, vary: bool = False, min_turns: int = 1) -> None:
        super().__init__()
        self.turns, self.vary, self.min_turns = turns, vary, min_turns
        self.limit = turns
        self.n = 0

    def load_task(self, seed: int) -> Any:
        from toolgym.core.env.tool_task import Task

        return Task(id=str(seed), question=f"Find the population of Paris (task {seed}).", answer="2102650")

    async def reset(self, *, seed: int, options: Mapping[str, Any] | None = None) -> Any:
        self.n = 0
        self.limit = random.Random(seed).randint(self.min_turns, self.turns) if self.vary else self.turns
        return await super().reset(seed=seed, options=options)

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        self.n += 1
        if self.n >= self.limit or action.kind is not ActionKind.TOOL_CALLS:
            return StepResult(observation=[], reward=1.0, terminated=True, tool_calls=result.tool_calls)
        return result


class BenchPlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("bench", BenchEnv)]


def bench_registry() -> Registry:
    from toolgym.core.builtin import parsers as builtin

    return Registry.load(entry_points=False, plugins=[("parsers", builtin), ("bench", BenchPlugin())])


def rss_mb() -> float:
    """Current resident set size (MB)."""
    with open(f"/proc/{os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    """Peak resident set size (MB) of this process's own address space (``VmHWM``). Not
    ``ru_maxrss``: a process started by ``spawn`` inherits its parent's peak there (it is kept
    across ``exec``), so a child of a large parent would report the parent's size."""
    with open(f"/proc/{os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_toolgym(argv: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    """Run ``toolgym ARGV`` in a process of its own with its output in ``log``; the wall seconds.
    A failure stops the benchmark, quoting the log's end."""
    started = time.monotonic()
    with log.open("w") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "toolgym", *argv],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            check=False,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(
            f"`toolgym {' '.join(argv[:4])} ...` exited {done.returncode}; its log is {log}:\n{tail}"
        )
    return time.monotonic() - started
