"""The repository inside a sandbox: set it up at the task's base, read the candidate patch, grade.

All paths are inside the sandbox's work directory ``/workspace``, which holds the repository.

- ``checkout``: the work directory emptied, then the repository at the task's base commit: a
  shipped task's files are written and committed (deterministically: fixed identity and dates,
  so the commit id equals the task's ``base_commit``); an image task's ``/testbed`` is copied
  (SWE-smith: its bug patch applied and committed). Returns the base commit.
- ``candidate_patch``: ``git diff`` of the work tree against the base, new files included, taken
  through a scratch index so the agent's own staging is untouched (SWE-agent's submit).
- ``evaluate``: SWE-bench's evaluation in a clean state, with the trust boundary outside the test
  interpreter (``docs/fidelity.md`` says what it guarantees): the sandbox reset (every process
  killed, work directory, /tmp and home wiped), the base checked out again, the candidate applied
  as swebench applies it (``scripts.apply_script``) minus the files that configure or extend the
  test run, judged twice: by the patch's text read as git reads it (``guard.filter_patch``), then
  by the changes git reports after applying (``sweep_changes``); ``.git`` may not change. Then the
  install step, the test files reset, the test patch and the must-fail canaries (``canaries``),
  every leftover process killed, the test command run with toolgym's reporter, its log captured by
  the sandbox agent. The log is graded as swebench 5.0.2 grades it (``logs.grade_log``), except
  that an outcome the code under test can choose (XFAIL, SKIPPED, missing) counts only as it did
  in the gold patch's run (``reference``). A canary that did not fail, a reporter finding, or a
  log claim the reporter did not see makes the run ``tampered``: reward 0.
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from toolgym import Sandbox, SandboxError
from toolgym.plugins.swe import canaries, guard, provision, reference
from toolgym.plugins.swe.datasets import base_files
from toolgym.plugins.swe.logs import (
    APPLY_PATCH_FAIL,
    FAILING,
    PARSERS,
    Report,
    grade,
    grade_log,
    parse_test_exit_code,
)
from toolgym.plugins.swe.scripts import (
    GIT_SAFE,
    GIT_TOUCHED,
    KILL_OTHERS,
    STATE,
    WORKDIR,
    apply_script,
    changes_script,
    prepare_script,
    test_script,
)
from toolgym.plugins.swe.task import SWETask

GIT_ENV = {
    "GIT_AUTHOR_NAME": "toolgym",
    "GIT_AUTHOR_EMAIL": "tasks@toolgym.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "toolgym",
    "GIT_COMMITTER_EMAIL": "tasks@toolgym.invalid",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}
"""Makes the base commit reproducible: same files → same commit id on every machine."""
INIT_AND_COMMIT = (
    "git -c init.defaultBranch=main init -q && git add -A && "
    'git commit -q --no-verify -m "$TOOLGYM_COMMIT_MESSAGE" && git rev-parse HEAD'
)


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


async def _bash(
    sb: Sandbox,
    script: str,
    *,
    timeout: float,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    what: str,
) -> str:
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
        out = await _bash(
            sb,
            f"set -e; {wipe}; tar -xf - -C {WORKDIR}; {INIT_AND_COMMIT}",
            stdin=_tar(base_files(task)),
            env=env,
            timeout=timeout,
            what=f"checking out {task.instance_id}",
        )
        head = out.strip().splitlines()[-1] if out.strip() else ""
        if head != task.base_commit:
            raise HarnessError(
                f"{task.instance_id}: the checked-out base is commit {head or '?'} but the task says "
                f"{task.base_commit}; the shipped data is out of sync (python -m toolgym.plugins.swe.build)"
            )
        if await provision.needs_pytest(sb):
            await provision.install_pytest(sb)
        return head
    copy = (
        f"set -e; if [ ! -d {task.repo_dir}/.git ]; then echo 'no git repository at {task.repo_dir} in this image' >&2; "
        f"exit 3; fi; {wipe}; cp -a {task.repo_dir}/. {WORKDIR}/; git rev-parse HEAD"
    )
    head = (
        await _bash(sb, copy, env=GIT_ENV, timeout=timeout, what=f"copying {task.repo_dir} of {task.image}")
    ).strip()
    if task.bug_patch:
        await sb.write_file(f"{STATE}/bug.patch", task.bug_patch)
        script = (
            f"set -e; git apply {STATE}/bug.patch; git add -A; "
            'git commit -q --no-verify -m "$TOOLGYM_COMMIT_MESSAGE"; git rev-parse HEAD'
        )
        return (
            await _bash(sb, script, env=env, timeout=timeout, what=f"applying the bug of {task.instance_id}")
        ).strip()
    if task.base_commit and head != task.base_commit:
        raise HarnessError(
            f"{task.instance_id}: the repository in image {task.image} is at {head}, not at the task's "
            f"base_commit {task.base_commit}; is this the instance's image?"
        )
    return head


PATCH_CAP = 8 * 1024 * 1024
"""The largest candidate patch graded (bytes); a larger diff is an error (the episode scores 0)."""
RESULT_CAP = 16 * 1024 * 1024
"""The largest reporter result read back (bytes); a larger file is not the reporter's."""
LOG_CAP = 8 * 1024 * 1024
"""The test log kept (bytes, head and tail halves): the sandbox agent captures it outside the test process."""


