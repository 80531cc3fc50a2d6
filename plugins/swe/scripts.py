"""The bash the grader runs in the sandbox, one script per stage of ``harness.evaluate``.

- ``apply_script``: the candidate applied as swebench applies it (``git apply``, ``git apply
  --reject``, ``patch --fuzz=5``: GNU patch only after a dry run shows it writes nothing in
  ``.git``); it stops with ``GIT_TOUCHED`` when ``.git``'s configuration, hooks, refs or info
  changed.
- ``changes_script``: what the applied patch changed, by the names git reports (for
  ``harness.sweep_changes``).
- ``prepare_script``: the install step (``.git`` checked again after it), the configuration guard,
  the test files reset, the test patch applied, the canaries appended.
- ``KILL_OTHERS``: every process of the sandbox user but the agent's line killed (between stages).
- ``test_script``: the test command between swebench's markers, its exit status after them, all
  on the command's own output (which the sandbox agent captures outside the test process).

Every git call goes through ``GIT_SAFE`` (no hooks, no fsmonitor, no fetch).
"""

from __future__ import annotations

import shlex

from toolgym.plugins.swe import guard
from toolgym.plugins.swe.logs import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TEST_EXIT_CODE_VAR,
)
from toolgym.plugins.swe.task import SWETask

WORKDIR = "/workspace"
STATE = ".git/toolgym"
"""Scratch files (patches, scripts, the reporter's result) live in the repository's .git, out of the
work tree and its diffs."""
CONDA = "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi"
"""SWE-bench images keep the repository's environment in the conda env ``testbed``."""


GIT_SAFE = (
    'git() { command git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c protocol.allow=never "$@"; }'
)
"""Every git call of the grading scripts: no hook, no fsmonitor, no fetch runs code of the patch's."""
GIT_ADMIN_SUM = (
    "git_admin_sum() { (cd .git && find . \\( -path ./objects -o -path ./toolgym -o -path ./logs \\) -prune "
    "-o -type f ! -name index -print0 | LC_ALL=C sort -z | xargs -0 -r sha1sum) | sha1sum; }"
)
"""A digest of ``.git``'s configuration, hooks, refs and info (objects, logs, the index and toolgym's
scratch files left out): the patch and the install step may not change them."""
GIT_TOUCHED = 92
"""The exit status of a grading script that found ``.git`` changed."""
_DOT_GIT = "(^|/|')\\.git(/|'|$)"


def apply_script() -> str:
    """The bash that applies the candidate (swebench's three tries; GNU patch only after a dry run
    shows it would write nothing in ``.git``), and stops with ``GIT_TOUCHED`` if ``.git`` changed."""
    model = f"{STATE}/model.patch"
    fuzz = (
        f"{{ out=$(patch --dry-run --batch --fuzz=5 -p1 -i {model} 2>&1) && "
        f'! printf "%s\\n" "$out" | grep -E "^(checking|patching) file " | grep -qE "{_DOT_GIT}" && '
        f"patch --batch --fuzz=5 -p1 -i {model}; }}"
    )
    tries = f"git apply --verbose {model} || git apply --verbose --reject {model} || {fuzz}"
    return (
        "\n".join(
            [
                "set -uo pipefail",
                CONDA,
                f"cd {WORKDIR}",
                GIT_SAFE,
                GIT_ADMIN_SUM,
                "before=$(git_admin_sum)",
                f'if [ -s {model} ]; then {{ {tries}; }} || {{ echo "{APPLY_PATCH_FAIL}"; exit 90; }}; fi',
                f'[ "$(git_admin_sum)" = "$before" ] || {{ echo ">>>>> The patch changed .git"; exit {GIT_TOUCHED}; }}',
                f'echo "{APPLY_PATCH_PASS} (pred)"',
            ]
        )
        + "\n"
    )


