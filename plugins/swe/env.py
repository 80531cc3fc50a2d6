"""``swe``: fix an issue in a repository checked out in a sandbox; graded as SWE-bench grades.

An episode: ``reset`` checks the repository out at the task's base commit in ``/workspace`` and
shows the issue. Each turn the model calls tools: ``bash`` (the code plugin's persistent shell),
``str_replace_editor``, ``search``, ``submit``. ``submit`` ends the episode: the diff of the work
tree against the base is the candidate patch, graded in a fresh state (``harness.evaluate``):
reward 1 when every FAIL_TO_PASS and PASS_TO_PASS test passes, else 0. A turn without a tool
call, or with a malformed one, is an invalid step with an error message. With ``autosubmit``
(default) the turn that reaches the environment's ``max_turns`` grades the diff too, and the
episode ends truncated; keep the engine's ``--max-turns`` at least as high, or the engine stops
first and the episode ends ungraded with reward 0.

Arguments (strings accepted, as ``--env-arg key=value`` passes them):

- ``dataset``: ``shipped`` (the project's own bugs) or a ``.json`` / ``.jsonl`` / ``.parquet``
  file of SWE-bench, SWE-Gym or SWE-smith rows (their Docker images must be on the host);
- ``family``: ``auto`` | ``swebench`` | ``swegym`` | ``swesmith``; ``instance_ids``: comma-separated;
- ``image_namespace``: Docker Hub namespace of the images (``""``: SWE-bench's local build names);
- ``test_cmd``: replaces every task's test command; ``test_timeout_s``: seconds for grading
  (``test_timeout``: its old name, still accepted with a warning);
- ``max_turns`` (30), ``autosubmit`` (true), ``show_hints`` (false), ``bash_tool`` (``bash``).

Anchor (GiGPO): a digest of the task, the repository's diff against the base and the last
observation (durations, addresses and temporary paths masked, since they differ between runs), so
equal repository states reached through equal observations group together.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym import (
    Action,
    ActionKind,
    ConfigError,
    Env,
    EpisodeContext,
    ImageNeed,
    Message,
    Sandbox,
    StepResult,
    Tool,
    ToolArgumentError,
    ToolCallRecord,
    ToolOutput,
    digest,
    parse_flag,
    split_position,
)
from toolgym.plugins.swe import harness, oracle, scripts
from toolgym.plugins.swe.datasets import base_files, images_command, load_tasks, select, shipped_tasks
from toolgym.plugins.swe.provision import PYTEST_ZIP
from toolgym.plugins.swe.task import SWETask, sandbox_kind
from toolgym.plugins.swe.tools import SWE_TOOLS

SYSTEM_PROMPT = """You are a software engineer fixing an issue in a Python repository. The repository is a git \
checkout at /workspace in a sandbox.

Tools:
- bash: run shell commands; the working directory and exported variables persist between calls.
- str_replace_editor: view, create and edit files (absolute paths).
- search: find text in the repository's files.
- submit: hand in your changes when you are done. This ends the task.

