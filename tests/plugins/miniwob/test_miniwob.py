"""The MiniWoB++ environment: task lists, scripted solvers over many seeds, the reward read from
core.js, and what a policy might try to forge a score (Docker: the browser needs its image)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from toolgym.plugins.miniwob.env import SITE_NAME, MiniWoBEnv
from toolgym.plugins.miniwob.site import shared_site
from toolgym.plugins.miniwob.solvers import SOLVERS
from toolgym.plugins.miniwob.tasks import UNSUPPORTED, shipped_tasks, supported_tasks, task_list
from toolgym.sandboxes.pool import PooledBackend

ISSUE_TASKS = (
    "click-button",
    "click-link",
    "enter-text",
    "click-checkboxes",
    "choose-list",
    "click-option",
    "login-user",
    "focus-text",
    "click-tab",
    "enter-password",
)


# -- task lists (no browser) -------------------------------------------------------------------


def test_task_lists_come_from_the_installed_package() -> None:
    shipped = shipped_tasks()
    assert len(shipped) > 100 and "click-button" in shipped
    assert set(UNSUPPORTED) <= set(shipped), "every refused task is one the package ships"
    assert set(supported_tasks()) == set(shipped) - set(UNSUPPORTED)
    assert set(ISSUE_TASKS) <= set(SOLVERS) and set(task_list("solvable")) == set(SOLVERS)
    assert set(task_list("reported")) <= set(supported_tasks()) and len(task_list("reported")) > 40


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("drag-box", "not offered: it needs pointer coordinates"),
        ("click-color", "not offered: what matters in it is drawn"),
        ("no-such-task", "unknown MiniWoB++ task 'no-such-task'"),
        (" , ", "tasks is empty"),
    ],
)
def test_bad_task_names_are_one_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        MiniWoBEnv(tasks=spec)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reward": "shaped"}, "reward must be one of raw, original, binary"),
        ({"time_limit": "soon"}, "time_limit must be 'task' or a number of seconds"),
        ({"time_limit": "-1"}, "time_limit must be positive"),
    ],
)
def test_bad_options_are_one_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MiniWoBEnv(task="click-button", **kwargs)


def test_the_site_serves_the_shipped_pages_read_only() -> None:
    import urllib.error
    import urllib.request

    site = shared_site()
    page = urllib.request.urlopen(site.task_url("click-button"), timeout=10).read().decode()
    assert "../core/core.js" in page and "genProblem" in page
    assert b"core.endEpisode" in urllib.request.urlopen(f"{site.url}/core/core.js", timeout=10).read()
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"{site.url}/miniwob/", timeout=10)  # no listings
    with pytest.raises(urllib.error.HTTPError, match="501"):
        urllib.request.urlopen(
            urllib.request.Request(site.task_url("click-button"), data=b"x", method="POST"), timeout=10
        )


# -- in the browser ----------------------------------------------------------------------------

RUNNER = asyncio.Runner()
"""One event loop for the module: pooled sandboxes belong to the loop that made them."""


def _run(coro: Any) -> Any:
    return RUNNER.run(coro)


@pytest.fixture(scope="module")
def backend() -> Iterator[PooledBackend]:
    b = make_backend("docker", images=("browser",), max_idle=8)
    yield b
    _run(b.aclose())


def _collect(backend: PooledBackend, env_kwargs: dict[str, Any], n: int, chat: Any) -> list[Any]:
    async def run() -> list[Any]:
        out: list[Any] = []
        engine = RolloutEngine(
            registry=get_registry(),
            policy=ScriptedPolicy(chat),
            config=EngineConfig(max_live_episodes=8, max_sandboxes=8),
            sandbox_backend=backend,
            env_kwargs=env_kwargs,
            on_trajectory=out.append,
        )
        await engine.run(plan_episodes("miniwob", num_tasks=n, group_size=1))
        return out

    return _run(run())


SEEDS_PER_TASK = 2
"""Seeds of each solvable task in CI; bench/miniwob_solvers.py plays 100 of each under the tasks'
own time limits (bench/results/miniwob_solvers.json)."""


def test_scripted_solvers_succeed_on_every_solvable_task(backend: PooledBackend, qwen_chat: Any) -> None:
    """Every solver wins its first seeds (seed i plays task i mod 16), the score being what core.js
    computed in the page. The page's clock is given 60 s here, so that a loaded CI machine tests
    the solvers, not its own speed; the benchmark keeps the tasks' limits."""
    tasks = task_list("solvable")
    n = SEEDS_PER_TASK * len(tasks)
    trajectories = _collect(backend, {"tasks": "solvable", "time_limit": 60}, n, qwen_chat)
    assert len(trajectories) == n
    lost = []
    for t in trajectories:
        assert t.status == "ok", (t.seed, t.status, t.status_reason)
        last = t.steps[-1].info
        assert t.terminated and last["miniwob_reason"] == "done", (t.seed, last)
        assert t.reward == last["raw_reward"] and -1 <= t.reward <= 1
        assert t.metadata["env_info"]["time_limit_ms"] == 60_000
        if not last["success"]:
            lost.append((t.metadata["env_info"]["miniwob_task"], t.seed, last.get("page_reason")))
    assert not lost, f"solvers lost (task, seed, core.js reason): {lost}"


