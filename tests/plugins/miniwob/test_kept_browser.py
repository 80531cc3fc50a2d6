"""A pooled browser sandbox keeps Playwright and Chromium between episodes, and nothing an
episode leaves in the browser reaches the next episode in that sandbox.

The attack: episode 1 plants every kind of browser state it can (cookie, localStorage,
sessionStorage, IndexedDB, Cache Storage, a service worker, a granted permission, a download file,
a history entry); the pool resets the sandbox as between any two episodes (its check from the host
included); episode 2 in the same sandbox, with the same Chromium process, looks for each and finds
none. A browser that crashed, or that code in the sandbox could have touched, is replaced instead.
The mechanism below the browser (the kept session): tests/sandboxes/test_kept_session.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.plugins.miniwob.test_miniwob import RUNNER
from tests.sandboxes.helpers import make_backend
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.registry import get_registry
from toolgym.plugins.gui.tools import DRIVER, driver_session
from toolgym.plugins.miniwob.env import MiniWoBEnv
from toolgym.plugins.miniwob.site import SANDBOX_KIND
from toolgym.sandboxes.pool import PooledBackend

PLANT = """async () => {
  const out = {};
  document.cookie = 'tg_secret=planted; max-age=3600; path=/';
  localStorage.setItem('tg_secret', 'planted');
  sessionStorage.setItem('tg_secret', 'planted');
  await new Promise((ok, fail) => { const r = indexedDB.open('tg_secret'); r.onsuccess = () => { r.result.close(); ok(); }; r.onerror = fail; });
  await (await caches.open('tg_secret')).put('/tg_secret', new Response('planted'));
  // the driver's context blocks service workers by overriding register() on the instance; the
  // prototype's still works: a real, active worker of the page's origin
  const register = ServiceWorkerContainer.prototype.register;
  const sw = await register.call(navigator.serviceWorker, '/core/d3.v4.min.js', {scope: '/core/'});
  await new Promise(ok => { const w = sw.installing || sw.waiting; if (!w || sw.active) ok();
    else w.addEventListener('statechange', () => w.state === 'activated' && ok()); });
  out.sw = sw.active ? 'active' : 'not active';
  history.pushState({}, '', location.pathname + '?tg_secret=planted');
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob(['planted'])); a.download = 'tg_secret.txt';
  document.body.appendChild(a); a.click();
  return out;
}"""
READ = """async () => ({
  cookie: document.cookie.includes('tg_secret'),
  local: localStorage.getItem('tg_secret'),
  session: sessionStorage.getItem('tg_secret'),
  idb: (await indexedDB.databases()).map(d => d.name).filter(n => n === 'tg_secret'),
  cache: (await caches.keys()).filter(k => k === 'tg_secret'),
  sw: navigator.serviceWorker ? (await navigator.serviceWorker.getRegistrations()).length : 0,
  geolocation: (await navigator.permissions.query({name: 'geolocation'})).state === 'granted',
  notifications: (await navigator.permissions.query({name: 'notifications'})).state === 'granted',
  history: location.href.includes('tg_secret'),
})"""
PLANTED = {
    "cookie": True,
    "local": "planted",
    "session": "planted",
    "idb": ["tg_secret"],
    "cache": ["tg_secret"],
    "geolocation": True,
    "notifications": True,
    "history": True,
}
"""What episode 1 reads back of its own plants (and its service worker: ``sw`` == 1)."""
CLEAN = {
    "cookie": False,
    "local": None,
    "session": None,
    "idb": [],
    "cache": [],
    "sw": 0,
    "geolocation": False,
    "notifications": False,
    "history": False,
}

INSPECT = f"""
import os as _os
def _tg_inspect():
    def cmdline(pid):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                return f.read()
        except OSError:
            return b""
    chromium = [int(p) for p in _os.listdir("/proc") if p.isdigit()
                and b"--remote-debugging-pipe" in cmdline(p) and b"--type=" not in cmdline(p)]
    found = [_os.path.join(d, n) for top in ("/tmp", "/workspace", _os.path.expanduser("~"))
             for d, dirs, names in _os.walk(top) for n in dirs + names if "tg_secret" in n]
    b = {DRIVER}
    cdp = b.browser.new_browser_cdp_session()
    contexts = cdp.send("Target.getBrowserContexts")["browserContextIds"]
    targets = [t["type"] + " " + t["url"] for t in cdp.send("Target.getTargets")["targetInfos"]]
    cdp.detach()
    history = [e["url"] for p in b.pages for e in b._session(p).send("Page.getNavigationHistory")["entries"]]
    return {{"chromium": chromium, "files": found, "contexts": len(contexts), "targets": targets,
             "history": [u for u in history if "tg_secret" in u]}}