async def candidate_patch(sb: Sandbox, base: str, *, timeout: float = 120.0) -> str:
    """The work tree's changes against ``base`` as a patch (new files included; empty when none).

    The diff comes back on the command's own output, which the sandbox agent reads: it never passes
    through a file in the sandbox, where a process the agent left running could swap it."""
    script = (
        f'set -e; tmp=$(mktemp -d); trap \'rm -rf "$tmp"\' EXIT; [ -f .git/index ] && cp .git/index "$tmp/index"; '
        f"GIT_INDEX_FILE=$tmp/index git add -A >/dev/null; GIT_INDEX_FILE=$tmp/index git diff --cached --no-color "
        f"--no-ext-diff --no-textconv {shlex.quote(base)}"
    )
    result = await sb.run(
        ["bash", "-c", script], timeout=timeout, env=GIT_ENV, cwd=WORKDIR, max_output=PATCH_CAP
    )
    if result.timed_out or result.exit_code != 0:
        reason = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        raise HarnessError(
            f"reading the repository diff failed in sandbox {sb.id} ({reason}): {result.stderr[-2000:]}"
        )
    if result.truncated:
        raise HarnessError(f"the repository diff is over {PATCH_CAP // 2**20} MiB; it is not graded")
    return result.stdout


async def diff_digest(sb: Sandbox, base: str, *, timeout: float = 60.0) -> str:
    """A short digest of the work tree's changes against ``base`` (for anchors); ``?`` when unreadable."""
    script = (
        f"idx=/tmp/.toolgym-anchor-index; rm -f $idx; [ -f .git/index ] && cp .git/index $idx; "
        f"GIT_INDEX_FILE=$idx git add -A 2>/dev/null; GIT_INDEX_FILE=$idx git diff --cached --no-color "
        f"--no-ext-diff {shlex.quote(base)} 2>/dev/null | sha1sum; rm -f $idx"
    )
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
    """The test command's exit status (``>>>>> Test Exit Code``), None when it did not run; a 1 that
    only the canaries' failures explain is recorded as 0, the status the run had without them."""
    dropped: list[str] = field(default_factory=list)
    """Files of the patch left out because they configure or extend the test run (``guard``)."""
    tampered: list[str] = field(default_factory=list)
    """Why the run is not graded: canaries that did not fail, what the reporter caught, log lines it
    did not back, ``.git`` changed by the patch or the install step."""
    canaries: dict[str, str] = field(default_factory=dict)
    """Each canary test's outcome in the log (all must be FAILED or ERROR; ``canaries.py``)."""
    demoted: list[str] = field(default_factory=list)
    """Graded tests whose chosen outcome (XFAIL, SKIPPED, missing) the reference run did not share,
    counted as FAILED (``reference.py``)."""

    def summary(self) -> dict[str, Any]:
        out = {
            "resolved": self.resolved,
            "status": self.status,
            "tests_status": self.report.as_dict(),
            "duration_s": round(self.duration_s, 3),
            "test_exit_code": self.exit_code,
        }
        for name in ("dropped", "tampered", "demoted"):
            if getattr(self, name):
                out["dropped_files" if name == "dropped" else name] = getattr(self, name)
        return out


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


