"""``miniwob``: the MiniWoB++ benchmark's own task pages, played in a real browser through the
``browser_*`` tools.

One episode is one task instance. At reset the episode's browser sandbox (kind ``miniwob``: the
browser image, egress only to this process's MiniWoB server) opens the task page as the package
ships it, and the environment starts the instance the way the benchmark's own Python side does:
``Math.seedrandom(seed)`` then ``core.startEpisodeReal()``. The instruction (the page's query,
``core.getUtterance()``) and the page's accessibility tree make the first user message. The model
acts only through the browser tools; after every step the environment reads, from the task page it
opened, the result ``core.js`` computed.

Reward (``reward=``): ``raw`` (default; ``WOB_RAW_REWARD_GLOBAL``, in [-1, 1], partial for some
tasks), ``original`` (the time-discounted ``WOB_REWARD_GLOBAL``, the gym package's default, which
depends on how fast the model runs), ``binary`` (1 when raw is 1, else -1), or ``distance``
(``actions=coordinates`` only): 1 when raw is 1; else -1 plus up to 0.5 for how near the last click
or text entry came to the point the task's scripted solver would have acted at on that page, a
Gaussian of the distance with a spread of ``NEAR_PX`` page pixels. A hit-or-miss reward scores a
click one image cell off the target and one across the page alike; this one tells them apart,
while no miss earns as much as half a win. ``success`` in the step info is raw > 0. The task's own time limit (``core.EPISODE_MAX_TIME``, 10 s for most tasks)
runs in the page; ``time_limit=SECONDS`` replaces it (``task`` keeps it).

Against a policy that games the score: the result is taken from the first ``core.endEpisode`` of
the instance the environment started (later episodes the page would start are ignored), only on
the page the environment pinned, and only while that page still holds the episode's nonce. An
agent that reloads the page, opens another task page, or closes the tab scores -1 (the benchmark's
time-out value), as does one that stops (answers without a tool call) or reaches the turn limit
before the page ends the episode.

Observations (``observation=``): ``axtree`` (default), ``both`` (the tree and a screenshot of the
task area, ``#wrap``, 160x210 px as the benchmark's own screenshots), or ``screenshot`` (the image
with element ids drawn on it, see ``toolgym.plugins.gui.observation``). With screenshots,
``screenshot_scale=S`` resizes them (S image pixels per page pixel), ``max_images=N`` keeps only the
latest N in the prompt, and the coordinate tools (``browser_click_at``, ``browser_type_at``, in the
screenshot's pixels, only inside the task area) join the element-id tools. ``actions=coordinates``
offers the coordinate tools alone, on screenshots without the drawn ids: the agent acts only at
points of what it sees (the scripted solvers then click the centre of their element).
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym import (
    Action,
    ActionKind,
    ConfigError,
    Message,
    RunningDigest,
    SandboxError,
    StepResult,
    Task,
    ToolTaskEnv,
    digest,
)
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

from .site import SANDBOX_KIND, shared_site
from .solvers import COORDINATE_SOLVERS, SOLVERS, action_text, solver_script
from .tasks import task_list

BROWSER = BrowserConfig(sandbox=SANDBOX_KIND)
MINIWOB_TOOLS = browser_tools(BROWSER)
"""The browser tools, bound to the ``miniwob`` sandbox kind."""
MINIWOB_COORDINATE_TOOLS = coordinate_tools(BROWSER)
"""The coordinate tools, offered with screenshot observations."""

SYSTEM_PROMPT = (
    "You operate a web browser to complete a task on a web page. The page is shown as an accessibility "
    "tree: each line is [id] role 'name'. Act with the browser tools, one call per turn, using ids from the "
    "latest page. The episode ends when the task is done."
)
COORDINATES_PROMPT = (
    "You operate a web browser to complete a task on a web page. The page is shown as a screenshot. Act "
    "with browser_click_at and browser_type_at at a point of the latest screenshot, giving x and y in its "
    "pixels (0, 0 is its top-left corner), one call per turn. The episode ends when the task is done."
)
ACTIONS = ("all", "coordinates")
REWARDS = ("raw", "original", "binary", "distance")
NEAR_PX = 16.0
"""The spread of the ``distance`` reward's Gaussian, in page pixels (scaled with the screenshot):
a miss one 16-pixel image cell from the solver's point scores about -0.70, two cells about -0.93."""
POINT_TOOLS = ("browser_click_at", "browser_type_at")
FAIL = -1.0
"""What the benchmark gives an instance that times out; also given for leaving the page or stopping."""

