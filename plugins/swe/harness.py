"""The repository inside a sandbox: set it up at the task's base, read the candidate patch, grade.

All paths are inside the sandbox's work directory ``/workspace``, which holds the repository.

- ``checkout``: the work directory emptied, then the repository at the task's base commit: a
  shipped task's files are written and committed (deterministically: fixed identity and dates,
  so the commit id equals the task's ``base_commit``); an image task's ``/testbed`` is copied
  (SWE-smith: its bug patch applied and committed). Returns the base commit.
- ``candidate_patch``: ``git diff`` of the work tree against the base, new files included, taken
  through a scratch index so the agent's own staging is untouched (SWE-agent's submit).
- ``evaluate``: SWE-bench's evaluation in a clean state: the sandbox reset (every process killed,
  work directory, /tmp and home wiped) when it can be, the base checked out again, the candidate
  patch applied (``git apply``, then ``git apply --reject``, then ``patch --fuzz=5``) without the
  files that configure or extend the test run (``guard.filter_patch``), the install step re-run
  when the task has one, a patched pytest section of ``setup.cfg``/``pyproject.toml`` put back,
  the test files reset to the base and the test patch applied (last); then, in a second script,
  the test command run on the test directives between the markers, its exit status recorded
  after them, with toolgym's reporter (``sandbox_reporter.py``) when the command is pytest. The
  log is graded as swebench 5.0.2 grades it (``logs.grade_log``); a run the reporter flags, or a
  log claim it did not see, is ``tampered`` and not resolved.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any

from toolgym import Sandbox, SandboxError
from toolgym.plugins.swe import guard, provision
from toolgym.plugins.swe.datasets import base_files
from toolgym.plugins.swe.logs import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    END_TEST_OUTPUT,
    PARSERS,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TEST_EXIT_CODE_VAR,
    Report,
    grade_log,
    parse_test_exit_code,
)
from toolgym.plugins.swe.task import SWETask

WORKDIR = "/workspace"
STATE = ".git/toolgym"
"""Scratch files (patches, logs) live in the repository's .git, out of the work tree and its diffs."""

GIT_ENV = {
    "GIT_AUTHOR_NAME": "toolgym", "GIT_AUTHOR_EMAIL": "tasks@toolgym.invalid", "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "toolgym", "GIT_COMMITTER_EMAIL": "tasks@toolgym.invalid",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
}
"""Makes the base commit reproducible: same files → same commit id on every machine."""
INIT_AND_COMMIT = ('git -c init.defaultBranch=main init -q && git add -A && '
                   'git commit -q --no-verify -m "$TOOLGYM_COMMIT_MESSAGE" && git rev-parse HEAD')
CONDA = "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi"
"""SWE-bench images keep the repository's environment in the conda env ``testbed``."""
APPLY_CMDS = ("git apply --verbose", "git apply --verbose --reject", "patch --batch --fuzz=5 -p1 -i")


class HarnessError(SandboxError):
    """The repository could not be set up or read in the sandbox."""