async def sweep_changes(sb: Sandbox, base: str, *, timeout: float = 120.0) -> tuple[list[str], list[str]]:
    """After the candidate is applied: every changed or new path that could steer the test run
    (``guard.protected``) or is a symbolic link is put back to ``base`` or removed, by the names git
    itself reports (NUL-separated bytes), whatever the patch's text called them. Returns the paths
    dropped and the changed ``setup.cfg``/``pyproject.toml`` files (their pytest section is checked)."""
    listing = await sb.run(
        ["bash", "-c", f"{{ bash {STATE}/changes.sh; }} | base64 -w0"],
        timeout=timeout,
        cwd=WORKDIR,
        max_output=PATCH_CAP,
    )
    if listing.timed_out or listing.exit_code != 0 or listing.truncated:
        raise HarnessError(f"listing the patch's changes failed in sandbox {sb.id}: {listing.stderr[-2000:]}")
    sections: list[list[bytes]] = [[]]
    for token in base64.b64decode(listing.stdout.strip()).split(b"\0"):
        if token == SECTION:
            sections.append([])
        elif token:
            sections[-1].append(token)
    if len(sections) != 3:
        raise HarnessError(
            f"listing the patch's changes in sandbox {sb.id} gave {len(sections)} parts, not 3"
        )
    tracked, untracked, links = sections
    link_set = set(links)

    def bad(path: bytes) -> bool:
        return path in link_set or guard.protected(path.decode("utf-8", "surrogateescape"))

    restore = [p for p in tracked if bad(p)]
    remove = [p for p in untracked if bad(p)]
    if restore or remove:
        await sb.write_file(f"{STATE}/restore.lst", b"".join(p + b"\0" for p in restore))
        await sb.write_file(f"{STATE}/remove.lst", b"".join(p + b"\0" for p in remove))
        script = "\n".join(
            [
                "set -u",
                GIT_SAFE,
                f"xargs -0 -r rm -rf -- < {STATE}/restore.lst; xargs -0 -r rm -rf -- < {STATE}/remove.lst",
                f"if [ -s {STATE}/restore.lst ]; then git --literal-pathspecs checkout -q {shlex.quote(base)} "
                f"--pathspec-from-file={STATE}/restore.lst --pathspec-file-nul 2>/dev/null; fi; true",
            ]
        )
        done = await sb.run(["bash", "-c", script], timeout=timeout, cwd=WORKDIR)
        if done.timed_out or done.exit_code != 0:
            raise HarnessError(
                f"dropping files of the patch failed in sandbox {sb.id}: {done.output[-2000:]}"
            )
    dropped = sorted(p.decode("utf-8", "surrogateescape") for p in restore + remove)
    config = sorted(
        {
            p.decode("utf-8", "surrogateescape")
            for p in tracked + untracked
            if PurePosixPath(p.decode("utf-8", "surrogateescape")).name in guard.CONFIG_SECTIONS
        }
        - set(dropped)
    )
    return dropped, config


async def file_digests(sb: Sandbox, paths: list[str]) -> dict[str, str]:
    """SHA-256 of each of ``paths`` (relative to the work directory) that is a file, read by a
    command of its own: the test process can change a test file, not this view of it."""
    if not paths:
        return {}
    result = await sb.run(
        [
            "bash",
            "-c",
            'for f in "$@"; do [ -f "$f" ] && printf "%s\\0" "$(sha256sum < "$f")" "$f"; done; true',
            "digests",
            *paths,
        ],
        timeout=60,
        cwd=WORKDIR,
        max_output=PATCH_CAP,
    )
    parts = result.stdout.split("\0")
    return {parts[i + 1]: parts[i].split()[0] for i in range(0, len(parts) - 1, 2) if parts[i].strip()}


async def kill_leftovers(sb: Sandbox) -> None:
    """SIGKILL whatever the patch's code left running in the sandbox (``KILL_OTHERS``)."""
    await sb.run(["bash", "-c", KILL_OTHERS], timeout=30)


