"""``webshop-web``: the WebShop store, goals and reward of the text ``webshop`` environment, played
in a real browser through the ``browser_*`` tools (the original paper's HTML mode).

One episode is one goal, picked from the seed exactly as the text environment picks it (same
``ShopConfig``, split and the seed's position in it, ``core.env.draw.split_position``). At reset the environment registers a fresh
``ShopSession`` on this process's episode site under a random session id, and the episode's
browser sandbox (kind ``webshop-web``: the browser image, egress only to that site) opens the
session's start page. Observations are the page's accessibility tree; the instruction also opens
the first user message. The episode ends when the session buys (the reward is the session's
score, computed by ``ShopSession.buy`` on the server side exactly as in the text environment,
times ``reward_scale``, or ``reward_scale`` for a perfect score with ``reward_mode=success``), when
the agent stops without a tool call (0); at ``max_turns`` the engine truncates it (0), as for
``webshop``.

Against a policy that forges a purchase, the episode site (``EpisodeSite``) differs from the
standalone ``server.py`` in what it refuses:

- sessions exist only while an episode holds them (random 128-bit ids, unregistered at close):
  another session's pages, a made-up session, and a finished episode's replayed id are 404;
- there is no ``/state`` page and no index (the standalone server shows the goal's ASIN there);
- a ``buy`` URL scores only when it repeats the product page the session is on, with the same
  options (what the page's own ``Buy Now`` link is); a done page typed by hand is refused;
- options in a URL must be values the product offers (the original site took any);
- a finished session shows its done page whatever URL is asked, so nothing can be bought twice,
  and going back to the start page never makes a new session.

Observations (``observation=``): ``axtree`` (default), ``both`` (the tree and a screenshot of the
viewport) or ``screenshot`` (the image with element ids drawn on it); see
``toolgym.plugins.gui.observation``. With screenshots, ``screenshot_scale=S`` resizes them (0.5 gives
640x360 for the 1280x720 viewport), ``max_images=N`` keeps only the latest N in the prompt, and the
coordinate tools (``browser_click_at``, ``browser_type_at``) join the element-id tools.

The reward is read in-process from the session object the environment registered, never from the
page, so nothing the agent or the page can write reaches it.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import secrets
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, quote, urlsplit

from toolgym import (
    DEFAULT_PROFILES,
    Action,
    ActionKind,
    ConfigError,
    Message,
    SandboxError,
    StepResult,
    Task,
    ToolTaskEnv,
    digest,
    register_profile,
    split_position,
)
from toolgym.plugins.gui import network_allowlist
from toolgym.plugins.gui.observation import Screenshots, attach, snapshot, system_prompt_for
from toolgym.plugins.gui.observation import content as observation_content
from toolgym.plugins.gui.tools import (
    DRIVER,
    BrowserConfig,
    browser_tools,
    call_driver,
    coordinate_tools,
    driver_session,
)

from .oracle import oracle_step
from .pages import Node, View
from .reward import REWARD_VARIANTS, RewardVariant
from .server import _handler_for, parse_view, view_url
from .session import ShopSession, transition
from .shop import ShopConfig, cached_shop, get_shop

SANDBOX_KIND = "webshop-web"
"""The sandbox kind of ``webshop-web`` episodes: the browser image, egress only to the episode site."""
BROWSER = BrowserConfig(sandbox=SANDBOX_KIND)
SITE_NAME = "http://webshop.test"
"""What the agent sees as its session's address (the host's server and the session's secret id stay
out of the model's tokens; ``toolgym.plugins.gui.driver``, site names)."""
WEBSHOP_WEB_TOOLS = browser_tools(BROWSER)
"""The browser tools, bound to the ``webshop-web`` sandbox kind."""
WEBSHOP_WEB_COORDINATE_TOOLS = coordinate_tools(BROWSER)
"""The coordinate tools, offered with screenshot observations."""

SYSTEM_PROMPT = (
    "You are shopping in a web store for what the instruction asks. The page is shown as an accessibility "
    "tree: each line is [id] role 'name'. Act with the browser tools, one call per turn, using ids from the "
    "latest page: search, open products, choose the options the instruction asks for, and click Buy Now. "
    "The episode ends when you buy."
)
_TEXT = "text/plain; charset=utf-8"
_HTML = "text/html; charset=utf-8"


