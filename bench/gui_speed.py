"""GUI speed and scale on MiniWoB++: the cost of one browser step, and concurrent episodes on this host.

**Step latency** (``--calls`` per kind, interleaved so that every column sees the same host load),
in one Docker ``miniwob`` sandbox on a MiniWoB++ page started as an episode (page time limit lifted
so the page stays live): ``click`` toggles a click-checkboxes checkbox, ``type`` fills enter-text's
textbox. Columns, p50 / p99 in ms:

- ``env step``: ``MiniWoBEnv.step`` with that tool call: the tool, then the environment's read of
  the page's result (what a rollout pays per turn);
- ``tool``: the browser tool alone (``Tool.call``: one driver cell that acts, settles and observes
  the page as an accessibility tree);
- ``direct``: a baseline: the same Playwright action (``locator.click()`` / ``locator.fill()``)
  sent as one cell to the same browser, through the same sandbox channel, no observation (in the
  driver's session, so with its cheaper Playwright call overhead, ``pwstack.py``);
- ``bare``: bare Playwright: a second sandbox of the same image runs Playwright as installed in a
  Python session of its own (no driver, no patch), with its own Chromium (the driver's flags) on
  the same task page started the same way, and the same action on a CSS locator, one cell each,
  through the same kind of channel;
- ``in-sandbox`` / ``bare in-sandbox``: those two actions timed inside their sandboxes (no channel).

Then each step's p50 over each baseline's (the target: within 1.5x of bare Playwright). The columns
run one after another, each after a random wait of up to one 60 Hz frame (seeded): an action's
latency moves in whole frames with the point of the frame it starts at, and without the wait each
column would keep the phase the columns before it left (``--no-jitter``: that way, as the rows
before the wait). ``--gap-ms`` waits that long more before each (as a model call would: the page
then has no frame under way when the action starts).

**Reset** (browser sandboxes keep their browser), one episode at a time in one pooled
``miniwob`` sandbox, ``--resets`` episodes per column, p50 / p90 in ms of ``MiniWoBEnv.reset``
(acquire from the pool, open the task page, start the task, first observation; the pool's own
reset between episodes runs in the background and is not counted, as in a rollout):

- ``kept``: the pool as it is: Playwright and Chromium stay, each episode gets a fresh context;
- ``warm baseline``: in a sandbox whose Chromium runs, a fresh context and page made in one cell
  (no pool, no checks) then the same ``reset`` on it: the floor for any kept-browser design;
- ``old path``: the same pool with the kept session given up before release, as every reset was
  before: the next episode starts Playwright and Chromium again, and the Chromium is the full
  ``/usr/bin/chromium`` the tools launched then (``--old-chromium``; the tools now launch
  ``chromium-headless-shell``, which is cheaper to start and to open a context in).

**Concurrency**: ``--episodes`` scripted episodes over ``--tasks`` at 1, 8 and 16 at once (one
sandbox, so one Chromium, per live episode), through the rollout engine: success (core.js's raw
reward > 0), wall time, episodes/s, and the peak memory of the run's sandbox containers (cgroup v1
``usage - inactive_file``, as ``docker stats`` counts it), sampled every 0.5 s, and per sandbox
(the pool keeps up to that many warm ones too, so sandboxes at the peak can exceed live episodes).
``CPU s/ep``: CPU time of the run's containers (cgroup ``cpuacct``) and of this process (the
engine, the MiniWoB server, the egress proxy) per episode: what an episode costs the host whatever
else runs on it (episodes per second on 2 otherwise idle cores are about 2 / that).
Each level runs on the pool as it is (``kept``) and, with ``--old-path``, again with every
browser restarted at each reset and the old executable (``old``), in the same run, ``--repeat`` pairs per level; each pair
prints kept / old episodes per second. Wall time runs from the first episode's start to the last's
end (not the pool's teardown). ``--warm`` first runs as many untimed episodes as run at once on
each row's pool, so that the timed ones find every sandbox made (and, kept, its browser started):
the steady state of a run much longer than one episode per sandbox. Without it, each kept
sandbox's first episode starts its Chromium, as on the old path (with 32 episodes at 16 at once,
half of them). The load average is printed before and after each row (the host is shared).

    python bench/gui_speed.py                   # latency (60 calls each) and concurrency 1/8/16
    python bench/gui_speed.py --smoke           # 10 calls, concurrency 1 and 2, 4 episodes
    python bench/gui_speed.py --skip latency --resets 20 --levels 8 --episodes 24 --old-path
    python bench/gui_speed.py --skip latency --resets 0 --levels 8,16 --episodes 32 --old-path --warm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import Action, ActionKind, ToolCall
from toolgym.plugins.gui.tools import DRIVER, BrowserConfig, driver_session
from toolgym.plugins.miniwob.env import _START, BROWSER, MINIWOB_TOOLS, MiniWoBEnv
from toolgym.plugins.miniwob.site import SANDBOX_KIND, shared_site
from toolgym.plugins.miniwob.tasks import task_list
from toolgym.sandboxes.docker.backend import DockerBackend

TOOLS = {t.name: t for t in MINIWOB_TOOLS}
COLUMNS = ("env step", "tool", "direct", "bare", "in-sandbox", "bare in-sandbox")
"""The step-latency columns (see the module docstring)."""
CGROUP = Path("/sys/fs/cgroup/memory/docker")
CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def element(text: str, role: str) -> int:
    line = next(ln for ln in text.splitlines() if f"] {role}" in ln)
    return int(line.split("]")[0].split("[")[1])


# -- step latency ----------------------------------------------------------------------------------

BARE_SETUP = """
import json as _json, os as _os, time as _time
from playwright.sync_api import sync_playwright as _sync_playwright
_pw = _sync_playwright().start()
_proxy = _os.environ.get("HTTP_PROXY")
_browser = _pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS,
                               proxy={"server": _proxy} if _proxy else None)