def changes_script(base: str) -> str:
    """Bash that prints what the applied patch changed, as git sees it, NUL-separated in three
    parts split by a lone ``/`` (no path is that): tracked paths that differ from ``base``,
    untracked paths (ignored ones too), symbolic links."""
    return (
        "\n".join(
            [
                "set -uo pipefail",
                f"cd {WORKDIR}",
                GIT_SAFE,
                f"git diff --name-only -z --no-renames {shlex.quote(base)} --",
                "printf '\\0/\\0'",
                "git ls-files -o -z",
                "printf '\\0/\\0'",
                "find . -path ./.git -prune -o -type l -printf '%P\\0'",
            ]
        )
        + "\n"
    )


def prepare_script(task: SWETask, base: str, config_files: list[str], canary_lines: str = "") -> str:
    """The bash run after the candidate is applied and swept: the install step, the configuration
    guard, then the instance's test files reset, its test patch applied (last) and the canaries
    appended; stops with ``GIT_TOUCHED`` if the install step changed ``.git``."""
    lines = ["set -uo pipefail", CONDA, f"cd {WORKDIR}", GIT_SAFE, GIT_ADMIN_SUM, "before=$(git_admin_sum)"]
    if task.install_cmd:  # as SWE-bench's eval script: run after the patch, its failure does not stop grading
        lines += [f"( {task.install_cmd} ) </dev/null", 'echo ">>>>> Install Exit Code: $?"']
    lines.append(
        f'[ "$(git_admin_sum)" = "$before" ] || {{ echo ">>>>> The install step changed .git"; exit {GIT_TOUCHED}; }}'
    )
    if config_files:
        lines.append(guard.config_guard_script(config_files, base))
    if task.test_files():
        lines.append(
            f"git checkout -q {shlex.quote(base)} -- {' '.join(shlex.quote(f) for f in task.test_files())}"
        )
    if task.test_patch.strip():
        lines.append(
            f'git apply --verbose {STATE}/test.patch || {{ echo ">>>>> Test Patch Apply Failed"; exit 91; }}'
        )
    if canary_lines:
        lines.append(canary_lines)
    lines.append(f"rm -rf {guard.GRADE_DIR}")
    return "\n".join(lines) + "\n"


KILL_OTHERS = r"""set -u
[ "$(id -u)" = 0 ] && exit 0   # only in a sandbox's own user and PID namespace
keep=" 1 "; p=$$
while [ "$p" -gt 1 ]; do
  keep="$keep$p "; stat=$(cat /proc/$p/stat 2>/dev/null) || break; stat=${stat##*) }; set -- $stat; p=$2
done
for round in 1 2 3 4 5 6 7 8; do
  n=0
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case "$keep" in *" $pid "*) continue;; esac
    [ -O "$d" ] && kill -9 "$pid" 2>/dev/null && n=$((n + 1))
  done
  [ "$n" = 0 ] && break
done
true
"""
"""Bash that SIGKILLs every process of the sandbox user but its own ancestors (the agent): what the
patch's code left running during the install step or the tests (a process in a session of its own
escapes the command's process group and the reporter) cannot touch what is read next."""


def test_script(task: SWETask, reporter: str | None) -> str:
    """The bash that runs the tests between the markers and records their exit status after them
    (SWE-bench 5.0.2's ``>>>>> Test Exit Code``); ``reporter``: the reporter's module, when the
    command is a pytest one. Everything goes to the command's own output (captured by the agent)."""
    command = task.test_cmd
    if reporter is not None:
        command = guard.inject_reporter(command, reporter) or command
        command = f'PYTHONPATH="{guard.GRADE_DIR}${{PYTHONPATH:+:$PYTHONPATH}}" PYTHONNOUSERSITE=1 {command}'
    command = " ".join([command, *(shlex.quote(d) for d in task.test_directives())])
    return (
        "\n".join(
            [
                "set -uo pipefail",
                "exec 2>&1",
                CONDA,
                f"cd {WORKDIR}",
                f'echo "{START_TEST_OUTPUT}"',
                f"{command} </dev/null",
                f"{TEST_EXIT_CODE_VAR}=$?",
                f'echo "{END_TEST_OUTPUT}"',
                f"cp {guard.RESULT_FILE} {STATE}/result.json 2>/dev/null",
                f'echo "{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}"',
                f"exit ${TEST_EXIT_CODE_VAR}",
            ]
        )
        + "\n"
    )


test_script.__test__ = False  # type: ignore[attr-defined]
