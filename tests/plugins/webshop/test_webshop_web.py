"""``webshop-web``: WebShop in the browser. The episode site's refusals (what a policy might try to
forge a purchase with), the same purchase scoring the same in ``webshop`` and ``webshop-web``, the
scripted solver over shipped goals, and the tiny model end to end (Docker: the browser image)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.sandboxes.helpers import make_backend
from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import ConfigError
from toolgym.core.registry import get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
from toolgym.core.rollout.policy import ScriptedPolicy
from toolgym.core.types import Action, ActionKind, ToolCall
from toolgym.plugins.gui.testsite import TestSite
from toolgym.plugins.webshop.env import WebShopEnv
from toolgym.plugins.webshop.oracle import oracle_query, wanted_options
from toolgym.plugins.webshop.session import ShopSession
from toolgym.plugins.webshop.shop import Shop
from toolgym.plugins.webshop.web import SITE_NAME, EpisodeSite, WebShopWebEnv, shared_site
from toolgym.sandboxes.pool import PooledBackend

# -- the episode site, without a browser ---------------------------------------------------------


@pytest.fixture()
def site() -> Iterator[EpisodeSite]:
    s = EpisodeSite()
    yield s
    s.close()


def _item(sid: str, asin: str, options: dict[str, str]) -> str:
    return f"/s/{sid}/item/{asin}?" + urlencode(
        {"keywords": "x", "page": "1", "options": json.dumps(options)}
    )


def _buy(sid: str, asin: str, options: dict[str, str]) -> str:
    return f"/s/{sid}/buy/{asin}?" + urlencode({"keywords": "x", "page": "1", "options": json.dumps(options)})


def _perfect(shop: Shop, session: ShopSession) -> tuple[str, dict[str, str]]:
    asin = session.goal["asin"]
    return asin, wanted_options(shop.product(asin), session.goal)


def test_a_done_page_typed_by_hand_does_not_buy(site: EpisodeSite, shop: Shop) -> None:
    """The policy learned the goal's ASIN (or guesses it) and asks for its buy URL from the start page."""
    session = ShopSession(shop, 3)
    sid = site.register(session)
    asin, options = _perfect(shop, session)
    status, _, body = site.handle(_buy(sid, asin, options))
    assert status == 403 and "Buy Now button" in body
    assert not session.done and session.score is None
    # Buying another product than the page shown, or other options, is refused as well.
    assert site.handle(_item(sid, asin, {}))[0] == 200
    other = next(a for a in shop.catalog.by_asin if a != asin)
    assert site.handle(_buy(sid, other, {}))[0] == 403
    if options:
        assert site.handle(_buy(sid, asin, options))[0] == 403
    assert not session.done
    # The page's own Buy Now link buys, and scores as the text session would.
    status, _, body = site.handle(_buy(sid, asin, {}))
    assert (
        status == 200 and session.done and session.score == shop.score(session.goal, asin, {}, "original")[0]
    )


def test_options_a_product_does_not_offer_are_refused(site: EpisodeSite, shop: Shop) -> None:
    """The original site took any option in the URL: a policy could 'choose' the goal's wanted values
    on a product that has none of them."""
    session = ShopSession(shop, 5)
    sid = site.register(session)
    asin = next(a for a, p in shop.catalog.by_asin.items() if p["options"])
    forged = {name: "exactly what the goal wants" for name in shop.product(asin)["options"]}
    status, _, body = site.handle(_item(sid, asin, forged))
    assert status == 404 and "has no option" in body
    assert site.handle(_buy(sid, asin, forged))[0] == 404
    assert not session.done
    assert site.handle(_item(sid, asin, {"Not A Group": "x"}))[0] == 404


def test_sessions_exist_only_while_their_episode_holds_them(site: EpisodeSite, shop: Shop) -> None:
    """Made-up sessions, seed-named sessions and a finished episode's replayed id are all 404: no
    purchase can be made in another session, and no goal is handed out by name."""
    a, b = ShopSession(shop, 1), ShopSession(shop, 2)
    sa, sb = site.register(a), site.register(b)
    assert sa != sb and re.fullmatch(r"[0-9a-f]{32}", sa)
    for path in ("/s/0/", "/s/1/", "/s/anything/", "/", f"/s/{sa}/state", f"/s/{sa}x/"):
        assert site.handle(path)[0] == 404, path
    assert site.handle(f"/s/{sa}/")[0] == 200
    site.unregister(sa)
    asin, options = _perfect(shop, a)
    assert site.handle(f"/s/{sa}/")[0] == 404
    assert site.handle(_item(sa, asin, options))[0] == 404 and site.handle(_buy(sa, asin, options))[0] == 404
    assert not a.done and not b.done


