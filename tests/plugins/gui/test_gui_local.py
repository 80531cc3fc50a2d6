"""The local (bubblewrap) backend cannot run the browser tools, and they say why and what to use.

Its memory cap is an address-space rlimit, and Chromium reserves tens of GB of address space at
start-up (V8's pointer cage, PartitionAlloc): it aborts under any useful cap (measured: it dies
with SIGTRAP under `ulimit -v` of 2, 4, 8, 16 and 32 GiB). The host's Python, which bubblewrap
sandboxes run, has no Playwright either. The browser tools are therefore Docker-only."""

from __future__ import annotations

import asyncio

from tests.sandboxes.helpers import make_backend
from toolgym.plugins.gui import BROWSER_TOOLS


def test_on_the_local_backend_the_browser_tools_name_the_image_they_need() -> None:
    backend = make_backend("local")

    async def attempt() -> str:
        sandbox = await backend.acquire("browser")
        try:
            out = await BROWSER_TOOLS[0].call({"url": "http://127.0.0.1:9/"}, sandbox=sandbox)
            assert out.error
            return out.text
        finally:
            await backend.release(sandbox)
            await backend.aclose()

    text = asyncio.run(attempt())
    assert (
        "toolgym/sandbox-browser image on the Docker backend" in text  # no Playwright for the host's python3
        or "Chromium could not start" in text
    ), text  # Playwright there, but Chromium aborts under the rlimit