"""


@pytest.fixture(scope="module")
def backend() -> Iterator[PooledBackend]:
    b = make_backend("docker", images=("browser",), max_idle=1)
    yield b
    RUNNER.run(b.aclose())


class Episode:
    """One MiniWoB episode on ``backend``'s pool, with the page and the kept session at hand."""

    def __init__(self, backend: PooledBackend, name: str) -> None:
        self.backend, self.name = backend, name
        self.env = MiniWoBEnv(task="click-button", time_limit=600)
        self.ctx = EpisodeContext(episode_id=name, sandbox_backend=backend, registry=get_registry())
        self.env.bind(self.ctx)

    async def __aenter__(self) -> Episode:
        await self.env.reset(seed=3)
        self.sandbox = await self.ctx.sandbox(SANDBOX_KIND)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.ctx.aclose()  # releases the sandbox: the pool resets it in the background
        await self.backend.settle()

    async def page(self, script: str) -> Any:
        reply = await self.env._evaluate(script)
        assert reply.get("ok"), reply
        return reply["value"]

    async def kept(self, code: str) -> Any:
        """A cell in the driver's (kept) session: the host's own code, as an environment's."""
        result = await (await driver_session(self.sandbox)).execute(code, timeout=30)
        assert result.error is None, result.error
        return eval(result.value) if result.value else None

    async def inspect(self) -> dict[str, Any]:
        await self.kept(INSPECT)
        found: dict[str, Any] = await self.kept("_tg_inspect()")
        return found


def test_no_browser_state_crosses_episodes_in_a_kept_browser(backend: PooledBackend) -> None:
    async def run() -> None:
        async with Episode(backend, "kept-first") as first:
            origin = await first.page("() => location.origin")
            await first.kept(
                f"{DRIVER}.context.grant_permissions(['geolocation', 'notifications'], origin={origin!r})"
            )
            planted = await first.page(PLANT)
            read = await first.page(READ)
            assert {k: read[k] for k in PLANTED} == PLANTED, read  # every plant took
            assert planted["sw"] == "active" and read["sw"] == 1, (planted, read)
            artifacts = [d for d in await first.kept("__import__('os').listdir('/tmp')") if "artifacts" in d]
            for folder in artifacts:  # a download Chromium saved (the driver refuses them) would be here
                await first.kept(f"open('/tmp/{folder}/tg_secret.txt', 'w').write('planted')")
            before = await first.inspect()
            assert before["files"] and before["history"], before
            box = first.sandbox.id
        async with Episode(backend, "kept-second") as second:
            assert second.sandbox.id == box, "the next episode ran in another sandbox"
            after = await second.inspect()
            assert after["chromium"] == before["chromium"], "the browser was not kept: this proves nothing"
            seen = await second.page(READ)
            assert seen == CLEAN, "browser state crossed episodes: " + json.dumps(seen)
            assert after["files"] == [] and after["history"] == [], after
            assert after["contexts"] == 1, after  # the episode's own, nothing else
            assert not [t for t in after["targets"] if not t.startswith("page ")], after["targets"]

    RUNNER.run(run())


@pytest.mark.parametrize("how", ["crashed", "code ran"])
def test_a_crashed_or_exposed_browser_is_replaced_at_the_reset(backend: PooledBackend, how: str) -> None:
    async def run() -> None:
        async with Episode(backend, f"replace-{how}-1") as first:
            (pid,) = (await first.inspect())["chromium"]
            if how == "crashed":  # as a crash would: nothing of the episode's own ran
                await first.kept(f"__import__('os').kill({pid}, 9)")
            else:  # code in the sandbox could have tampered with the browser (here: stopped it)
                assert (await first.sandbox.run(f"kill -STOP {pid}")).exit_code == 0
            box = first.sandbox.id
        async with Episode(backend, f"replace-{how}-2") as second:  # its reset opened the task page
            assert second.sandbox.id == box
            (again,) = (await second.inspect())["chromium"]
            assert again != pid, "the old browser was kept"
            assert (await second.page("() => document.title")) != ""

    RUNNER.run(run())