_page = _browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}).new_page()
_page.goto(URL, wait_until="load")
_page.evaluate(START)
_target = _page.locator(SELECTOR).first
"""
"""The bare-Playwright baseline's set-up, in a Python session of its own sandbox: Playwright as
installed (no driver, none of its patches), its own Chromium with the driver's flags, the same
task page started the same way."""


def bare_setup(task: str, selector: str) -> str:
    start = (
        _START.replace("SEED", "1")
        .replace("NONCE", json.dumps("bare"))
        .replace("LIMIT", json.dumps(3600 * 1000))
    )
    values = {
        "CHROMIUM": BROWSER.chromium,
        "ARGS": list(BROWSER.chromium_args),
        "WIDTH": BROWSER.width,
        "HEIGHT": BROWSER.height,
        "URL": shared_site().task_url(task),
        "START": start,
        "SELECTOR": selector,
    }
    code = BARE_SETUP
    for name, value in values.items():
        code = code.replace(name, repr(value) if isinstance(value, str) else json.dumps(value))
    return code


FRAME_S = 1 / 60
"""One frame of Chromium's 60 Hz headless compositor: an action's latency depends on where in it the action starts."""


async def latency(
    calls: int, gap_s: float, jitter: bool = True
) -> tuple[dict[str, dict[str, list[float]]], dict[str, Counter[str]]]:
    """The columns' times by kind of action, and how each timed tool call's observation read the
    accessibility tree (the driver's ``observed_by``: ``tree`` whole, or only the typed ``field``)."""
    shared_site()  # registers the sandbox profile (allowlist: this server) before the backend reads it
    out: dict[str, dict[str, list[float]]] = {}
    reads: dict[str, Counter[str]] = {}
    for kind, task, role, selector in (
        ("click", "click-checkboxes", "checkbox", "input[type=checkbox]"),
        ("type", "enter-text", "textbox", "input[type=text]"),
    ):
        backend = DockerBackend(max_idle=2)  # fresh sandboxes for each page
        try:
            env = MiniWoBEnv(task=task, time_limit=3600, max_turns=10**6)
            ctx = EpisodeContext(episode_id=f"bench-{kind}", sandbox_backend=backend, registry=get_registry())
            env.bind(ctx)
            try:
                messages, _ = await env.reset(seed=1)
                target = element(str(messages[-1]["content"]), role)
                sandbox = await ctx.sandbox(SANDBOX_KIND)
                session = await driver_session(sandbox)
                name = "browser_click" if kind == "click" else "browser_type"
                args: dict[str, Any] = (
                    {"element_id": target} if kind == "click" else {"element_id": target, "text": "hello"}
                )
                act = "click()" if kind == "click" else "fill('hello')"
                direct = (
                    f"import time as _t\n_t0 = _t.perf_counter()\n"
                    f"{DRIVER}.page.locator('[data-tg-id=\"{target}\"]').first.{act}\n_t.perf_counter() - _t0"
                )
                bare_box = await backend.acquire(SANDBOX_KIND)
                bare = await bare_box.python()
                made = await bare.execute(bare_setup(task, selector), timeout=120)
                assert made.error is None, made.error
                bare_act = f"_t0 = _time.perf_counter()\n_target.{act}\n_time.perf_counter() - _t0"
                rows: dict[str, list[float]] = {c: [] for c in COLUMNS}
                read = reads[kind] = Counter()
                phase = random.Random(0)

                async def before_action(phase: random.Random = phase) -> None:
                    # with --gap-ms, each action finds its page idle, as after a model call; the jitter starts
                    # each at a random point of the frame (back to back, a column would keep one phase: a
                    # click then takes one frame or two by the luck of the column before it)
                    await asyncio.sleep(gap_s + phase.uniform(0, FRAME_S) * jitter)

                for i in range(calls + 3):  # the first 3 are warm-up
                    call = ToolCall(name=name, arguments=args)
                    took: dict[str, float] = {}
                    await before_action()
                    t0 = time.perf_counter()
                    await env.step(Action(text="", kind=ActionKind.TOOL_CALLS, tool_calls=[call]))
                    took["env step"] = time.perf_counter() - t0
                    await before_action()
                    t0 = time.perf_counter()
                    out_tool = await TOOLS[name].call(args, sandbox=sandbox, ctx=ctx)
                    took["tool"] = time.perf_counter() - t0
                    how = await session.execute(f"{DRIVER}.observed_by", timeout=30)
                    await before_action()
                    t0 = time.perf_counter()
                    res = await session.execute(direct, timeout=30)
                    took["direct"] = time.perf_counter() - t0
                    await before_action()
                    t0 = time.perf_counter()
                    plain = await bare.execute(bare_act, timeout=30)
                    took["bare"] = time.perf_counter() - t0
                    assert not out_tool.error and res.error is None, (out_tool.text[:200], res.error)
                    assert plain.error is None, plain.error
                    if i >= 3:
                        for column, seconds in took.items():
                            rows[column].append(seconds * 1e3)
                        rows["in-sandbox"].append(float(res.value or "nan") * 1e3)
                        rows["bare in-sandbox"].append(float(plain.value or "nan") * 1e3)
                        read[str(how.value).strip("'")] += 1
                out[kind] = rows
                await backend.release(bare_box)
            finally:
                await ctx.aclose()
        finally:
            await backend.aclose()
    return out, reads


# -- reset -----------------------------------------------------------------------------------------


class OldPathBackend(DockerBackend):
    """The pool as it was before browser sandboxes kept their browser: each reset kills the browser with everything else."""

    async def release(self, sandbox: Any, *, broken: bool = False) -> None:  # type: ignore[override]
        sandbox.keep_cell = None  # the kept session is given up: the reset kills it
        await super().release(sandbox, broken=broken)


OLD_CHROMIUM = "/usr/bin/chromium"
"""The executable the browser tools launched before ``chromium-headless-shell``: the full browser."""


@contextmanager
def launching(executable: str | None) -> Iterator[None]:
    """Drivers installed meanwhile launch ``executable`` (None: the tools' own), whatever the
    environment's ``BrowserConfig`` says: the old path's browser, without a second environment."""
    if executable is None:
        yield
        return
    own = BrowserConfig.driver_config

    def driver_config(self: BrowserConfig) -> dict[str, Any]:
        return {**own(self), "chromium": executable}

    BrowserConfig.driver_config = driver_config  # type: ignore[method-assign]
    try:
        yield
    finally:
        BrowserConfig.driver_config = own  # type: ignore[method-assign]


FRESH_CONTEXT = f"""for _c in list({DRIVER}.browser.contexts):
    _c.close()
{DRIVER}.pages, {DRIVER}.active, {DRIVER}.env_page = [], 0, None
{DRIVER}._new_context()"""
"""The warm baseline's cell: a fresh context and blank page in the running Chromium."""


async def resets(
    count: int, old_chromium: str | None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``MiniWoBEnv.reset`` one episode at a time: kept browser, warm baseline, old path; and the
    pool's release -> ready (its reset in the background) of the kept and old paths (ms)."""
    shared_site()
    out: dict[str, list[float]] = {"kept": [], "warm baseline": [], "old path": []}
    recycle: dict[str, list[float]] = {"kept": [], "old path": []}
    for column, backend in (("kept", DockerBackend(max_idle=1)), ("old path", OldPathBackend(max_idle=1))):
        with launching(old_chromium if column == "old path" else None):
            await _reset_column(column, backend, count, out, recycle)
    return out, recycle


async def _reset_column(  # one column of ``resets``
    column: str,
    backend: DockerBackend,
    count: int,
    out: dict[str, list[float]],
    recycle: dict[str, list[float]],
) -> None:
    try:
        for i in range(count + 2):  # the first 2 start the sandbox and its browser
            env = MiniWoBEnv(task="click-button", time_limit=600)
            ctx = EpisodeContext(episode_id=f"reset-{i}", sandbox_backend=backend, registry=get_registry())
            env.bind(ctx)
            t0 = time.perf_counter()
            await env.reset(seed=i)
            took = (time.perf_counter() - t0) * 1e3
            if column == "kept" and i == count + 1:  # the last one: the warm baseline, in that sandbox
                session = await driver_session(await ctx.sandbox(SANDBOX_KIND))
                for j in range(count + 2):
                    t0 = time.perf_counter()
                    made = await session.execute(FRESH_CONTEXT, timeout=30)
                    assert made.error is None, made.error
                    await env.reset(seed=j)
                    if j >= 2:
                        out["warm baseline"].append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            await ctx.aclose()
            await backend.settle()
            if i >= 2:
                out[column].append(took)
                recycle[column].append((time.perf_counter() - t0) * 1e3)
    finally:
        await backend.aclose()


# -- concurrency -----------------------------------------------------------------------------------


class MemorySampler:
    """Peak summed memory of the containers labelled with ``run_id``, sampled in a thread, and
    the CPU time they used meanwhile (``cpu_s``: cgroup v1 ``cpuacct.usage``, counted from the
    first sample for containers there at the start, from their creation for those made later)."""

    def __init__(self, run_id: str) -> None:
        import docker

        self.client = docker.from_env()
        self.run_id = run_id
        self.peak = 0
        self.peak_containers = 0
        self._cpu_first: dict[str, int] = {}
        self._cpu_last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @property
    def cpu_s(self) -> float:
        return sum(last - self._cpu_first.get(cid, 0) for cid, last in self._cpu_last.items()) / 1e9

    def _cpu(self, ids: list[str], first: bool) -> None:
        for cid in ids:
            try:
                used = int((CPUACCT / cid / "cpuacct.usage").read_text())
            except (OSError, ValueError):
                continue  # removed meanwhile: its last reading stands
            if first:
                self._cpu_first.setdefault(cid, used)
            self._cpu_last[cid] = used

    def _usage(self, cid: str) -> int:
        try:
            folder = CGROUP / cid
            usage = int((folder / "memory.usage_in_bytes").read_text())
            stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
            return usage - int(stat.get("total_inactive_file", 0))
        except (OSError, ValueError):
            return 0

    def _run(self) -> None:
        ids: list[str] = []
        last_list = 0.0
        first = True
        while True:
            if time.monotonic() - last_list > 1.0:  # listing is slow; the set changes slowly
                try:
                    ids = [
                        c.id
                        for c in self.client.containers.list(filters={"label": f"toolgym.run={self.run_id}"})
                    ]
                except Exception:  # the engine may be removing one right now
                    pass
                last_list = time.monotonic()
            total = sum(self._usage(cid) for cid in ids)
            if total > self.peak:
                self.peak, self.peak_containers = total, len(ids)
            self._cpu(ids, first)
            first = False
            if self._stop.wait(0.5):
                self._cpu(ids, False)  # the last reading, at the end of the timed episodes
                return


async def concurrent(
    tasks: tuple[str, ...],
    episodes: int,
    level: int,
    *,
    old: bool = False,
    warmup: int = 0,
    old_chromium: str | None = OLD_CHROMIUM,
) -> dict[str, Any]:
    """One concurrency row; ``warmup`` episodes first run untimed on the same pool (seeds after
    the timed ones'), so that the timed episodes find their sandboxes made, as in a long run."""
    shared_site()
    backend = (OldPathBackend if old else DockerBackend)(max_idle=level)
    out: list[Any] = []
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ScriptedPolicy(ChatFormat(load_tiny_tokenizer("qwen"))),
        config=EngineConfig(max_live_episodes=level, max_sandboxes=level),
        sandbox_backend=backend,
        env_kwargs={"tasks": ",".join(tasks)},
        on_trajectory=out.append,
    )
    try:
        with launching(old_chromium if old else None):
            return await _timed_row(engine, backend, out, episodes, level, old=old, warmup=warmup)
    finally:
        await backend.aclose()


async def _timed_row(  # the body of ``concurrent``
    engine: RolloutEngine,
    backend: DockerBackend,
    out: list[Any],
    episodes: int,
    level: int,
    *,
    old: bool,
    warmup: int,
) -> dict[str, Any]:
    if warmup:
        await engine.run(plan_episodes("miniwob", num_tasks=warmup, group_size=1, first_task=episodes))
        await backend.settle()
        out.clear()
    before = load()
    start, host_start = time.perf_counter(), os.times()
    with MemorySampler(backend.run_id) as memory:
        await engine.run(plan_episodes("miniwob", num_tasks=episodes, group_size=1))
        wall = time.perf_counter() - start  # the episodes, not the pool's teardown
        host_end = os.times()
    ok = [t for t in out if t.status == "ok"]
    wins = sum(bool(t.steps and t.steps[-1].info.get("success")) for t in ok)
    timeouts = sum(1 for t in ok if t.steps and t.steps[-1].info.get("page_reason") == "timeout")
    steps = [s.env_s * 1e3 for t in ok for s in t.steps]
    # the environment's reset: its time less its steps' (acquiring the sandbox included)
    reset = [(t.timings.env_s - sum(s.env_s for s in t.steps)) * 1e3 for t in ok]
    return {
        "level": level,
        "path": "old" if old else "kept",
        "episodes": len(out),
        "errors": len(out) - len(ok),
        "success": wins / max(len(out), 1),
        "page_timeouts": timeouts,
        "wall_s": wall,
        "eps_per_s": len(out) / wall,
        "cpu_per_episode_s": (
            memory.cpu_s + (host_end.user - host_start.user) + (host_end.system - host_start.system)
        )
        / max(len(out), 1),
        "reset_p50_ms": pct(reset, 50),
        "step_p50_ms": pct(steps, 50),
        "step_p99_ms": pct(steps, 99),
        "peak_mem_mb": memory.peak / 2**20,
        "peak_containers": memory.peak_containers,
        "mem_per_episode_mb": memory.peak / 2**20 / max(memory.peak_containers, 1),
        "load_before": before,
        "load_after": load(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="idle time before each timed step (e.g. 150: a model call's worth, the page has no frame pending); "
        "default 0: back to back, as the rows before this option",
    )
    parser.add_argument(
        "--no-jitter",
        action="store_true",
        help="start each timed step right after the one before, without the random wait of up to one frame "
        "(the rows before that wait: each column then keeps one frame phase)",
    )
    parser.add_argument("--levels", default="1,8,16")
    parser.add_argument("--episodes", type=int, default=48, help="episodes per concurrency level")
    parser.add_argument("--tasks", default="solvable")
    parser.add_argument("--resets", type=int, default=20, help="episodes per reset column (0: skip)")
    parser.add_argument(
        "--old-path",
        action="store_true",
        help="run each concurrency level again with the browser restarted at each reset",
    )
    parser.add_argument(
        "--old-chromium",
        default=OLD_CHROMIUM,
        help="the executable the old path launches (default: the full Chromium the tools launched "
        "before the headless shell; 'same' for the tools' own)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="before each concurrency row, run as many untimed episodes as run at once on its pool "
        "(every sandbox made and, on the kept path, its browser started): the steady state of a long run",
    )
    parser.add_argument("--repeat", type=int, default=1, help="kept/old row pairs per concurrency level")
    parser.add_argument("--skip", choices=("latency", "concurrency"), default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.calls, args.levels, args.episodes, args.resets = 10, "1,2", 4, 3
    old_chromium = None if args.old_chromium == "same" else args.old_chromium
    print(f"host: {os.cpu_count()} CPUs, load average {load()}")
    print(f"browser: {BROWSER.chromium}; the old path's: {old_chromium or BROWSER.chromium}")
    result: dict[str, Any] = {}
    if args.skip != "latency":
        lat, reads = asyncio.run(latency(args.calls, args.gap_ms / 1000, jitter=not args.no_jitter))
        result["latency"] = {
            k: {c: {"p50": pct(v, 50), "p99": pct(v, 99)} for c, v in rows.items()} for k, rows in lat.items()
        }
        result["observed_by"] = {k: dict(v) for k, v in reads.items()}
        print(f"\nbrowser step on MiniWoB++ ({args.calls} calls each, ms; load after: {load()})")
        print(f"{'action':8} " + " ".join(f"{c + ' p50':>19} {'p99':>6}" for c in COLUMNS))
        for kind, rows in lat.items():
            print(
                f"{kind:8} " + " ".join(f"{pct(rows[c], 50):19.1f} {pct(rows[c], 99):6.0f}" for c in COLUMNS)
            )
        print(
            "how the tool's observations read the accessibility tree: "
            + "; ".join(
                f"{k} {', '.join(f'{how} {n}' for how, n in sorted(v.items()))}" for k, v in reads.items()
            )
        )
        print("step p50 / bare Playwright p50 (target <= 1.5x):")
        for kind, rows in lat.items():
            base = {c: pct(rows[c], 50) for c in ("direct", "bare")}
            print(
                f"  {kind:6} "
                + "; ".join(
                    f"{step} / {c} {pct(rows[step], 50) / b:.2f}x"
                    for step in ("tool", "env step")
                    for c, b in base.items()
                )
            )
    if args.resets:
        res, recycle = asyncio.run(resets(args.resets, old_chromium))
        result["reset"] = {c: {"p50": pct(v, 50), "p90": pct(v, 90)} for c, v in res.items()}
        result["release_to_ready"] = {c: {"p50": pct(v, 50), "p90": pct(v, 90)} for c, v in recycle.items()}
        print(f"\nMiniWoBEnv.reset one at a time ({args.resets} episodes each, ms; load after: {load()})")
        print(f"{'':14} {'p50':>8} {'p90':>8}   {'pool: release -> ready p50':>26} {'p90':>6}")
        for column, samples in res.items():
            back = recycle.get(column)
            print(
                f"{column:14} {pct(samples, 50):8.0f} {pct(samples, 90):8.0f}   "
                + (f"{pct(back, 50):26.0f} {pct(back, 90):6.0f}" if back else f"{'-':>26} {'-':>6}")
            )
        warm = pct(res["warm baseline"], 50)
        print(
            f"kept / warm baseline: {pct(res['kept'], 50) / warm:.2f}x (target <= 1.5x); "
            f"old path / warm baseline: {pct(res['old path'], 50) / warm:.2f}x"
        )
    if args.skip != "concurrency":
        tasks = task_list(args.tasks)
        rows = []
        print(
            f"\nconcurrent scripted episodes ({args.episodes} per row over {len(tasks)} tasks, one sandbox per live episode)"
        )
        print(
            f"{'at once':>9} {'success':>6} {'page t/o':>8} {'errors':>6} {'wall s':>7} {'ep/s':>6} {'CPU s/ep':>8} {'reset p50':>9} {'step p50':>9} "
            f"{'step p99':>9} {'peak MB':>8} {'sandboxes':>9} {'MB/sandbox':>10}  load before -> after"
        )
        runs = [
            (level, old)
            for level in (int(x) for x in args.levels.split(","))
            for _ in range(args.repeat)
            for old in (False, True)
        ]
        for level, old in runs:
            if old and not args.old_path:
                continue
            row = asyncio.run(
                concurrent(
                    tasks,
                    args.episodes,
                    level,
                    old=old,
                    warmup=level if args.warm else 0,
                    old_chromium=old_chromium,
                )
            )
            rows.append(row)
            print(
                f"{level:4d} {row['path']:>4} {row['success']:6.1%} {row['page_timeouts']:8d} {row['errors']:6d} {row['wall_s']:7.1f} "
                f"{row['eps_per_s']:6.2f} {row['cpu_per_episode_s']:8.2f} {row['reset_p50_ms']:7.0f}ms {row['step_p50_ms']:8.0f}ms {row['step_p99_ms']:8.0f}ms "
                f"{row['peak_mem_mb']:8.0f} {row['peak_containers']:9d} {row['mem_per_episode_mb']:10.0f}  "
                f"{row['load_before']} -> {row['load_after']}",
                flush=True,
            )
            if old and len(rows) > 1 and rows[-2]["level"] == level and rows[-2]["path"] == "kept":
                ratio = rows[-2]["eps_per_s"] / row["eps_per_s"]
                cpu = row["cpu_per_episode_s"] / rows[-2]["cpu_per_episode_s"]
                print(
                    f"     kept / old episodes per second: {ratio:.2f}x (target >= 3x); "
                    f"old / kept CPU per episode: {cpu:.2f}x",
                    flush=True,
                )
        result["concurrency"] = rows
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
