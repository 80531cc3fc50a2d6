"""The environment's contract on a local sandbox: reset, tool steps, invalid actions, anchors,
submit and autosubmit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.parsing.base import HermesParser
from toolgym.core.registry import Registry
from toolgym.plugins.swe.env import SWEEnv
from toolgym.sandboxes.pool import PooledBackend


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class Episode:
    """An environment bound to a fresh episode context, stepped with model-style text."""

    def __init__(self, backend: PooledBackend, runner: asyncio.Runner, **kwargs: Any) -> None:
        self.runner = runner
        self.registry = Registry.load()
        self.ctx = EpisodeContext(episode_id="test", sandbox_backend=backend, registry=self.registry)
        self.env = SWEEnv(**kwargs)
        self.env.bind(self.ctx)
        self.parser = HermesParser()

    def reset(self, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return self.runner.run(self.env.reset(seed=seed))

    def step(self, text: str) -> Any:
        action = self.parser.parse(text, {t.name: t for t in self.env.tools})
        return self.runner.run(self.env.step(action))

    def close(self) -> None:
        self.runner.run(self.ctx.aclose())


def test_reset_checks_out_the_base_without_hidden_tests(
    local_backend: PooledBackend, runner: asyncio.Runner
) -> None:
    ep = Episode(local_backend, runner, instance_ids="toolgym__confparse-1")
    try:
        messages, info = ep.reset(seed=7)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert (
            "Option values are cut at the second `=`" in messages[1]["content"]
            and "/workspace" in messages[1]["content"]
        )
        assert info["task_id"] == "toolgym__confparse-1" and info["base_commit"] == ep.env.task.base_commit
        assert [t.name for t in ep.env.tools] == ["bash", "str_replace_editor", "search", "submit"]
        log = ep.step(call("bash", command="git log --oneline | wc -l; git status --porcelain | wc -l; pwd"))
        assert log.valid and log.observation[0]["content"].split() == ["1", "0", "/workspace"]
        hidden = ep.step(call("search", pattern="test_values_may_contain_equals_signs"))
        assert "No matches" in hidden.observation[0]["content"]
        tests = ep.step(call("bash", command="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -n 1"))
        assert (
            " passed" in tests.observation[0]["content"] and "failed" not in tests.observation[0]["content"]
        )
    finally:
        ep.close()


def test_invalid_actions_are_steps_with_errors(local_backend: PooledBackend, runner: asyncio.Runner) -> None:
    ep = Episode(local_backend, runner, instance_ids="toolgym__seqtools-1")
    try:
        ep.reset()
        no_call = ep.step("I think the bug is in windowed.")
        assert (
            not no_call.valid
            and not no_call.terminated
            and "No tool call" in no_call.observation[0]["content"]
        )
        malformed = ep.step("<tool_call>{not json</tool_call>")
        assert not malformed.valid and malformed.observation[0]["content"].startswith("Error:")
        unknown = ep.step(call("rm_rf", path="/"))
        assert not unknown.valid and "unknown tool" in unknown.observation[0]["content"]
        bad_args = ep.step(call("str_replace_editor", command="view"))
        assert not bad_args.valid and "path" in bad_args.observation[0]["content"]
        failing = ep.step(call("str_replace_editor", command="view", path="/workspace/missing.py"))
        assert not failing.valid and failing.tool_calls[0].error
        assert ep.env.turns == 5 and not failing.terminated
    finally:
        ep.close()


def test_anchor_follows_the_repository_state(local_backend: PooledBackend, runner: asyncio.Runner) -> None:
    ep = Episode(local_backend, runner, instance_ids="toolgym__textkit-2")
    try:
        ep.reset()
        start = ep.env.anchor()
        ep.step(call("search", pattern="placeholder"))
        after_search = ep.env.anchor()
        ep.step(call("search", pattern="placeholder"))
        assert ep.env.anchor() == after_search != start  # same state, same observation
        clean = ep.env._diff
        ep.step(call("bash", command="echo x >> README.md"))
        edited = ep.env._diff
        assert edited != clean
        ep.step(call("bash", command="git checkout -q README.md"))
        assert ep.env._diff == clean  # back to the base: the digest of the fresh checkout
        ep.step(call("bash", command="echo x >> README.md"))
        assert ep.env._diff == edited  # the same diff digests the same
    finally:
        ep.close()


def test_submit_grades_the_diff(local_backend: PooledBackend, runner: asyncio.Runner) -> None:
    ep = Episode(local_backend, runner, instance_ids="toolgym__minicache-2")
    try:
        ep.reset()
        ep.step(
            call(
                "str_replace_editor",
                command="str_replace",
                path="/workspace/minicache/memo.py",
                old_str="def memoize(func=None, *, cache={}):",
                new_str="def memoize(func=None, *, cache=None):",
            )
        )
        ep.step(
            call(
                "str_replace_editor",
                command="str_replace",
                path="/workspace/minicache/memo.py",
                old_str="        store = cache\n",
                new_str="        store = {} if cache is None else cache\n",
            )
        )
        ep.step(call("bash", command="echo scratch > notes.txt"))  # new files are part of the patch too
        done = ep.step(call("submit"))
        assert done.terminated and done.reward == 1.0 and done.info["status"] == "resolved"
        assert "notes.txt" in done.info["patch"] and "cache=None" in done.info["patch"]
        assert done.tool_calls[-1].name == "submit" and "resolves" in done.observation[-1]["content"]
    finally:
        ep.close()
    ep = Episode(local_backend, runner, instance_ids="toolgym__minicache-2")
    try:
        ep.reset()
        nothing = ep.step(call("submit"))
        assert nothing.terminated and nothing.reward == 0.0 and nothing.info["status"] == "empty_patch"
    finally:
        ep.close()


def test_autosubmit_at_the_turn_limit(local_backend: PooledBackend, runner: asyncio.Runner) -> None:
    ep = Episode(local_backend, runner, instance_ids="toolgym__seqtools-2", max_turns=2)
    try:
        ep.reset()
        first = ep.step(
            call(
                "bash",
                command="sed -i 's/(last_start, end)/(last_start, max(last_end, end))/' "
                "seqtools/intervals.py",
            )
        )
        assert not first.terminated and not first.truncated
        last = ep.step(call("search", pattern="max(last_end"))
        assert last.truncated and not last.terminated and last.reward == 1.0
        assert last.info["submitted"] is False and "autosubmit" in last.info["truncation_reason"]
    finally:
        ep.close()
    ep = Episode(local_backend, runner, instance_ids="toolgym__seqtools-2", max_turns=1, autosubmit="false")
    try:
        ep.reset()
        assert not ep.step(call("search", pattern="x")).truncated  # the engine's turn limit ends it, ungraded
    finally:
        ep.close()


def test_submit_refuses_unknown_arguments(local_backend: PooledBackend, runner: asyncio.Runner) -> None:
    """A submit call with arguments it does not take (sent as a structured call, which no parser
    checked) is an invalid step with an error naming the argument; the episode goes on."""
    from toolgym.core.types import Action, ActionKind, ToolCall

    ep = Episode(local_backend, runner, instance_ids="toolgym__minicache-2")
    try:
        ep.reset()
        action = Action(
            "", ActionKind.TOOL_CALLS, tool_calls=[ToolCall("submit", {"patch": "diff --git a b"})]
        )
        result = runner.run(ep.env.step(action))
        assert not result.terminated and not result.truncated and result.valid is False
        assert "unexpected argument 'patch'" in result.observation[-1]["content"]
        assert result.tool_calls[-1].name == "submit" and result.tool_calls[-1].error
        done = runner.run(ep.env.step(Action("", ActionKind.TOOL_CALLS, tool_calls=[ToolCall("submit", {})])))
        assert done.terminated and done.info["status"] == "empty_patch"
    finally:
        ep.close()