async def evaluate(
    sb: Sandbox,
    task: SWETask,
    patch: str,
    *,
    timeout: float = 900.0,
    fresh: bool = True,
    use_reference: bool = True,
) -> Evaluation:
    """Grade ``patch`` as SWE-bench does (see the module doc), with the agent's means of steering
    the test run taken away (``guard``, ``canaries``, ``reference``). With ``fresh`` the sandbox is
    reset first, so nothing the agent left behind outside the patch can change the result. With
    ``use_reference``, a chosen outcome (XFAIL, SKIPPED, missing) of a graded test is held to the
    gold patch's run (made once per task, in this sandbox, when needed)."""
    start = time.perf_counter()
    deadline = start + timeout

    def left() -> float:
        return max(1.0, deadline - time.perf_counter())

    if fresh:
        await reset_sandbox(sb)
    base = await checkout(sb, task, timeout=timeout)
    filtered = guard.filter_patch(patch)
    dropped = list(filtered.dropped)

    def done(status: str, log: str, **kw: Any) -> Evaluation:
        return Evaluation(
            False,
            status,
            log=_shorten(log),
            duration_s=time.perf_counter() - start,
            dropped=sorted(set(dropped)),
            **kw,
        )

    await sb.write_file(f"{STATE}/model.patch", filtered.patch)
    await sb.write_file(f"{STATE}/test.patch", task.test_patch)
    await sb.write_file(f"{STATE}/apply.sh", apply_script())
    await sb.write_file(f"{STATE}/changes.sh", changes_script(base))
    env = provision.test_env(task.shipped)
    applied = await sb.run(["bash", f"{STATE}/apply.sh"], timeout=left(), env=env, cwd=WORKDIR)
    log = applied.output
    if applied.timed_out:
        return done("timeout", log)
    if applied.exit_code == GIT_TOUCHED:
        return done("tampered", log, tampered=["the patch changed the repository's .git"])
    if applied.exit_code == 90 or APPLY_PATCH_FAIL in log:
        return done("patch_failed", log)
    if applied.exit_code != 0:
        return done("setup_failed", log)
    swept, config_files = await sweep_changes(sb, base, timeout=left())
    dropped += swept
    pytest_run = guard.inject_reporter(task.test_cmd, "x") is not None
    graded = (*task.fail_to_pass, *task.pass_to_pass)
    planted = canaries.make(task.test_directives(), avoid=graded) if pytest_run else []
    await sb.write_file(
        f"{STATE}/prepare.sh",
        prepare_script(
            task, base, sorted({*filtered.config_files, *config_files}), canaries.append_script(planted)
        ),
    )
    prepared = await sb.run(["bash", f"{STATE}/prepare.sh"], timeout=left(), env=env, cwd=WORKDIR)
    log = f"{log}\n{prepared.output}"
    await kill_leftovers(sb)
    if prepared.timed_out:
        return done("timeout", log)
    if prepared.exit_code == GIT_TOUCHED:
        return done("tampered", log, tampered=["the install step changed the repository's .git"])
    if prepared.exit_code == 91:
        return done("test_patch_failed", log)
    if prepared.exit_code != 0:
        return done("setup_failed", log)
    watched = sorted({*task.test_directives(), *task.test_files()})
    before = await file_digests(sb, watched)
    reporter = guard.reporter_setup(
        WORKDIR,
        trusted=[provision.PYTEST_ZIP] if task.shipped else [],
        patched=guard.touched_paths(filtered.patch),
    )
    module = reporter.module if pytest_run and task.repo not in guard.SELF_HOSTED else None
    if module is not None:
        await sb.run(
            ["bash", "-c", f"mkdir -p {guard.GRADE_DIR} && tar -xf - -C {guard.GRADE_DIR}"],
            stdin=_tar(reporter.files),
            timeout=60,
        )
    await sb.write_file(f"{STATE}/tests.sh", test_script(task, module))
    ran = await sb.run(
        ["bash", f"{STATE}/tests.sh"], timeout=left(), env=env, cwd=WORKDIR, max_output=LOG_CAP
    )
    await kill_leftovers(sb)
    after = await file_digests(sb, watched)
    changed = [
        f"test file {path} changed while the tests ran (seen from outside the test process)"
        for path in watched
        if before.get(path) != after.get(path)
    ]
    test_log = ran.stdout
    log = f"{log}\n{test_log}"
    if ran.timed_out:
        return done("timeout", log)
    # the script's own status, which is the test command's: a line the tests print cannot fake it
    exit_code = ran.exit_code if parse_test_exit_code(test_log) is not None else None
    parser = PARSERS[task.log_parser]
    files = task.test_directives() if task.grading_rule == "swesmith" else ()
    canary_keys = {k for k in (guard.log_key(parser, c.nodeid) for c in planted) if k is not None}
    if exit_code == PYTEST_TESTS_FAILED and planted:  # the status the run had without the canaries' failures
        own = {k: s for k, s in PARSERS[task.log_parser](test_log).items() if k not in canary_keys}
        exit_code = exit_code if any(s in FAILING for s in own.values()) else 0
    tests, report, rejection = grade_log(
        test_log,
        task.log_parser,
        task.fail_to_pass,
        task.pass_to_pass,
        exit_code=exit_code,
        rule=task.grading_rule,
        test_files=files,
        ignore=canary_keys,
    )
    seen = canaries.outcomes(planted, tests, parser)
    tampered = changed + canaries.violations(seen)
    if tampered and not changed and all(s == "MISSING" for s in seen.values()) and use_reference:
        ref = await reference_run(sb, task, timeout=left())  # were canaries collected at all for this task?
        tampered = canaries.violations(seen, missing_ok=not ref.canaries_seen)
    if module is not None:
        try:
            raw: bytes | None = await sb.read_file(f"{STATE}/result.json", max_bytes=RESULT_CAP)
        except FileNotFoundError:
            raw = None
        except SandboxError:  # larger than any result the reporter writes
            raw = b""
        result = guard.check_report(raw, reporter.nonce)
        tampered += result.tampered + guard.unbacked_claims(tests, result, parser, graded)
    if tampered:
        return done("tampered", log, tests=tests, exit_code=exit_code, tampered=tampered, canaries=seen)
    if report is None:
        return done(
            "log_rejected", log, tests=tests, exit_code=exit_code, tampered=[str(rejection)], canaries=seen
        )
    demoted: list[str] = []
    if use_reference and reference.chosen(graded, tests, rule=task.grading_rule):
        ref = await reference_run(sb, task, timeout=left())
        held, demoted = reference.hold(graded, tests, ref.outcomes, rule=task.grading_rule)
        report = grade(held, task.fail_to_pass, task.pass_to_pass, rule=task.grading_rule, test_files=files)
    status = "resolved" if report.resolved else ("empty_patch" if not patch.strip() else "unresolved")
    return Evaluation(
        report.resolved,
        status,
        report=report,
        tests=tests,
        log=_shorten(log),
        duration_s=time.perf_counter() - start,
        exit_code=exit_code,
        dropped=sorted(set(dropped)),
        canaries=seen,
        demoted=demoted,
    )


@dataclass(slots=True)
class ReferenceRun:
    """What the task's gold patch gave: each graded test's outcome, and whether canaries showed."""

    outcomes: dict[str, str]
    canaries_seen: bool


async def reference_run(sb: Sandbox, task: SWETask, *, timeout: float) -> ReferenceRun:
    """The gold patch graded in ``sb`` (reset first), once per task and process."""
    got = reference.cached(task)
    if got is None:
        gold = await evaluate(sb, task, task.patch, timeout=timeout, use_reference=False)
        graded = (*task.fail_to_pass, *task.pass_to_pass)
        got = {
            **reference.outcomes(graded, gold.tests),
            CANARIES_SEEN: str(any(s != "MISSING" for s in gold.canaries.values())),
        }
        reference.remember(task, got)
    return ReferenceRun(
        {k: v for k, v in got.items() if k != CANARIES_SEEN}, got.get(CANARIES_SEEN) == "True"
    )


CANARIES_SEEN = "\0canaries"
PYTEST_TESTS_FAILED = 1
"""pytest's exit status when tests failed: with canaries planted, what every honest run ends with."""
SECTION = b"/"
