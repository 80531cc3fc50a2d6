"""Nothing an episode leaves in its browser (cookies, localStorage, sessionStorage, IndexedDB names)
reaches another episode, neither a later one in the same sandbox after a full reset (which restarts
the browser) nor one running at the same time (Docker). The pool's own reset keeps the browser
between episodes: test_kept_browser.py attacks that path."""

from __future__ import annotations

import json
from typing import Any

from tests.plugins.miniwob.test_miniwob import RUNNER
from tests.sandboxes.helpers import make_backend
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.registry import get_registry
from toolgym.plugins.miniwob.env import MiniWoBEnv
from toolgym.plugins.miniwob.site import SANDBOX_KIND

PLANT = """async () => {
  document.cookie = 'tg_secret=planted; max-age=3600; path=/';
  localStorage.setItem('tg_secret', 'planted'); sessionStorage.setItem('tg_secret', 'planted');
  await new Promise((ok, fail) => { const r = indexedDB.open('tg_secret'); r.onsuccess = () => { r.result.close(); ok(); }; r.onerror = fail; });
  return true;
}"""
READ = """async () => ({cookie: document.cookie, local: localStorage.getItem('tg_secret'),
  session: sessionStorage.getItem('tg_secret'),
  idb: (await indexedDB.databases()).map(d => d.name).filter(n => n === 'tg_secret')})"""
CLEAN = {"cookie": "", "local": None, "session": None, "idb": []}


async def _open(backend: Any, name: str) -> tuple[MiniWoBEnv, EpisodeContext, str]:
    env = MiniWoBEnv(task="click-button", time_limit=600)
    ctx = EpisodeContext(episode_id=name, sandbox_backend=backend, registry=get_registry())
    env.bind(ctx)
    await env.reset(seed=3)
    sandbox = await ctx.sandbox(SANDBOX_KIND)
    return env, ctx, str(getattr(sandbox, "id", id(sandbox)))


async def _eval(env: MiniWoBEnv, script: str) -> Any:
    reply = await env._evaluate(script)
    assert reply.get("ok"), reply
    return reply["value"]


class OneSandbox:
    """A backend that hands out one sandbox, resetting it on release as the pool's recycling does,
    so that the next episode surely runs in the sandbox the last one used."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox

    async def acquire(self, kind: str, **_: Any) -> Any:
        return self.sandbox

    async def release(self, sandbox: Any, *, broken: bool = False) -> None:
        await sandbox.reset(prestart=False)
        await sandbox.prestart()


def test_no_browser_state_crosses_episodes() -> None:
    backend = make_backend("docker", images=("browser",), max_idle=2)

    async def run() -> None:
        first, ctx1, box1 = await _open(backend, "iso-first")
        beside, ctx2, box2 = await _open(backend, "iso-beside")  # live at the same time
        try:
            assert box1 != box2
            assert await _eval(first, PLANT) is True
            assert (await _eval(first, READ))["local"] == "planted"  # the plant took
            assert await _eval(beside, READ) == CLEAN, "a concurrent episode sees another's storage"
        finally:
            await ctx2.aclose()
        # the next episode in the very sandbox the first one used, after the reset between episodes
        sandbox = await ctx1.sandbox(SANDBOX_KIND)
        ctx1._sandboxes.clear()  # handed to OneSandbox below; it is released there
        one = OneSandbox(sandbox)
        await one.release(sandbox)
        later, ctx3, box3 = await _open(one, "iso-later")
        try:
            assert box3 == box1
            assert await _eval(later, READ) == CLEAN, "state survived the reset: " + json.dumps(
                await _eval(later, READ)
            )
        finally:
            ctx3._sandboxes.clear()
            await ctx1.aclose()
            await backend.release(sandbox)

    try:
        RUNNER.run(run())
    finally:
        RUNNER.run(backend.aclose())
