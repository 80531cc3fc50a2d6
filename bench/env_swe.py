"""Benchmark: the SWE environment's per-step tool latency and per-task reset and grading time.

Per step, in one sandbox holding a shipped task's repository, interleaved round by round (so the
ratios hold on a busy machine): the ``bash`` tool (``git status``), the editor's ``view`` and a
``str_replace`` + ``undo_edit`` pair, ``search``, and the diff digest the environment computes
after an editing step (its anchor), each beside two baselines from the same run: a bare
``run(["true"])`` round trip and ``true`` in the persistent shell.

Per task: ``reset`` (checkout at the base commit) and grading (``evaluate`` of the gold patch:
fresh checkout, patches, tests, parsing) beside the baseline of running the same test command
alone on the repository already checked out.

    .venv/bin/python bench/env_swe.py [--backend docker|local] [--rounds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym.plugins.code.tools import bash
from toolgym.plugins.swe import harness, provision
from toolgym.plugins.swe.datasets import shipped_tasks
from toolgym.plugins.swe.tools import search, str_replace_editor
from toolgym.sandboxes import open_backend


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def line(name: str, samples: list[float], baseline: list[float] | None = None) -> None:
    text = f"{name:<38s} p50 {pct(samples, 50) * 1e3:8.1f} ms   p99 {pct(samples, 99) * 1e3:8.1f} ms   (n={len(samples)})"
    if baseline:
        text += f"   = {pct(samples, 50) / pct(baseline, 50):5.1f}x the baseline p50"
    print(text, flush=True)


async def timed(call: Callable[[], Awaitable[Any]], into: list[float]) -> Any:
    start = time.perf_counter()
    result = await call()
    into.append(time.perf_counter() - start)
    return result


async def steps(sb: Any, rounds: int) -> None:
    task = next(t for t in shipped_tasks() if t.instance_id == "toolgym__ledger-3")
    base = await harness.checkout(sb, task)
    shell = await sb.shell()
    await shell.run(f"cd {harness.WORKDIR}; export PYTHONPATH={provision.PYTEST_ZIP}")
    history: dict[str, list[str | None]] = {}

    class Ctx:
        async def resource(self, name: str, factory: Any, close: Any = None) -> Any:
            return history

    ctx = Ctx()
    path = f"{harness.WORKDIR}/ledger/money.py"
    names = [
        "baseline: run(['true'])",
        "baseline: shell 'true'",
        "bash tool: git status --short",
        "editor: view (40-line file)",
        "editor: str_replace + undo_edit",
        "search: 'Decimal' in repo",
        "diff digest (anchor, after an edit)",
    ]
    samples: dict[str, list[float]] = {n: [] for n in names}
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: sb.run(["true"]),
        lambda: shell.run("true"),
        lambda: bash.call({"command": "git status --short"}, sandbox=sb),
        lambda: str_replace_editor.call({"command": "view", "path": path}, sandbox=sb, ctx=ctx),
        lambda: _edit_and_undo(sb, ctx, path),
        lambda: search.call({"pattern": "Decimal"}, sandbox=sb),
        lambda: harness.diff_digest(sb, base),
    ]
    for call in calls:  # warm up
        await call()
    for _ in range(rounds):
        for name, call in zip(names, calls, strict=True):
            out = await timed(call, samples[name])
            assert not getattr(out, "error", False), (name, out)
    print("\n-- per step (one tool call through Tool.call, in the episode's sandbox) --")
    for name in names:
        line(name, samples[name], samples[names[1]] if not name.startswith("baseline") else None)


async def _edit_and_undo(sb: Any, ctx: Any, path: str) -> Any:
    out = await str_replace_editor.call(
        {
            "command": "str_replace",
            "path": path,
            "old_str": 'CENT = Decimal("0.01")',
            "new_str": 'CENT = Decimal("0.010")',
        },
        sandbox=sb,
        ctx=ctx,
    )
    assert not out.error, out.text
    return await str_replace_editor.call({"command": "undo_edit", "path": path}, sandbox=sb, ctx=ctx)


async def tasks(sb: Any) -> None:
    resets: list[float] = []
    grades: list[float] = []
    tests_only: list[float] = []
    unresolved = []
    for task in shipped_tasks():
        await timed(functools.partial(harness.checkout, sb, task), resets)
        command = " ".join([task.test_cmd, *task.test_directives()])
        await timed(
            functools.partial(sb.run, ["bash", "-c", command], env=provision.test_env(), cwd=harness.WORKDIR),
            tests_only,
        )
        result = await timed(functools.partial(harness.evaluate, sb, task, task.patch), grades)
        if not result.resolved:
            unresolved.append(task.instance_id)
    print(
        f"\n-- per task ({len(resets)} shipped tasks; gold patch resolved {len(resets) - len(unresolved)}) --"
    )
    line("baseline: the test command alone", tests_only)
    line("reset: checkout at the base commit", resets, tests_only)
    line("grading: evaluate(gold patch)", grades, tests_only)
    print(
        f"grading overhead over the bare test run: p50 {(pct(grades, 50) - pct(tests_only, 50)) * 1e3:.0f} ms; "
        f"mean grading {statistics.mean(grades):.2f} s"
    )
    assert not unresolved, unresolved


async def main(backend_name: str, rounds: int) -> None:
    backend = open_backend(backend_name)
    try:
        sb = await backend.acquire("shell", episode_id="bench")
        try:
            print(f"== swe environment, {backend_name} backend ==")
            await steps(sb, rounds)
            await tasks(sb)
        finally:
            await backend.release(sb)
    finally:
        await backend.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    asyncio.run(main(args.backend, args.rounds))