_CENTRE_COVERED = """() => {
  const b = document.getElementById('subbtn'), r = b.getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return hit !== b && !b.contains(hit);
}"""


@pytest.mark.parametrize(("task", "seed"), [("click-test-2", 57), ("click-button-sequence", 34)])
def test_a_button_covered_by_another_is_reached_with_the_keyboard(
    backend: PooledBackend, task: str, seed: int
) -> None:
    """These tasks place their two buttons at random, and on these seeds TWO covers the centre of
    ONE, where a click lands (the browser refuses it: another element would receive it). The
    solver tabs to ONE and presses Enter, as a person would; a clicking solver loses them."""

    async def body(ep: Episode) -> tuple[list[str], Any]:
        await ep.reset(seed=seed)
        covered = await ep.env._evaluate(_CENTRE_COVERED)
        assert covered["value"] is True, f"seed {seed} no longer covers ONE's centre; pick a seed that does"
        tools, step = [], None
        while step is None or not step.terminated:
            text = await ep.env.scripted_action()
            assert text is not None
            tools.append(json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])["name"])
            step = await ep.solve_step_from(text)
        return tools, step

    tools, step = _episode(backend, body, task=task, time_limit=60)
    assert step.info["success"] and step.reward == 1.0, (tools, step.info)
    assert tools[:2] == ["browser_press", "browser_press"], tools


class Episode:
    """One hand-driven episode: reset, then tool calls written by the test as a policy would."""

    def __init__(self, backend: PooledBackend, **kwargs: Any) -> None:
        self.env = MiniWoBEnv(**kwargs)
        self.ctx = EpisodeContext(
            episode_id="miniwob-attack", sandbox_backend=backend, registry=get_registry()
        )
        self.env.bind(self.ctx)

    async def reset(self, seed: int = 0) -> str:
        messages, _ = await self.env.reset(seed=seed)
        return str(messages[-1]["content"])

    async def call(self, name: str, **arguments: Any) -> Any:
        call = ToolCall(name=name, arguments=arguments)
        return await self.env.step(
            Action(text=json.dumps(arguments), kind=ActionKind.TOOL_CALLS, tool_calls=[call])
        )

    async def solve_step(self) -> Any:
        text = await self.env.scripted_action()
        assert text is not None
        return await self.solve_step_from(text)

    async def solve_step_from(self, text: str) -> Any:
        call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
        return await self.call(call["name"], **call["arguments"])

    async def close(self) -> None:
        await self.ctx.aclose()


