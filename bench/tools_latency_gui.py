"""Per-call latency of the browser tools, beside baselines measured in the same run and sandbox.

Each figure is the wall time of one tool call as the engine makes it (``Tool.call``: validation,
the driver cell in the sandbox's Python session, the Playwright action, the accessibility-tree
observation, the reply), p50 and p99 over ``--calls`` calls after a warm-up, in one Docker
``browser`` sandbox against the loopback test site (``toolgym.plugins.gui.testsite``) and the
WebShop site. Each tool call is interleaved with its baselines, so both see the same host load:

- ``true`` through the agent (``sandbox.run(["true"])``): the sandbox round trip every tool pays;
- an empty Python cell (``session.execute("None")``): the channel the driver answers on.

| tool call                                   | what it does                                         |
|---------------------------------------------|------------------------------------------------------|
| browser_goto /form                          | load a small form page through the allowlist proxy   |
| browser_goto WebShop results                | a 10-product WebShop results page                    |
| browser_click checkbox                      | click without navigation, then observe               |
| browser_type textbox                        | fill a text field, then observe                      |
| browser_select                              | choose a drop-down option, then observe              |
| browser_scroll                              | scroll the long page, then observe                   |
| browser_screenshot                          | PNG of the viewport, copied out to the artifacts     |
| browser_tabs                                | no action: the observation alone (mark, AX tree)     |

The first call of an episode also starts Playwright and Chromium; it is reported once, beside
a sandbox ``acquire`` from a cold pool.

    python bench/tools_latency_gui.py [--calls 60] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym.core.env.contract import EpisodeContext
from toolgym.plugins.gui import BROWSER_TOOLS, network_allowlist
from toolgym.plugins.gui.testsite import TestSite
from toolgym.plugins.gui.tools import driver_session
from toolgym.plugins.webshop.server import WebShopServer
from toolgym.plugins.webshop.shop import ShopConfig, get_shop
from toolgym.sandboxes import open_backend

TOOLS = {t.name: t for t in BROWSER_TOOLS}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def element(text: str, needle: str) -> int:
    line = next(ln for ln in text.splitlines() if needle in ln)
    return int(line.split("]")[0].split("[")[1])


async def measure(calls: int) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with (
        TestSite() as site,
        WebShopServer(get_shop(ShopConfig()), split="test") as shop,
        tempfile.TemporaryDirectory() as artifacts,
    ):
        backend = open_backend(
            "docker", profiles={"browser": {"network": network_allowlist(site.url, shop.url)}}
        )
        try:
            start = time.perf_counter()
            sandbox = await backend.acquire("browser")
            acquire_s = time.perf_counter() - start
            ctx = EpisodeContext(episode_id="bench", artifacts_dir=os.path.join(artifacts, "artifacts"))
            session = await driver_session(sandbox)

            async def call(name: str, **arguments: Any) -> str:
                out = await TOOLS[name].call(arguments, sandbox=sandbox, ctx=ctx)
                if out.error:
                    raise RuntimeError(f"{name} {arguments} failed: {out.text[:500]}")
                return out.text

            start = time.perf_counter()
            form = await call("browser_goto", url=f"{site.url}/form")
            rows.append(
                {
                    "tool call": "first call (starts Chromium)",
                    "p50_ms": (time.perf_counter() - start) * 1e3,
                    "p99_ms": None,
                    "baseline": "acquire (cold pool)",
                    "baseline_p50_ms": acquire_s * 1e3,
                    "baseline_p99_ms": None,
                    "n": 1,
                }
            )
            checkbox, textbox = element(form, "checkbox 'Gift wrap'"), element(form, "textbox 'Query'")
            combobox = element(form, "combobox 'Colour'")
            results = f"{shop.url}/s/0/search?keywords=shirt"
            colours = iter(["Green", "Blue", "Red"] * calls * 2)

            async def on_long_page() -> None:
                await call("browser_goto", url=f"{site.url}/long")

            cases: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]] | None]] = [
                ("browser_goto /form", lambda: call("browser_goto", url=f"{site.url}/form"), None),
                ("browser_goto WebShop results", lambda: call("browser_goto", url=results), None),
                (
                    "browser_click checkbox",
                    lambda: call("browser_click", element_id=checkbox),
                    lambda: call("browser_goto", url=f"{site.url}/form"),
                ),
                (
                    "browser_type textbox",
                    lambda: call("browser_type", element_id=textbox, text="blue shoes"),
                    None,
                ),
                (
                    "browser_select",
                    lambda: call("browser_select", element_id=combobox, option=next(colours)),
                    None,
                ),
                (
                    "browser_scroll",
                    lambda: call("browser_scroll", direction="down", amount=300),
                    on_long_page,
                ),
                ("browser_screenshot", lambda: call("browser_screenshot"), None),
                (
                    "browser_tabs (observation only)",
                    lambda: call("browser_tabs"),
                    lambda: call("browser_goto", url=f"{site.url}/form"),
                ),
            ]
            for label, action, setup in cases:
                if setup is not None:
                    await setup()
                samples: list[float] = []
                true_rt: list[float] = []
                cell_rt: list[float] = []
                for i in range(calls + 3):
                    if label == "browser_scroll" and i % 10 == 9:
                        await call("browser_scroll", direction="up", amount=100_000)
                    t0 = time.perf_counter()
                    await action()
                    t1 = time.perf_counter()
                    await sandbox.run(["true"], timeout=10)
                    t2 = time.perf_counter()
                    await session.execute("None", timeout=10)
                    t3 = time.perf_counter()
                    if i >= 3:  # warm-up
                        samples.append(t1 - t0)
                        true_rt.append(t2 - t1)
                        cell_rt.append(t3 - t2)
                rows.append(
                    {
                        "tool call": label,
                        "p50_ms": pct(samples, 50) * 1e3,
                        "p99_ms": pct(samples, 99) * 1e3,
                        "baseline": "agent `true` | empty Python cell",
                        "baseline_p50_ms": pct(true_rt, 50) * 1e3,
                        "baseline_p99_ms": pct(true_rt, 99) * 1e3,
                        "cell_p50_ms": pct(cell_rt, 50) * 1e3,
                        "n": len(samples),
                    }
                )
            await backend.release(sandbox)
        finally:
            await backend.aclose()
    notes.append(
        "all calls in one Docker browser sandbox (2 CPUs, 2 GiB), sites on the host's loopback via the proxy"
    )
    return rows, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="timed calls per tool (after 3 warm-up calls)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows, notes = asyncio.run(measure(args.calls))
    if args.json:
        print(json.dumps({"rows": rows, "notes": notes}, indent=2))
        return
    print(
        f"{'tool call':32} {'p50 ms':>8} {'p99 ms':>8}   {'baseline (same run, same sandbox)':36} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'cell p50':>8} {'p50 ratio':>9}"
    )
    for r in rows:
        p99 = f"{r['p99_ms']:8.1f}" if r["p99_ms"] is not None else f"{'-':>8}"
        b99 = f"{r['baseline_p99_ms']:8.2f}" if r["baseline_p99_ms"] is not None else f"{'-':>8}"
        cell = f"{r['cell_p50_ms']:8.2f}" if "cell_p50_ms" in r else f"{'-':>8}"
        print(
            f"{r['tool call']:32} {r['p50_ms']:8.1f} {p99}   {r['baseline']:36} {r['baseline_p50_ms']:8.2f} {b99} "
            f"{cell} {r['p50_ms'] / r['baseline_p50_ms']:8.1f}x"
        )
    for note in notes:
        print(f"note: {note}")
    print(
        f"(n={args.calls} per row; cpu count {os.cpu_count()}, load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())})"
    )


if __name__ == "__main__":
    main()
