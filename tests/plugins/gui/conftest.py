"""Fixtures of the browser tool tests: the test site and the WebShop site on loopback, a Docker
backend whose browser profile allows exactly those two, and one fresh browser sandbox per test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins.gui.helpers import Browser
from tests.sandboxes.helpers import make_backend
from toolgym.core.env.contract import EpisodeContext
from toolgym.plugins.gui import BROWSER_TOOLS, network_allowlist
from toolgym.plugins.gui.testsite import TestSite
from toolgym.plugins.webshop.server import WebShopServer
from toolgym.plugins.webshop.shop import ShopConfig, get_shop
from toolgym.sandboxes.pool import PooledBackend


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite() as s:
        yield s


@pytest.fixture(scope="module")
def webshop() -> Iterator[WebShopServer]:
    with WebShopServer(get_shop(ShopConfig()), split="test") as server:
        yield server


@pytest.fixture(scope="module")
def backend(runner: asyncio.Runner, site: TestSite, webshop: WebShopServer) -> Iterator[PooledBackend]:
    b = make_backend(
        "docker",
        images=("browser",),
        max_idle=2,
        profiles={"browser": {"network": network_allowlist(site.url, webshop.url)}},
    )
    yield b
    runner.run(b.aclose())


@pytest.fixture()
def browser(backend: PooledBackend, runner: asyncio.Runner, tmp_path: Path) -> Iterator[Browser]:
    sandbox = runner.run(backend.acquire("browser", episode_id="gui-test"))
    ctx = EpisodeContext(episode_id="ep-1", artifacts_dir=str(tmp_path / "artifacts"))
    yield Browser(runner, sandbox, ctx, list(BROWSER_TOOLS))
    runner.run(backend.release(sandbox))