def test_a_finished_session_cannot_buy_again_or_restart(site: EpisodeSite, shop: Shop) -> None:
    session = ShopSession(shop, 7)
    sid = site.register(session)
    other = next(a for a in shop.catalog.by_asin if a != session.goal["asin"])
    site.handle(_item(sid, other, {}))
    site.handle(_buy(sid, other, {}))
    assert session.done
    first = session.score
    asin, options = _perfect(shop, session)
    for path in (f"/s/{sid}/", _item(sid, asin, options), _buy(sid, asin, options)):
        status, _, body = site.handle(path)
        assert status == 200 and 'id="page-done"' in body
    assert session.done and session.score == first and site._sessions[sid] is session


def test_no_page_leaks_the_goal(site: EpisodeSite, shop: Shop) -> None:
    """The start and results pages show the instruction (as in WebShop) but not the goal's product
    or its index; the session id does not depend on the goal."""
    session = ShopSession(shop, 11)
    sid = site.register(session)
    start = site.handle(f"/s/{sid}/")[2]
    assert session.instruction.split(",")[0] in start or "Instruction" in start
    assert session.goal["asin"] not in start and "goal" not in start.lower()
    assert session.goal["asin"] not in site.start_url(sid)
    assert site.register(ShopSession(shop, 11)) != sid


def test_bad_options_are_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="reward 'shaped' is not one of"):
        WebShopWebEnv(reward="shaped")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_turns must be at least 1"):
        WebShopWebEnv(max_turns=0)


# -- in the browser ------------------------------------------------------------------------------

RUNNER = asyncio.Runner()
"""One event loop for the module: pooled sandboxes belong to the loop that made them."""


def _run(coro: Any) -> Any:
    return RUNNER.run(coro)


@pytest.fixture(scope="module")
def backend() -> Iterator[PooledBackend]:
    b = make_backend("docker", images=("browser",), max_idle=4)
    yield b
    _run(b.aclose())


class Episode:
    """One hand-driven ``webshop-web`` episode: reset, then tool calls as a policy would write them."""

    def __init__(self, backend: PooledBackend, **kwargs: Any) -> None:
        self.env = WebShopWebEnv(**kwargs)
        self.ctx = EpisodeContext(
            episode_id="webshop-web-test", sandbox_backend=backend, registry=get_registry()
        )
        self.env.bind(self.ctx)

    async def call(self, name: str, **arguments: Any) -> Any:
        call = ToolCall(name=name, arguments=arguments)
        return await self.env.step(
            Action(text=json.dumps(arguments), kind=ActionKind.TOOL_CALLS, tool_calls=[call])
        )

    async def command(self, command: str) -> Any:
        """Do the text action ``command`` through the browser (what the text env would do)."""
        text = await self.env.command_action(command)
        assert text is not None, f"no element for {command!r} on the page"
        call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
        return await self.call(call["name"], **call["arguments"])

    async def close(self) -> None:
        await self.env.close()
        await self.ctx.aclose()