def commit_message(repo: str, instance_id: str) -> str:
    return f"{repo}: base of {instance_id}"


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, text in sorted(files.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def _bash(sb: Sandbox, script: str, *, timeout: float, stdin: bytes | None = None,
                env: dict[str, str] | None = None, what: str) -> str:
    result = await sb.run(["bash", "-c", script], timeout=timeout, stdin=stdin, env=env, cwd=WORKDIR)
    if result.timed_out or result.exit_code != 0:
        reason = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        raise HarnessError(f"{what} failed in sandbox {sb.id} ({reason}): {result.output.strip()[-2000:]}")
    return result.stdout


async def checkout(sb: Sandbox, task: SWETask, *, timeout: float = 600.0) -> str:
    """Put the repository at the task's base into the emptied work directory; return the base commit."""
    wipe = f"find {WORKDIR} -mindepth 1 -delete"
    env = {**GIT_ENV, "TOOLGYM_COMMIT_MESSAGE": commit_message(task.repo, task.instance_id)}
    if task.shipped:
        out = await _bash(sb, f"set -e; {wipe}; tar -xf - -C {WORKDIR}; {INIT_AND_COMMIT}", stdin=_tar(base_files(task)),
                          env=env, timeout=timeout, what=f"checking out {task.instance_id}")
        head = out.strip().splitlines()[-1] if out.strip() else ""
        if head != task.base_commit:
            raise HarnessError(f"{task.instance_id}: the checked-out base is commit {head or '?'} but the task says "
                               f"{task.base_commit}; the shipped data is out of sync (python -m toolgym.plugins.swe.build)")
        if await provision.needs_pytest(sb):
            await provision.install_pytest(sb)
        return head
    copy = (f"set -e; if [ ! -d {task.repo_dir}/.git ]; then echo 'no git repository at {task.repo_dir} in this image' >&2; "
            f"exit 3; fi; {wipe}; cp -a {task.repo_dir}/. {WORKDIR}/; git rev-parse HEAD")
    head = (await _bash(sb, copy, env=GIT_ENV, timeout=timeout, what=f"copying {task.repo_dir} of {task.image}")).strip()
    if task.bug_patch:
        await sb.write_file(f"{STATE}/bug.patch", task.bug_patch)
        script = (f"set -e; git apply {STATE}/bug.patch; git add -A; "
                  'git commit -q --no-verify -m "$TOOLGYM_COMMIT_MESSAGE"; git rev-parse HEAD')
        return (await _bash(sb, script, env=env, timeout=timeout, what=f"applying the bug of {task.instance_id}")).strip()
    if task.base_commit and head != task.base_commit:
        raise HarnessError(f"{task.instance_id}: the repository in image {task.image} is at {head}, not at the task's "
                           f"base_commit {task.base_commit}; is this the instance's image?")
    return head


async def candidate_patch(sb: Sandbox, base: str, *, timeout: float = 120.0) -> str:
    """The work tree's changes against ``base`` as a patch (new files included; empty when none)."""
    script = (f"set -e; mkdir -p {STATE}; idx={STATE}/index.tmp; rm -f $idx; [ -f .git/index ] && cp .git/index $idx; "
              f"GIT_INDEX_FILE=$idx git add -A; GIT_INDEX_FILE=$idx git diff --cached --no-color --no-ext-diff "
              f"{shlex.quote(base)} > {STATE}/model.patch; rm -f $idx")
    await _bash(sb, script, env=GIT_ENV, timeout=timeout, what="reading the repository diff")
    return (await sb.read_file(f"{STATE}/model.patch")).decode("utf-8", errors="replace")


async def diff_digest(sb: Sandbox, base: str, *, timeout: float = 60.0) -> str:
    """A short digest of the work tree's changes against ``base`` (for anchors); ``?`` when unreadable."""
    script = (f"idx=/tmp/.toolgym-anchor-index; rm -f $idx; [ -f .git/index ] && cp .git/index $idx; "
              f"GIT_INDEX_FILE=$idx git add -A 2>/dev/null; GIT_INDEX_FILE=$idx git diff --cached --no-color "
              f"--no-ext-diff {shlex.quote(base)} 2>/dev/null | sha1sum; rm -f $idx")
    result = await sb.run(["bash", "-c", script], timeout=timeout, env=GIT_ENV, cwd=WORKDIR)
    return result.stdout.split()[0][:16] if result.ok and result.stdout.strip() else "?"


@dataclass(slots=True)
class Evaluation:
    """The outcome of grading one patch."""

    resolved: bool
    status: str
    """``resolved``, ``unresolved``, ``empty_patch``, ``patch_failed``, ``test_patch_failed``,
    ``setup_failed`` (the preparation script stopped), ``timeout``, ``log_rejected`` (SWE-bench would not grade the log: no results, or a non-zero
    exit with no failure reported) or ``tampered`` (the run was steered: see ``tampered``)."""
    report: Report = field(default_factory=Report)
    tests: dict[str, str] = field(default_factory=dict)
    """Parsed test statuses."""
    log: str = ""
    """The evaluation log (patch application and test output), possibly shortened in the middle."""
    duration_s: float = 0.0
    exit_code: int | None = None
    """The test command's exit status (``>>>>> Test Exit Code``), None when it did not run."""
    dropped: list[str] = field(default_factory=list)
    """Files of the patch left out because they configure or extend the test run (``guard``)."""
    tampered: list[str] = field(default_factory=list)
    """Why the run is not graded: what the reporter caught, or log lines it did not back."""

    def summary(self) -> dict[str, Any]:
        out = {"resolved": self.resolved, "status": self.status, "tests_status": self.report.as_dict(),
               "duration_s": round(self.duration_s, 3), "test_exit_code": self.exit_code}
        if self.dropped:
            out["dropped_files"] = self.dropped
        if self.tampered:
            out["tampered"] = self.tampered
        return out


def prepare_script(task: SWETask, base: str, config_files: list[str]) -> str:
    """The bash run after checkout: apply the candidate, the install step, the configuration
    guard, then the instance's test files reset and its test patch applied (last)."""
    model = f"{STATE}/model.patch"
    tries = " || ".join(f"{cmd} {model}" for cmd in APPLY_CMDS)
    lines = ["set -uo pipefail", CONDA, f"cd {WORKDIR}",
             f'if [ -s {model} ]; then {{ {tries}; }} || {{ echo "{APPLY_PATCH_FAIL}"; exit 90; }}; fi',
             f'echo "{APPLY_PATCH_PASS} (pred)"']
    if task.install_cmd:  # as SWE-bench's eval script: run after the patch, its failure does not stop grading
        lines += [f"( {task.install_cmd} ) </dev/null", 'echo ">>>>> Install Exit Code: $?"']
    if config_files:
        lines.append(guard.config_guard_script(config_files, base))
    if task.test_files():
        lines.append(f"git checkout -q {shlex.quote(base)} -- {' '.join(shlex.quote(f) for f in task.test_files())}")
    if task.test_patch.strip():
        lines.append(f'git apply --verbose {STATE}/test.patch || {{ echo ">>>>> Test Patch Apply Failed"; exit 91; }}')
    lines.append(f"rm -rf {guard.GRADE_DIR}")
    return "\n".join(lines) + "\n"


def test_script(task: SWETask, reporter: str | None) -> str:
    """The bash that runs the tests between the markers and records their exit status after them
    (SWE-bench 5.0.2's ``>>>>> Test Exit Code``); ``reporter``: the reporter's module, when the
    command is a pytest one."""
    command = task.test_cmd
    if reporter is not None:
        command = guard.inject_reporter(command, reporter) or command
        command = f'PYTHONPATH="{guard.GRADE_DIR}${{PYTHONPATH:+:$PYTHONPATH}}" PYTHONNOUSERSITE=1 {command}'
    command = " ".join([command, *(shlex.quote(d) for d in task.test_directives())])
    return "\n".join(["set -uo pipefail", CONDA, f"cd {WORKDIR}", f'echo "{START_TEST_OUTPUT}"', command,
                      f"{TEST_EXIT_CODE_VAR}=$?", f'echo "{END_TEST_OUTPUT}"',
                      f"cp {guard.RESULT_FILE} {STATE}/result.json 2>/dev/null",
                      f'echo "{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}"', f"exit ${TEST_EXIT_CODE_VAR}"]) + "\n"


test_script.__test__ = False  # type: ignore[attr-defined]


async def reset_sandbox(sb: Sandbox) -> None:
    """Back to a fresh state: the backend's reset (processes killed, writable places wiped) when
    the sandbox has one, else the work directory and /tmp emptied."""
    reset = getattr(sb, "reset", None)
    if callable(reset):
        await reset()
        return
    await sb.run(["bash", "-c", f"find {WORKDIR} /tmp -mindepth 1 -delete 2>/dev/null; true"], timeout=60)


def _shorten(log: str) -> str:
    return log if len(log) <= 20000 else f"{log[:10000]}\n[...]\n{log[-10000:]}"


async def evaluate(sb: Sandbox, task: SWETask, patch: str, *, timeout: float = 900.0, fresh: bool = True) -> Evaluation:
    """Grade ``patch`` as SWE-bench does (see the module doc), with the agent's means of steering
    the test run taken away (``guard``). With ``fresh`` the sandbox is reset first, so nothing the
    agent left behind outside the patch can change the result."""
    start = time.perf_counter()
    if fresh:
        await reset_sandbox(sb)
    base = await checkout(sb, task, timeout=timeout)
    filtered = guard.filter_patch(patch)
    await sb.write_file(f"{STATE}/model.patch", filtered.patch)
    await sb.write_file(f"{STATE}/test.patch", task.test_patch)
    await sb.write_file(f"{STATE}/prepare.sh", prepare_script(task, base, filtered.config_files))
    env = provision.test_env(task.shipped)
    deadline = start + timeout

    def left() -> float:
        return max(1.0, deadline - time.perf_counter())

    def done(status: str, log: str, **kw: Any) -> Evaluation:
        return Evaluation(False, status, log=_shorten(log), duration_s=time.perf_counter() - start,
                          dropped=filtered.dropped, **kw)

    prepared = await sb.run(["bash", f"{STATE}/prepare.sh"], timeout=left(), env=env, cwd=WORKDIR)
    log = prepared.output
    if prepared.timed_out:
        return done("timeout", log)
    if prepared.exit_code == 90 or APPLY_PATCH_FAIL in log:
        return done("patch_failed", log)
    if prepared.exit_code == 91:
        return done("test_patch_failed", log)
    if prepared.exit_code != 0:
        return done("setup_failed", log)
    reporter = guard.reporter_setup(WORKDIR, trusted=[provision.PYTEST_ZIP] if task.shipped else [],
                                    patched=guard.touched_paths(filtered.patch))
    pytest_run = guard.inject_reporter(task.test_cmd, reporter.module) is not None
    module = reporter.module if pytest_run and task.repo not in guard.SELF_HOSTED else None
    if module is not None:
        await sb.run(["bash", "-c", f"mkdir -p {guard.GRADE_DIR} && tar -xf - -C {guard.GRADE_DIR}"],
                     stdin=_tar(reporter.files), timeout=60)
    await sb.write_file(f"{STATE}/tests.sh", test_script(task, module))
    ran = await sb.run(["bash", "-c", f"bash {STATE}/tests.sh > {STATE}/tests.log 2>&1"], timeout=left(), env=env,
                       cwd=WORKDIR)
    try:
        test_log = (await sb.read_file(f"{STATE}/tests.log")).decode("utf-8", errors="replace")
    except FileNotFoundError:
        test_log = ran.output
    log = f"{log}\n{test_log}"
    if ran.timed_out:
        return done("timeout", log)
    # the script's own status, which is the test command's: a line the tests print cannot fake it
    exit_code = ran.exit_code if parse_test_exit_code(test_log) is not None else None
    parser = PARSERS[task.log_parser]
    files = task.test_directives() if task.grading_rule == "swesmith" else ()
    tests, report, rejection = grade_log(test_log, task.log_parser, task.fail_to_pass, task.pass_to_pass,
                                         exit_code=exit_code, rule=task.grading_rule, test_files=files)
    tampered: list[str] = []
    if module is not None:
        try:
            raw: bytes | None = await sb.read_file(f"{STATE}/result.json")
        except FileNotFoundError:
            raw = None
        result = guard.check_report(raw, reporter.nonce)
        tampered = result.tampered + guard.unbacked_claims(tests, result, parser, (*task.fail_to_pass, *task.pass_to_pass))
    if tampered:
        return done("tampered", log, tests=tests, exit_code=exit_code, tampered=tampered)
    if report is None:
        return done("log_rejected", log, tests=tests, exit_code=exit_code, tampered=[str(rejection)])
    status = "resolved" if report.resolved else ("empty_patch" if not patch.strip() else "unresolved")
    return Evaluation(report.resolved, status, report=report, tests=tests, log=_shorten(log),
                      duration_s=time.perf_counter() - start, exit_code=exit_code, dropped=filtered.dropped)