Find the code involved, reproduce the problem if you can, make a minimal fix to the non-test code, check it, \
then call submit. Call one tool per turn."""

NO_CALL = (
    "No tool call found. Work on the repository with the tools (bash, str_replace_editor, search) and call "
    "submit when the issue is fixed."
)
EDITING_COMMANDS = {"create", "str_replace", "insert", "undo_edit"}
FILE_TOOLS = {"str_replace_editor", "search", "submit"}
"""Tools that change the repository only through an editing command (anything else may change it)."""
VOLATILE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|sec|seconds)\b|\b0x[0-9a-f]{6,}\b|/tmp/[^\s'\"]+")
"""Run-to-run noise in observations (durations, object addresses, temporary paths), masked in anchors."""
CLEAN_DIFF = hashlib.sha1(b"").hexdigest()[:16]
"""``harness.diff_digest`` of a repository without changes."""


def _number(value: Any, name: str, kind: type = int) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if number <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
    return number


class SWEEnv(Env):
    """Issue-fixing episodes over a list of SWE tasks; seed ``s`` plays task ``s % len(tasks)``."""

    parser = "hermes"

    def __init__(
        self,
        dataset: str = "shipped",
        family: str = "auto",
        instance_ids: str | Sequence[str] | None = None,
        max_turns: int | str = 30,
        autosubmit: bool | str = True,
        bash_tool: str = "bash",
        image_namespace: str | None = None,
        test_cmd: str | None = None,
        test_timeout_s: float | str = 900.0,
        show_hints: bool | str = False,
        test_timeout: float | str | None = None,
    ) -> None:
        ids = (
            [i.strip() for i in instance_ids.split(",") if i.strip()]
            if isinstance(instance_ids, str)
            else instance_ids
        )
        if dataset == "shipped":
            if test_cmd:
                raise ConfigError(
                    "test_cmd applies to dataset files; the shipped tasks have their own command"
                )
            self.tasks: list[SWETask] = select(list(shipped_tasks()), ids)
        else:
            self.tasks = load_tasks(
                dataset, family, instance_ids=ids, image_namespace=image_namespace, test_cmd=test_cmd
            )
        self.images_command = images_command(dataset, family, image_namespace)
        if not self.tasks:
            raise ConfigError(f"the dataset {dataset!r} holds no tasks")
        self.max_turns = _number(max_turns, "max_turns")
        self.autosubmit = parse_flag(autosubmit, "autosubmit", default=True)
        self.show_hints = parse_flag(show_hints, "show_hints", default=False)
        if test_timeout is not None:
            warnings.warn(
                "the swe option test_timeout is deprecated: write test_timeout_s (the old name goes in toolgym 0.2)",
                FutureWarning,
                stacklevel=2,
            )
            test_timeout_s = test_timeout
        self.test_timeout_s = _number(test_timeout_s, "test_timeout_s", float)
        self.bash_tool = bash_tool
        self.tools: list[Tool] = list(SWE_TOOLS)
        self.task: SWETask | None = None
        self.sandbox: Sandbox | None = None
        self.base = ""
        self.turns = 0
        self._last_obs = ""
        self._diff = CLEAN_DIFF
        self._plan: list[str] | None = None
        self._planned = 0

    @property
    def num_tasks(self) -> int | None:
        return len(self.tasks)

    def sandbox_images(self, seeds: Sequence[int]) -> list[ImageNeed]:
        """The per-instance images of the seeds' tasks (none for the shipped tasks), each with the
        ``toolgym swe images`` command that builds it."""
        from toolgym.plugins.swe.images import image_needs

        return image_needs(
            [self.tasks[split_position(s, len(self.tasks))] for s in seeds], self.images_command
        )

    def bind(self, ctx: EpisodeContext) -> None:
        super().bind(ctx)
        if ctx.registry is None or self.bash_tool not in ctx.registry.tools:
            raise ConfigError(
                f"the swe environment needs the {self.bash_tool!r} tool (toolgym's code plugin); "
                "install toolgym with its built-in plugins or give bash_tool=<another shell tool>"
            )
        self.tools = [ctx.registry.tools[self.bash_tool], *SWE_TOOLS]

    # -- episode -------------------------------------------------------------------------------

    def _kind(self, task: SWETask) -> str:
        if task.shipped:
            return "shell"
        assert task.image is not None
        kind = sandbox_kind(task.image)
        from toolgym import DEFAULT_PROFILES, GiB, SandboxProfile, register_profile

        if kind not in DEFAULT_PROFILES:
            register_profile(
                kind,
                SandboxProfile(
                    image=task.image,
                    memory_bytes=8 * GiB,
                    cpus=2.0,
                    pids=1024,
                    workdir_bytes=8 * GiB,
                    tmp_bytes=2 * GiB,
                    default_timeout_s=600.0,
                ),
            )
        return kind

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.task = task = self.tasks[split_position(seed, len(self.tasks))]
        self.sandbox = sb = await self.ctx.sandbox(self._kind(task))
        self.base = await harness.checkout(sb, task, timeout=self.test_timeout_s)
        setup = f"cd {harness.WORKDIR}"
        if task.shipped:
            setup += f"; if [ -f {PYTEST_ZIP} ]; then export PYTHONPATH={PYTEST_ZIP}; fi"
        else:
            setup += f"; {scripts.CONDA}"
        await (await sb.shell()).run(setup, timeout=120)
        self.turns, self._diff, self._plan, self._planned = 0, CLEAN_DIFF, None, 0
        hints = (
            f"\n\nHints from the issue's discussion:\n{task.hints_text}"
            if self.show_hints and task.hints_text
            else ""
        )
        user = (
            f"<issue>\n{task.problem_statement.strip()}\n</issue>{hints}\n\nThe repository {task.repo} is checked "
            f"out at {harness.WORKDIR}. Change its non-test code so that the issue is resolved; tests you cannot "
            "see will check the fix. Call submit when you are done."
        )
        self._last_obs = user
        info = {
            "task_id": task.instance_id,
            "repo": task.repo,
            "base_commit": self.base,
            "family": task.family,
            "fail_to_pass": len(task.fail_to_pass),
            "pass_to_pass": len(task.pass_to_pass),
        }
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}], info

    def anchor(self) -> str:
        assert self.task is not None
        return digest(self.task.instance_id, self._diff, VOLATILE.sub("#", self._last_obs))

    async def step(self, action: Action) -> StepResult:
        assert self.task is not None and self.sandbox is not None, "reset() first"
        self.turns += 1
        records: list[ToolCallRecord] = []
        messages: list[Message] = []
        valid = True
        info: dict[str, Any] = {}
        if (
            action.kind is ActionKind.INVALID
            or action.kind is not ActionKind.TOOL_CALLS
            or not action.tool_calls
        ):
            valid = False
            error = action.error if action.kind is ActionKind.INVALID else NO_CALL
            info["error"] = error
            messages.append(
                {"role": "user", "content": f"Error: {error}" if action.kind is ActionKind.INVALID else error}
            )
        else:
            by_name = {t.name: t for t in self.tools}
            changed = False
            for call in action.tool_calls:
                tool = by_name.get(call.name)
                if call.name == "submit":
                    try:  # submit runs no function, but its arguments are checked like any tool's
                        if tool is not None:
                            tool.validate(call.arguments)
                    except ToolArgumentError as exc:
                        out = ToolOutput(str(exc), error=True)
                    else:
                        return await self._finish(records, messages, submitted=True, valid=valid)
                elif tool is None:
                    out = ToolOutput(
                        f"Error: unknown tool {call.name!r}; available: {', '.join(by_name)}", error=True
                    )
                else:
                    out = await tool.call(call.arguments, sandbox=self.sandbox, ctx=self.ctx)
                    changed |= (
                        call.name not in FILE_TOOLS or call.arguments.get("command") in EDITING_COMMANDS
                    )
                records.append(
                    ToolCallRecord(
                        name=call.name,
                        arguments=call.arguments,
                        output=out.text,
                        error=out.error,
                        duration_s=out.duration_s,
                        files=out.files,
                    )
                )
                messages.append({"role": "tool", "name": call.name, "content": out.text})
                valid = valid and not out.error
            if changed:
                self._diff = await harness.diff_digest(self.sandbox, self.base)
        if self.autosubmit and self.turns >= self.max_turns:
            return await self._finish(records, messages, submitted=False, valid=valid, info=info)
        self._last_obs = "\n".join(str(m["content"]) for m in messages)
        return StepResult(observation=messages, tool_calls=records, valid=valid, info=info)

    async def _finish(
        self,
        records: list[ToolCallRecord],
        messages: list[Message],
        *,
        submitted: bool,
        valid: bool = True,
        info: dict[str, Any] | None = None,
    ) -> StepResult:
        """Grade the work tree's diff and end the episode (terminated on submit, else truncated).
        ``valid`` and ``info`` carry what the rest of the step found."""
        assert self.task is not None and self.sandbox is not None
        patch: str | None = None
        evaluation: harness.Evaluation | None = None
        error: str | None = None
        try:
            patch = await harness.candidate_patch(self.sandbox, self.base)
        except Exception as exc:  # the agent broke the repository (.git removed) or the sandbox
            error = f"{type(exc).__name__}: {exc}"
        else:
            evaluation = await harness.evaluate(self.sandbox, self.task, patch, timeout=self.test_timeout_s)
        reward = 1.0 if evaluation is not None and evaluation.resolved else 0.0
        info = {**(info or {}), "submitted": submitted, "resolved": bool(reward), "patch": patch}
        if evaluation is not None:
            info.update(evaluation.summary())
        else:
            info.update(status="no_patch", error=error)
        text = (
            (
                f"Submitted. The patch {'resolves' if reward else 'does not resolve'} the issue "
                f"({info['status']})."
            )
            if submitted
            else f"Turn limit reached: the current diff was graded ({info['status']})."
        )
        records.append(
            ToolCallRecord(
                name="submit",
                arguments={},
                output=text,
                error=False,
                duration_s=evaluation.duration_s if evaluation else 0.0,
            )
        )
        messages.append({"role": "tool", "name": "submit", "content": text})
        if not submitted:
            info["truncation_reason"] = (
                f"turn limit ({self.max_turns}) reached; the diff was graded (autosubmit)"
            )
        return StepResult(
            observation=messages,
            reward=reward,
            terminated=submitted,
            truncated=not submitted,
            info=info,
            tool_calls=records,
            valid=valid,
        )

    async def scripted_action(self) -> str | None:
        """The oracle's next turn (see ``oracle``): gold patch through the editor, tests, submit."""
        assert self.task is not None and self.sandbox is not None
        if self._plan is None:
            if self.task.shipped:
                files = base_files(self.task)
                base: dict[str, str | None] = {p: files.get(p) for p in oracle.touched_files(self.task)}
            else:
                base = {}
                for path in oracle.touched_files(self.task):
                    try:
                        base[path] = (await self.sandbox.read_file(f"{harness.WORKDIR}/{path}")).decode(
                            "utf-8"
                        )
                    except (FileNotFoundError, UnicodeDecodeError):
                        base[path] = None
            self._plan = oracle.plan(self.task, base, bash_tool=self.bash_tool)
        turn = self._plan[min(self._planned, len(self._plan) - 1)]
        self._planned += 1
        return turn