def _episode(backend: PooledBackend, body: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        episode = Episode(backend, **kwargs)
        try:
            return await body(episode)
        finally:
            await episode.close()

    return _run(run())


def _text_score(seed: int, commands: list[str]) -> tuple[float, Any]:
    async def run() -> tuple[float, Any]:
        env = WebShopEnv()
        await env.reset(seed=seed)
        step = None
        for command in commands:
            step = await env.step(Action(text=command, kind=ActionKind.COMMAND, command=command))
        assert step is not None and step.terminated
        return step.reward, step.info

    return _run(run())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_same_purchase_scores_identically_in_webshop_and_webshop_web(
    backend: PooledBackend, shop: Shop, seed: int
) -> None:
    """A perfect purchase (the oracle's) and a poor one (the last result, no options) in both envs."""
    env = WebShopEnv()
    goal = env.goal_index(seed)
    session = ShopSession(shop, goal)
    asin, options = _perfect(shop, session)
    query = oracle_query(session)
    results = session.results(tuple(query.split(" ")))
    assert asin in results[:10], "the perfect plan below clicks the product on the first page"
    poor = results[9] if results[9] != asin else results[8]
    plans = [
        [f"search[{query}]", f"click[{asin}]", *(f"click[{v}]" for v in options.values()), "click[Buy Now]"],
        [f"search[{query}]", f"click[{poor}]", "click[Buy Now]"],
    ]
    for plan in plans:
        text_reward, text_info = _text_score(seed, plan)

        async def body(ep: Episode, plan: list[str] = plan) -> Any:
            await ep.env.reset(seed=seed)
            step = None
            for command in plan:
                step = await ep.command(command)
            return step

        step = _episode(backend, body)
        assert step.terminated and step.info["webshop_reason"] == "bought"
        assert step.reward == text_reward and step.info["task_score"] == text_info["task_score"]
        assert step.info["reward_parts"] == text_info["reward_parts"]
    assert _text_score(seed, plans[0])[0] > _text_score(seed, plans[1])[0], "the two purchases differ"


def test_typing_the_buy_url_in_the_browser_does_not_score(backend: PooledBackend, shop: Shop) -> None:
    """With the goal's product and options leaked to it, the policy types the done page's URL."""

    async def body(ep: Episode) -> list[Any]:
        await ep.env.reset(seed=4)
        session = ep.env.session
        assert session is not None
        asin, options = _perfect(shop, session)
        base = shared_site().url
        steps = [
            await ep.call("browser_goto", url=base + _buy(ep.env.session_id, asin, options)),
            await ep.call("browser_new_tab", url=f"{base}/s/0/"),
            await ep.call("browser_goto", url=f"{base}/s/{ep.env.session_id}/state"),
        ]
        return steps

    steps = _episode(backend, body)
    assert not any(s.terminated for s in steps) and all(s.reward == 0 for s in steps)
    assert "not bought" in steps[0].observation[0]["content"] or "403" in steps[0].observation[0]["content"]


def test_the_agent_sees_its_session_by_name(backend: PooledBackend) -> None:
    """Neither the host server's port (another in every process) nor the session's secret id reaches
    the model: the observations name the session's site, and URLs under that name open its pages."""

    async def body(ep: Episode) -> tuple[str, Any, str]:
        messages, _ = await ep.env.reset(seed=0)
        first = str(messages[-1]["content"])
        return first, await ep.call("browser_goto", url=f"{SITE_NAME}/"), ep.env.session_id

    first, again, sid = _episode(backend, body)
    text = again.observation[0]["content"]
    assert f"URL: {SITE_NAME}/" in first and f"URL: {SITE_NAME}/" in text, text
    assert not text.startswith("Error:")
    for seen in (first, text):
        assert "127.0.0.1" not in seen and sid not in seen


def test_the_browser_reaches_only_the_episode_site(backend: PooledBackend) -> None:
    with TestSite() as other:

        async def body(ep: Episode) -> list[Any]:
            await ep.env.reset(seed=0)
            return [
                await ep.call("browser_new_tab", url=url)
                for url in (
                    f"{other.url}/form",
                    "file:///etc/passwd",
                    "http://172.17.0.1:2375/version",
                    "http://example.com/",
                )
            ]

        steps = _episode(backend, body)
    for step, why in zip(
        steps, ("network allowlist", "give a full http", "allowlist", "allowlist"), strict=True
    ):
        text = step.observation[0]["content"]
        assert text.startswith("Error:") and why in text, text
        assert not step.valid and not step.terminated


def test_stopping_without_buying_scores_zero(backend: PooledBackend) -> None:
    async def stop(ep: Episode) -> Any:
        await ep.env.reset(seed=0)
        return await ep.env.step(Action(text="Done.", kind=ActionKind.ANSWER, answer="Done."))

    step = _episode(backend, stop)
    assert step.terminated and step.reward == 0.0 and "without buying" in step.info["webshop_reason"]
    assert WebShopWebEnv(max_turns="3").max_turns == 3, "the engine truncates at the env's max_turns"


def test_the_scripted_solver_buys_well_on_shipped_goals(backend: PooledBackend, qwen_chat: Any) -> None:
    """20 goals of the test split in one collection (bench/webshop_web.py runs more)."""

    async def run() -> list[Any]:
        out: list[Any] = []
        engine = RolloutEngine(
            registry=get_registry(),
            policy=ScriptedPolicy(qwen_chat),
            config=EngineConfig(max_live_episodes=4, max_sandboxes=4),
            sandbox_backend=backend,
            env_kwargs={"split": "test"},
            on_trajectory=out.append,
        )
        await engine.run(plan_episodes("webshop-web", num_tasks=20, group_size=1))
        return out

    trajectories = _run(run())
    assert len(trajectories) == 20
    for t in trajectories:
        assert t.status == "ok", (t.status, t.status_reason)
    wins = sum(t.steps[-1].info.get("won", False) for t in trajectories)
    assert wins >= 19, [t.steps[-1].info.get("task_score") for t in trajectories]


def test_the_tiny_model_collects_token_faithful_trajectories(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "tiny"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolgym",
            "collect",
            "--env",
            "webshop-web",
            "--model",
            "tiny",
            "-n",
            "2",
            "--max-turns",
            "2",
            "--max-tokens-per-turn",
            "48",
            "--sandbox-backend",
            "docker",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    verify = subprocess.run(
        [sys.executable, "-m", "toolgym", "verify", str(out)], capture_output=True, text=True, timeout=300
    )
    assert verify.returncode == 0 and "all invariants hold" in verify.stdout, verify.stdout + verify.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["token_faithful"] and r["status"] == "ok" for r in rows)