class EpisodeSite:
    """The WebShop site for episodes: serves only the sessions registered by live episodes.

    Thread-safe: requests come from the HTTP server's threads, registration from the event loop.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._sessions: dict[str, ShopSession] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))  # type: ignore[arg-type]
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="webshop-web-site", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def register(self, session: ShopSession) -> str:
        """Serve ``session`` under a new random id; returns the id."""
        sid = secrets.token_hex(16)
        with self._lock:
            self._sessions[sid] = session
        return sid

    def unregister(self, sid: str) -> None:
        with self._lock:
            self._sessions.pop(sid, None)

    def session_url(self, sid: str) -> str:
        """The prefix of every page of session ``sid``."""
        return f"{self.url}/s/{quote(sid, safe='')}"

    def start_url(self, sid: str) -> str:
        return self.session_url(sid) + "/"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- requests --------------------------------------------------------------------------------

    def handle(self, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for a GET of ``path``."""
        split = urlsplit(path)
        parts = [p for p in split.path.split("/") if p]
        if len(parts) < 2 or parts[0] != "s":
            return HTTPStatus.NOT_FOUND, _TEXT, "not found: this store has no such page\n"
        sid, rest = parts[1], parts[2:]
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return HTTPStatus.NOT_FOUND, _TEXT, "no such session: open the store from your start page\n"
            if session.done:  # a finished session shows its done page, whatever is asked
                return HTTPStatus.OK, _HTML, self._html(sid, session, session.view)
            view = parse_view(rest, parse_qs(split.query))
            if view is None:
                return HTTPStatus.NOT_FOUND, _TEXT, f"no such page: {split.path}\n"
            problem = self._check(session, view)
            if problem:
                return HTTPStatus.NOT_FOUND, _TEXT, problem + "\n"
            if view.kind == "done":
                here = session.view
                if not (
                    here.kind == "item" and here.asin == view.asin and here.option_dict == view.option_dict
                ):
                    return (
                        HTTPStatus.FORBIDDEN,
                        _TEXT,
                        "not bought: buy with the Buy Now button of the product page you are on\n",
                    )
                session.buy()
                return HTTPStatus.OK, _HTML, self._html(sid, session, session.view)
            if view.kind == "start":
                session.visited = set()
            if view.kind == "item" and view.asin:
                session.visited.add(view.asin)
            session.view = view
            return HTTPStatus.OK, _HTML, self._html(sid, session, view)

    @staticmethod
    def _check(session: ShopSession, view: View) -> str:
        """Why ``view`` is not a page of this store ('' when it is one)."""
        if view.asin is None:
            return ""
        product = session.shop.catalog.by_asin.get(view.asin)
        if product is None:
            return f"no product {view.asin}"
        offered: dict[str, list[str]] = product["options"]
        for name, value in view.options:
            if value not in offered.get(name, []):
                return f"product {view.asin} has no option {name}={value}"
        return ""

    @staticmethod
    def _html(sid: str, session: ShopSession, view: View) -> str:
        page = session.render(view)

        def href(node: Node) -> str:
            target = transition(view, node)
            return view_url(sid, target) if target is not None else "#"

        return page.html(href, f"/s/{quote(sid, safe='')}/search")


_site_lock = threading.Lock()
_shared: EpisodeSite | None = None


def shared_site() -> EpisodeSite:
    """This process's episode site, started on first use; the ``webshop-web`` sandbox profile (the
    browser profile with an allowlist of exactly this site) is registered then."""
    global _shared
    with _site_lock:
        if _shared is None:
            _shared = EpisodeSite()
            browser = DEFAULT_PROFILES["browser"]
            register_profile(
                SANDBOX_KIND,
                dataclasses.replace(
                    browser, image=browser.image_for("browser"), network=network_allowlist(_shared.url)
                ),
            )
        return _shared