_START = """() => {
  Math.seedrandom(SEED);
  if (LIMIT !== null) core.EPISODE_MAX_TIME = LIMIT;
  window.__tgResult = null;
  const end = core.endEpisode;
  core.endEpisode = function (reward, timeProportional, reason) {
    const live = core.EP_TIMER !== null;
    const out = end.apply(this, arguments);
    if (live && window.__tgResult === null)
      window.__tgResult = {reward: WOB_REWARD_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON};
    return out;
  };
  core.startEpisodeReal();
  clearInterval(core.CD_TIMER);  // the countdown's text stays at its first value: later ones tell how fast the host ran
  window.__tgEpisode = NONCE;
  return {ready: WOB_TASK_READY !== false, query: core.getUtterance(), limit_ms: core.EPISODE_MAX_TIME};
}"""
_READY = "() => ({ready: WOB_TASK_READY !== false, query: core.getUtterance()})"
_PROBE = """() => {
  if (window.__tgEpisode !== NONCE) return {left: true, url: location.href};
  const wrap = document.getElementById('wrap');
  const values = [...document.querySelectorAll('input, select, textarea')].map(
    e => (e.type === 'checkbox' || e.type === 'radio') ? String(e.checked) : e.value);
  return {left: false, result: window.__tgResult, state: (wrap ? wrap.innerHTML : '') + '\\u001f' + values.join('\\u001f')};
}"""
SITE_NAME = "http://miniwob.test"
"""What the agent sees as the site's address: the host's server listens on another port in every process
(``toolgym.plugins.gui.driver``, site names)."""
TASK_AREA = "#wrap"
"""The task's 160x210 area (query and page): what MiniWoB++'s own screenshots show."""
_IDS = re.compile(r'\sdata-tg-id="\d+"')