def _episode(backend: PooledBackend, body: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        episode = Episode(backend, **kwargs)
        try:
            return await body(episode)
        finally:
            await episode.close()

    return _run(run())


def test_solving_another_task_page_does_not_score(backend: PooledBackend) -> None:
    """A hard task's agent opens an easy task's page in the same tab and solves that."""

    async def body(ep: Episode) -> Any:
        await ep.reset()
        page = await ep.call("browser_goto", url=shared_site().task_url("click-test"))
        assert not page.terminated or page.reward == -1
        return page

    step = _episode(backend, body, task="login-user")
    assert step.terminated and step.reward == -1.0 and not step.info["success"]
    assert "left" in step.info["miniwob_reason"]


def test_solving_in_another_tab_does_not_score(backend: PooledBackend) -> None:
    async def body(ep: Episode) -> Any:
        await ep.reset()
        opened = await ep.call("browser_new_tab", url=shared_site().task_url("click-test"))
        assert not opened.terminated, "the task page is still open in its tab"
        button = next(
            line for line in opened.observation[0]["content"].splitlines() if "button 'Click Me!'" in line
        )
        return await ep.call("browser_click", element_id=int(button.split("]")[0].split("[")[1]))

    step = _episode(backend, body, task="login-user")
    assert not (step.terminated and step.reward > 0), "a win on another page counted"


def test_reloading_the_task_page_ends_the_episode(backend: PooledBackend) -> None:
    async def body(ep: Episode) -> Any:
        await ep.reset()
        return await ep.call("browser_goto", url=shared_site().task_url("click-button"))

    step = _episode(backend, body, task="click-button")
    assert step.terminated and step.reward == -1.0 and "reloaded" in step.info["miniwob_reason"]


def test_only_the_first_result_of_the_instance_counts(backend: PooledBackend) -> None:
    """Fail the instance, start another from the page's own START cover, solve that one."""

    async def body(ep: Episode) -> Any:
        text = await ep.reset(seed=3)
        wrong = next(line for line in text.splitlines() if "button 'TWO'" in line)
        step = await ep.call("browser_click", element_id=int(wrong.split("]")[0].split("[")[1]))
        assert step.terminated and step.reward == -1.0  # the env ends here; a policy would go on:
        page = await ep.env._evaluate(
            "() => { document.getElementById('sync-task-cover').click(); "
            "document.getElementById('subbtn').click(); return WOB_RAW_REWARD_GLOBAL; }"
        )
        assert page["value"] == 1.0, "the page did score a second instance"
        return await ep.env._probe()

    probe = _episode(backend, body, task="click-test-2")
    assert probe["result"]["raw"] == -1.0, "the first instance's result is the episode's"


def test_stopping_or_running_out_of_turns_scores_the_time_out(backend: PooledBackend) -> None:
    async def stop(ep: Episode) -> Any:
        await ep.reset()
        return await ep.env.step(Action(text="I am done.", kind=ActionKind.ANSWER, answer="I am done."))

    step = _episode(backend, stop, task="click-button")
    assert step.terminated and step.reward == -1.0 and "stopped" in step.info["miniwob_reason"]

    async def dawdle(ep: Episode) -> Any:
        await ep.reset()
        return [await ep.call("browser_tabs") for _ in range(2)]

    steps = _episode(backend, dawdle, task="click-button", max_turns=2)
    assert not steps[0].terminated and steps[1].terminated and steps[1].reward == -1.0


def test_the_page_time_limit_and_reward_kinds(backend: PooledBackend) -> None:
    async def late(ep: Episode) -> Any:
        await ep.reset()
        await asyncio.sleep(1.5)
        return await ep.solve_step()

    step = _episode(backend, late, task="click-test", time_limit=1)
    assert step.terminated and step.reward == -1.0 and step.info["page_reason"] == "timed out"

    async def solve(ep: Episode) -> Any:
        await ep.reset()
        return await ep.solve_step()

    raw = _episode(backend, solve, task="click-test")
    original = _episode(backend, solve, task="click-test", reward="original")
    assert raw.reward == 1.0 and 0 < original.reward < 1.0 and original.reward == original.info["env_reward"]


def test_equal_seeds_give_equal_instances(backend: PooledBackend) -> None:
    async def first(ep: Episode) -> str:
        return await ep.reset(seed=11)

    a, b = (_episode(backend, first, task="enter-text") for _ in range(2))
    c = _episode(backend, lambda ep: ep.reset(seed=12), task="enter-text")
    query = [line for line in a.splitlines() if line.startswith("Task:")]
    assert query == [line for line in b.splitlines() if line.startswith("Task:")]
    assert query != [line for line in c.splitlines() if line.startswith("Task:")]


def test_the_agent_sees_the_site_by_name_and_no_clock(backend: PooledBackend) -> None:
    """The host's server listens on another port in every process, and the page's countdown ticks with
    the host's speed: neither may reach the model's tokens (two runs of one seed would differ). The
    observations name the site instead, the agent's URLs under that name open its pages, and the
    countdown's text stays at its first value."""

    async def body(ep: Episode) -> tuple[str, str, Any]:
        first = await ep.reset(seed=11)
        await asyncio.sleep(1.3)  # past the countdown's first tick
        later = (await ep.call("browser_tabs")).observation[0]["content"]
        return first, later, await ep.call("browser_goto", url=f"{SITE_NAME}/miniwob/click-button.html")

    first, later, goto = _episode(backend, body, task="click-button", time_limit=60)
    assert f"URL: {SITE_NAME}/miniwob/click-button.html" in first
    for seen in (first, later, goto.observation[0]["content"]):
        assert "127.0.0.1" not in seen and shared_site().url.rsplit(":", 1)[1] not in seen
    clock = [line.strip() for line in first.splitlines() if "sec'" in line]
    assert clock == ["StaticText '60 / 60sec'"], first
    assert clock == [line.strip() for line in later.splitlines() if "sec'" in line], later
    assert goto.terminated and "reloaded" in goto.info["miniwob_reason"], "the name opened the task page"


def test_the_browser_reaches_only_the_task_site(backend: PooledBackend) -> None:
    with TestSite() as other:

        async def body(ep: Episode) -> list[Any]:
            await ep.reset()
            return [
                await ep.call("browser_new_tab", url=url)
                for url in (
                    f"{other.url}/form",
                    "file:///etc/passwd",
                    "http://172.17.0.1:2375/version",
                    "http://example.com/",
                )
            ]

        steps = _episode(backend, body, task="click-button")
    for step, why in zip(
        steps, ("network allowlist", "give a full http", "allowlist", "allowlist"), strict=True
    ):
        text = step.observation[0]["content"]
        assert text.startswith("Error:") and why in text, text
        assert not step.valid


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
            "miniwob",
            "--model",
            "tiny",
            "--env-arg",
            "task=click-button",
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