_FIND = """() => {
  const want = COMMAND;
  const id = el => el ? Number(el.getAttribute('data-tg-id')) : null;
  const search = document.getElementById('search_input');
  if (want.kind === 'search') {
    if (search) return {tool: 'browser_type', args: {element_id: id(search), text: want.arg, submit: true}};
    return {tool: 'browser_click', args: {element_id: id(document.getElementById('btn-back-to-search'))}};
  }
  const el = [...document.querySelectorAll('[data-action]')].find(
    e => e.getAttribute('data-action').toLowerCase() === 'click[' + want.arg + ']');
  return el ? {tool: 'browser_click', args: {element_id: id(el)}} : null;
}"""


class WebShopWebEnv(ToolTaskEnv):
    """WebShop in the browser. Options are keyword arguments of the ``EnvSpec``."""

    parser = "hermes"
    max_turns = 20
    system_prompt = SYSTEM_PROMPT

    def warmstart_expert(self) -> Any:
        """The warm start's expert for this episode (:class:`toolgym.plugins.webshop.expert.WebShopExpert`)."""
        from .expert import WebShopExpert

        return WebShopExpert(self)

    def __init__(
        self,
        *,
        data: str = "builtin",
        human_goals: bool = True,
        split: str = "train",
        num_products: int | None = None,
        reward: RewardVariant = "original",
        reward_mode: Literal["score", "success"] = "score",
        reward_scale: float = 1.0,
        max_turns: int | str = 20,
        noun_tagger: str = "rules",
        price_seed: int = 42,
        observation: str = "axtree",
        screenshot_scale: str | float | None = None,
        max_images: str | int | None = None,
    ) -> None:
        super().__init__()
        self.screenshots = Screenshots.parse(observation, screenshot_scale, max_images)
        self.observation = self.screenshots.mode
        self.max_images = self.screenshots.max_images
        self.system_prompt = system_prompt_for(self.observation, SYSTEM_PROMPT)
        if reward not in REWARD_VARIANTS:
            raise ConfigError(f"reward {reward!r} is not one of {', '.join(REWARD_VARIANTS)}")
        if reward_mode not in ("score", "success"):
            raise ConfigError(f"reward_mode {reward_mode!r} is not one of score, success")
        self.max_turns = int(max_turns)
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, got {max_turns!r}")
        self.config = ShopConfig(
            data=data,
            human_goals=human_goals,
            num_products=num_products,
            noun_tagger=noun_tagger,
            price_seed=price_seed,
        )
        self.split = split
        self.reward_variant: RewardVariant = reward
        self.reward_mode = reward_mode
        self.reward_scale = float(reward_scale)
        self.tools = list(WEBSHOP_WEB_TOOLS)
        if self.observation != "axtree":
            self.tools += WEBSHOP_WEB_COORDINATE_TOOLS
        self.session: ShopSession | None = None
        self.session_id = ""

    @property
    def num_tasks(self) -> int | None:
        return len(get_shop(self.config).split(self.split))

    # -- the episode ----------------------------------------------------------------------------

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        await self.close()
        shop = cached_shop(self.config)
        if shop is None:
            shop = await asyncio.to_thread(get_shop, self.config)
        options = dict(options or {})
        indices = shop.split(self.split)
        index = (
            int(options["goal_index"])
            if "goal_index" in options
            else indices[split_position(seed, len(indices))]
        )
        if not 0 <= index < len(shop.goals):
            raise ConfigError(f"goal_index {index} is out of range: this shop has {len(shop.goals)} goals")
        self.session = ShopSession(shop, index, reward=self.reward_variant)
        site = shared_site()
        self.session_id = site.register(self.session)
        self.task = Task(
            id=f"webshop/{index}", question=self.session.instruction, metadata={"goal_index": index}
        )
        self._history: list[str] = []
        sandbox = await self.ctx.sandbox(SANDBOX_KIND)
        opened = await call_driver(
            sandbox,
            BROWSER,
            "goto",
            {"url": site.start_url(self.session_id), "site": [site.session_url(self.session_id), SITE_NAME]},
        )
        if not opened.get("ok"):
            raise SandboxError(
                f"the WebShop start page did not open in the browser sandbox: {opened.get('error')}"
            )
        pinned = await self._evaluate("() => location.pathname", pin=True)
        if not pinned.get("ok"):
            raise SandboxError(f"the WebShop start page could not be read: {pinned.get('error')}")
        part = None
        if self.observation != "axtree":
            part, opened = await snapshot(
                self.ctx,
                sandbox,
                BROWSER,
                marks=self.observation == "screenshot",
                scale=self.screenshots.scale,
            )
        first = f"Instruction: {self.session.instruction}\n\nThe page:\n{opened.get('text', '')}"
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": observation_content(self.observation, first, part)},
        ]
        info = {
            "goal_index": index,
            "split": self.split,
            "instruction": self.session.instruction,
            "goal_asin": self.session.goal["asin"],
        }
        return messages, info

    async def close(self) -> None:
        if self.session_id:
            shared_site().unregister(self.session_id)
            self.session_id = ""

    def anchor(self) -> str:
        assert self.session is not None, "reset() first"
        return digest("webshop-web", *self.session.state_key("text"))

    def _end(self, result: StepResult, reason: str) -> StepResult:
        assert self.session is not None
        result.terminated = True
        result.info["webshop_reason"] = reason
        if self.session.done:
            score = float(self.session.score or 0.0)
            won = score == 1.0
            result.reward = self.reward_scale * (float(won) if self.reward_mode == "success" else score)
            view = self.session.view
            result.info.update(
                task_score=score,
                won=won,
                asin=view.asin,
                options=view.option_dict,
                goal_asin=self.session.goal["asin"],
                reward_parts=self.session.reward_info,
            )
        else:
            result.reward = 0.0
            result.info.update(task_score=0.0, won=False)
        return result

    async def step(self, action: Action) -> StepResult:
        assert self.session is not None, "reset() first"
        if action.kind is ActionKind.ANSWER:
            result = StepResult(observation=[], info={"answer": action.answer or action.text})
            return self._end(result, "bought" if self.session.done else "the agent stopped without buying")
        result = await super().step(action)
        if self.session.done:
            return self._end(result, "bought")
        if isinstance(result.observation, list):  # the page as the turn left it, for the next model call
            await attach(
                self.ctx,
                await self.ctx.sandbox(SANDBOX_KIND),
                BROWSER,
                self.observation,
                result.observation,
                scale=self.screenshots.scale,
            )
        return result  # at ``max_turns`` the engine truncates the episode (reward 0), as for ``webshop``

    # -- the environment's own reads of the page (never tools) ------------------------------------

    async def _evaluate(self, script: str, *, pin: bool = False) -> dict[str, Any]:
        session = await driver_session(await self.ctx.sandbox(SANDBOX_KIND))
        result = await session.execute(
            f"{DRIVER}.evaluate({script!r}, {pin!r})", timeout=BROWSER.cell_timeout_s
        )
        if result.error is not None or result.value is None:
            return {"ok": False, "error": result.error or "the browser gave no answer"}
        reply: dict[str, Any] = json.loads(ast.literal_eval(result.value))
        return reply

    async def command_action(self, command: str) -> str | None:
        """The browser tool call (Hermes text) that does the text action ``command`` on the current
        page: ``search[...]`` types into the search box (or first goes back to search), ``click[X]``
        clicks the element whose ``data-action`` is ``click[x]``. None when the page has no such element."""
        name, _, arg = command.partition("[")
        kind = name.strip().lower()
        want = {"kind": kind, "arg": arg.rstrip("]") if kind == "search" else arg.rstrip("]").lower()}
        reply = await self._evaluate(_FIND.replace("COMMAND", json.dumps(want)))
        call = reply.get("value") if reply.get("ok") else None
        if not call or call["args"].get("element_id") is None:
            return None
        return (
            "<tool_call>\n" + json.dumps({"name": call["tool"], "arguments": call["args"]}) + "\n</tool_call>"
        )

    async def scripted_action(self) -> str | None:
        """The oracle's next step (``oracle.py``, from the server-side session), as a browser call."""
        assert self.session is not None, "reset() first"
        if self.session.shop.large:
            step = await asyncio.to_thread(oracle_step, self.session)
        else:
            step = oracle_step(self.session)
        return None if step is None else await self.command_action(step[0])