class MiniWoBEnv(ToolTaskEnv):
    parser = "hermes"
    max_turns = 12
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self,
        task: str | None = None,
        tasks: str = "all",
        reward: str = "raw",
        time_limit: str | float | None = "task",
        max_turns: int | str = 12,
        observation: str = "axtree",
        screenshot_scale: str | float | None = None,
        max_images: str | int | None = None,
        actions: str = "all",
    ) -> None:
        super().__init__()
        self.screenshots = Screenshots.parse(observation, screenshot_scale, max_images)
        self.observation = self.screenshots.mode
        self.max_images = self.screenshots.max_images
        if actions not in ACTIONS:
            raise ConfigError(f"actions must be one of {', '.join(ACTIONS)}, got {actions!r}")
        if actions == "coordinates" and self.observation == "axtree":
            raise ConfigError(
                "actions=coordinates points at screenshots; set observation=screenshot or both too"
            )
        self.coordinates_only = actions == "coordinates"
        self.system_prompt = (
            COORDINATES_PROMPT
            if self.coordinates_only
            else system_prompt_for(self.observation, SYSTEM_PROMPT)
        )
        self.task_names = task_list(task or tasks, screenshots=self.observation != "axtree")
        if reward not in REWARDS:
            raise ConfigError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        self.reward_kind = reward
        if reward == "distance":
            if not self.coordinates_only:
                raise ConfigError(
                    "reward=distance scores points on the screenshot; set actions=coordinates too"
                )
            unscored = next((t for t in self.task_names if t not in COORDINATE_SOLVERS), None)
            if unscored is not None:
                raise ConfigError(
                    f"reward=distance needs a scripted solver's point on every task; {unscored!r} has none"
                )
        if time_limit in (None, "", "task"):
            self.time_limit_ms: int | None = None
        else:
            try:
                seconds = float(time_limit)  # type: ignore[arg-type]
            except ValueError:
                raise ConfigError(
                    f"time_limit must be 'task' or a number of seconds, got {time_limit!r}"
                ) from None
            if seconds <= 0:
                raise ConfigError(f"time_limit must be positive, got {time_limit!r}")
            self.time_limit_ms = int(seconds * 1000)
        self.max_turns = int(max_turns)
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, got {max_turns!r}")
        if self.coordinates_only:
            self.tools = list(MINIWOB_COORDINATE_TOOLS)
        else:
            self.tools = list(MINIWOB_TOOLS)
            if self.observation != "axtree":
                self.tools += MINIWOB_COORDINATE_TOOLS
        self._nonce = ""
        self._turn = 0
        self._page_state = ""
        self._target: tuple[float, float] | None = None
        """``distance``: where the solver would act on the page as the model last saw it."""
        self._miss: float | None = None
        """``distance``: how far (screenshot pixels) the latest point action was from ``_target``."""

    @property
    def num_tasks(self) -> int | None:
        return None  # instances are generated from the seed

    def load_task(self, seed: int) -> Task:
        name = self.task_names[seed % len(self.task_names)]
        return Task(id=f"{name}/{seed}", question="", metadata={"task": name, "seed": seed})

    def unscripted_task(self, seeds: Sequence[int]) -> str | None:
        solvable = COORDINATE_SOLVERS if self.coordinates_only else SOLVERS
        return next(
            (t for t in (self.task_names[s % len(self.task_names)] for s in seeds) if t not in solvable), None
        )

    # -- the page -------------------------------------------------------------------------------

    async def _evaluate(self, script: str, *, pin: bool = False) -> dict[str, Any]:
        """Run a JavaScript function in the episode's task page (never a tool: the model cannot)."""
        session = await driver_session(await self.ctx.sandbox(SANDBOX_KIND))
        result = await session.execute(
            f"{DRIVER}.evaluate({script!r}, {pin!r})", timeout=BROWSER.cell_timeout_s
        )
        if result.error is not None or result.value is None:
            return {"ok": False, "closed": True, "error": result.error or "the browser gave no answer"}
        reply: dict[str, Any] = json.loads(ast.literal_eval(result.value))
        return reply

    async def _probe(self) -> dict[str, Any]:
        """The episode's state on its pinned page: ``left`` (the page is gone or is another one),
        ``result`` (what core.js gave, or None while running) and ``state`` (for the anchor)."""
        reply = await self._evaluate(_PROBE.replace("NONCE", json.dumps(self._nonce)))
        if not reply.get("ok"):
            return {"left": True, "why": reply.get("error")}
        value: dict[str, Any] = reply["value"]
        if not value.get("left"):
            self._page_state = _IDS.sub("", value.get("state", ""))
        return value

    def _score(self, result: dict[str, Any] | None, *, left: bool = False) -> float:
        if self.reward_kind == "distance":
            if result is not None and float(result["raw"]) == 1.0:
                return 1.0
            if left or self._miss is None:
                return FAIL
            spread = NEAR_PX * (self.screenshots.scale or 1.0)
            return FAIL + 0.5 * math.exp(-0.5 * (self._miss / spread) ** 2)
        if result is None:
            return FAIL
        raw = float(result["raw"])
        if self.reward_kind == "original":
            return float(result["reward"])
        if self.reward_kind == "binary":
            return 1.0 if raw == 1.0 else -1.0
        return raw

    # -- the episode ----------------------------------------------------------------------------

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.task = self.load_task(seed)
        self._history: list[str] = []
        self._state = RunningDigest(self.task.id)
        self._turn, self._page_state = 0, ""
        self._target, self._miss = None, None
        self._nonce = secrets.token_hex(8)
        name = self.task.metadata["task"]
        site = shared_site()
        sandbox = await self.ctx.sandbox(SANDBOX_KIND)
        opened = await call_driver(
            sandbox, BROWSER, "goto", {"url": site.task_url(name), "site": [site.url, SITE_NAME]}
        )
        if not opened.get("ok"):
            raise SandboxError(
                f"the MiniWoB++ page {name!r} did not open in the browser sandbox: {opened.get('error')}"
            )
        start = (
            _START.replace("SEED", json.dumps(seed))
            .replace("NONCE", json.dumps(self._nonce))
            .replace("LIMIT", json.dumps(self.time_limit_ms))
        )
        started = await self._evaluate(start, pin=True)
        if not started.get("ok"):
            raise SandboxError(f"the MiniWoB++ task {name!r} did not start: {started.get('error')}")
        # The task's clock runs from here, so nothing is asked of the page that the start did not
        # already answer; only tasks that load data first (WOB_TASK_READY false) are polled.
        ready = started
        for _ in range(40):
            if ready.get("ok") and ready["value"]["ready"]:
                break
            await asyncio.sleep(0.05)
            ready = await self._evaluate(_READY)
        else:
            raise SandboxError(f"the MiniWoB++ task {name!r} did not become ready within 2 s")
        instruction = ready["value"]["query"]
        part = None
        if self.observation == "axtree":
            page = await call_driver(sandbox, BROWSER, "observe", {})
        else:
            part, page = await snapshot(
                self.ctx,
                sandbox,
                BROWSER,
                marks=self.observation == "screenshot" and not self.coordinates_only,
                selector=TASK_AREA,
                scale=self.screenshots.scale,
            )
        await self._probe()
        if self.reward_kind == "distance":
            self._target = await self._solver_point()
        self.task.question = instruction
        first = observation_content(
            self.observation, f"Task: {instruction}\n\nThe page:\n{page.get('text', '')}", part
        )
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": first},
        ]
        return messages, {
            "task_id": self.task.id,
            "miniwob_task": name,
            "instruction": instruction,
            "time_limit_ms": started["value"]["limit_ms"],
        }

    def anchor(self) -> str:
        assert self.task is not None
        return digest(self.task.id, self._page_state)

    def _end(
        self, result: StepResult, outcome: dict[str, Any], reason: str, *, left: bool = False
    ) -> StepResult:
        found = outcome.get("result")
        raw = float(found["raw"]) if found else FAIL
        result.reward = self._score(found, left=left)
        result.terminated = True
        result.info.update(miniwob_reason=reason, raw_reward=raw, success=raw > 0)
        if found:
            result.info.update(env_reward=float(found["reward"]), page_reason=found.get("reason"))
        return result

    async def step(self, action: Action) -> StepResult:
        assert self.task is not None, "reset() first"
        self._turn += 1
        if action.kind is ActionKind.ANSWER:
            outcome = await self._probe()
            result = StepResult(observation=[], info={"answer": action.answer or action.text})
            if outcome.get("result") and not outcome.get("left"):
                return self._end(result, outcome, "done")
            return self._end(result, {}, "the agent stopped before the task ended")
        if self.reward_kind == "distance":
            self._aim(action)
        result = await super().step(action)
        if self._miss is not None:
            result.info["miss_px"] = round(self._miss, 1)
        outcome = await self._probe()
        if outcome.get("left"):
            return self._end(result, {}, "the task page was left, reloaded or closed", left=True)
        if outcome.get("result"):
            return self._end(result, outcome, "done")
        if self._turn >= self.max_turns:
            return self._end(result, {}, "turn limit (counted as the task's time-out)")
        if self.reward_kind == "distance":
            self._target = await self._solver_point()
        if isinstance(result.observation, list):  # the page as the turn left it, for the next model call
            await attach(
                self.ctx,
                await self.ctx.sandbox(SANDBOX_KIND),
                BROWSER,
                self.observation,
                result.observation,
                selector=TASK_AREA,
                scale=self.screenshots.scale,
                marks=not self.coordinates_only,
            )
        return result

    def _aim(self, action: Action) -> None:
        """``distance``: note how far the action's first point call is from the solver's point
        (a call that names no point, or a page the solver had no point on, leaves the last miss)."""
        call = next((c for c in action.tool_calls if c.name in POINT_TOOLS), None)
        if call is None or self._target is None:
            return
        x, y = call.arguments.get("x"), call.arguments.get("y")
        if (
            not (isinstance(x, int | float) and isinstance(y, int | float))
            or isinstance(x, bool)
            or isinstance(y, bool)
        ):
            return  # the tool refuses it too
        if math.isfinite(x) and math.isfinite(y):
            self._miss = math.hypot(x - self._target[0], y - self._target[1])

    async def _solver_point(self) -> tuple[float, float] | None:
        """Where the task's scripted solver would click or type on the page now, in screenshot pixels."""
        assert self.task is not None
        script = solver_script(self.task.metadata["task"], self.screenshots.scale)
        reply = await self._evaluate(script) if script is not None else {}
        action = reply.get("value") if reply.get("ok") else None
        if not action or action.get("tool") not in POINT_TOOLS:
            return None
        return float(action["args"]["x"]), float(action["args"]["y"])

    async def scripted_action(self) -> str | None:
        """The scripted solver's next action for this task (None when the task has none)."""
        assert self.task is not None
        scale = self.screenshots.scale if self.coordinates_only else None
        script = solver_script(self.task.metadata["task"], scale)
        if script is None:
            return None
        reply = await self._evaluate(script)
        action = reply.get("value") if reply.get("ok") else None
        return action_text(action) if action else None
