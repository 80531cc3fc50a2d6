"""SWE tasks in the SWE-bench instance format, and what each dataset family implies about them.

A task is one SWE-bench instance (``instance_id``, ``repo``, ``base_commit``,
``problem_statement``, ``patch`` = the gold fix, ``test_patch``, ``FAIL_TO_PASS``,
``PASS_TO_PASS``, ...) plus what running it needs: where the repository comes from (the shipped
sources, or a Docker image's ``/testbed``), the test command and log parser, and which grading
rule applies. The families differ in small, documented ways:

- **SWE-bench** (and the project's shipped tasks): the image is
  ``swebench/sweb.eval.x86_64.<instance_id with "__" → "_1776_">`` (Docker Hub) or
  ``sweb.eval.x86_64.<instance_id>`` (built locally by the harness); the test command is the
  repository's (``MAP_REPO_TO_SPECS``) followed by the test files of ``test_patch``; a listed test
  missing from the log counts as failed.
- **SWE-Gym**: SWE-bench's schema (the lists are JSON lists, not strings); images
  ``xingyaoww/sweb.eval.x86_64.<instance_id with "__" → "_s_">``.
- **SWE-smith**: ``patch`` is the diff that *introduces* the bug (the gold fix is its reverse) and
  there is no ``test_patch``; the image (``image_name``) holds the clean repository, which is
  brought to the buggy state by applying ``patch``; tests run with
  ``pytest --disable-warnings --color=no --tb=no --verbose`` on the files of ``FAIL_TO_PASS``; a
  listed test missing from the log counts as passed, and only tests in those files are graded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgym.plugins.swe.patches import parse_patch

Family = Literal["toolgym", "swebench", "swegym", "swesmith"]
GradingRule = Literal["swebench", "swesmith"]

TEST_PYTEST = "pytest --no-header -rA --tb=no -p no:cacheprovider"
TEST_PYTEST_PLAIN = "pytest -rA"
TEST_SWESMITH = "pytest --disable-warnings --color=no --tb=no --verbose"
SHIPPED_TEST_CMD = f"python3 -m {TEST_PYTEST}"
"""The shipped tasks' command: ``python3 -m`` puts the repository root on ``sys.path``."""

REPO_SPECS: dict[str, tuple[str, str]] = {
    "astropy/astropy": ("pytest -rA -vv -o console_output_style=classic --tb=no", "pytest_v2"),
    "django/django": ("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1", "django"),
    "marshmallow-code/marshmallow": (TEST_PYTEST, "pytest"),
    "matplotlib/matplotlib": (TEST_PYTEST, "matplotlib"),
    "mwaskom/seaborn": ("pytest --no-header -rA", "seaborn"),
    "pallets/flask": (TEST_PYTEST, "pytest"),
    "psf/requests": (TEST_PYTEST, "pytest_options"),
    "pvlib/pvlib-python": (TEST_PYTEST, "pytest"),
    "pydata/xarray": (TEST_PYTEST, "pytest"),
    "pydicom/pydicom": (TEST_PYTEST, "pytest_options"),
    "pylint-dev/astroid": (TEST_PYTEST, "pytest"),
    "pylint-dev/pylint": (TEST_PYTEST, "pytest_options"),
    "pytest-dev/pytest": (TEST_PYTEST_PLAIN, "pytest"),
    "pyvista/pyvista": (TEST_PYTEST, "pytest"),
    "scikit-learn/scikit-learn": (TEST_PYTEST, "pytest_v2"),
    "sphinx-doc/sphinx": ("tox --current-env -epy39 -v --", "pytest_v2"),
    "sqlfluff/sqlfluff": (TEST_PYTEST, "pytest"),
    "sympy/sympy": (
        "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
        "sympy",
    ),
}
"""SWE-bench's test command and log parser per repository (the command of its recent versions;
a few old versions used another one: give ``test_cmd=`` to override). Other repositories (SWE-Gym's,
your own) get ``TEST_PYTEST`` and the pytest parser."""

REPO_INSTALL: dict[str, str] = {
    "astropy/astropy": "python -m pip install -e .[test] --verbose",
    "django/django": "python -m pip install -e .",
    "marshmallow-code/marshmallow": "python -m pip install -e '.[dev]'",
    "matplotlib/matplotlib": "python -m pip install -e .",
    "mwaskom/seaborn": "python -m pip install -e .[dev]",
    "pallets/flask": "python -m pip install -e .",
    "psf/requests": "python -m pip install .",
    "pvlib/pvlib-python": "python -m pip install -e .[all]",
    "pydata/xarray": "python -m pip install -e .",
    "pydicom/pydicom": "python -m pip install -e .",
    "pylint-dev/astroid": "python -m pip install -e .",
    "pylint-dev/pylint": "python -m pip install -e .",
    "pytest-dev/pytest": "python -m pip install -e .",
    "pyvista/pyvista": "python -m pip install -e .",
    "scikit-learn/scikit-learn": "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
    "sphinx-doc/sphinx": "python -m pip install -e .[test]",
    "sqlfluff/sqlfluff": "python -m pip install -e .",
    "sympy/sympy": "python -m pip install -e .",
}
"""SWE-bench's install step per repository (its recent versions' ``install``), re-run after the
patch as its evaluation script does; a few old versions used another (a row's ``install`` wins)."""

NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")
"""Files of a test patch that are not test directives (SWE-bench's list, "csv" without its dot)."""


@dataclass(frozen=True)
class SWETask:
    """One task instance. ``patch`` is always the gold *fix* (SWE-smith rows are reversed on load)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    family: Family = "swebench"
    version: str = ""
    hints_text: str = ""
    created_at: str = ""
    environment_setup_commit: str = ""
    image: str | None = None
    """Docker image holding the repository at ``repo_dir``; None for the shipped tasks."""
    repo_dir: str = "/testbed"
    bug_patch: str = ""
    """SWE-smith: the diff applied to the image's clean repository to make the task's base state."""
    test_cmd: str = TEST_PYTEST
    log_parser: str = "pytest"
    install_cmd: str = ""
    """The repository's install step, re-run after the candidate patch is applied (SWE-bench's
    ``install``; a row's ``install`` field, else ``REPO_INSTALL``); empty: none."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """The row's other fields, kept for the user."""

    @property
    def shipped(self) -> bool:
        return self.family == "toolgym"

    @property
    def grading_rule(self) -> GradingRule:
        return "swesmith" if self.family == "swesmith" else "swebench"

    def test_directives(self) -> list[str]:
        """What follows the test command: the test files of ``test_patch`` (Django: as modules);
        for SWE-smith, the files of the FAIL_TO_PASS tests."""
        if self.family == "swesmith":
            return sorted({t.split("::", 1)[0] for t in self.fail_to_pass})
        return test_directives(self.repo, self.test_patch)

    def test_files(self) -> list[str]:
        """Files of ``test_patch`` that exist before it (reset to ``base_commit`` before it is applied)."""
        return re.findall(r"^--- a/(.*)$", self.test_patch, flags=re.MULTILINE)

    def to_row(self) -> dict[str, Any]:
        """The instance as a SWE-bench dataset row (FAIL_TO_PASS / PASS_TO_PASS JSON-encoded)."""
        row = {
            "repo": self.repo,
            "instance_id": self.instance_id,
            "base_commit": self.base_commit,
            "patch": self.patch,
            "test_patch": self.test_patch,
            "problem_statement": self.problem_statement,
            "hints_text": self.hints_text,
            "created_at": self.created_at,
            "version": self.version,
            "FAIL_TO_PASS": json.dumps(list(self.fail_to_pass)),
            "PASS_TO_PASS": json.dumps(list(self.pass_to_pass)),
            "environment_setup_commit": self.environment_setup_commit,
        }
        if self.install_cmd and self.install_cmd != REPO_INSTALL.get(self.repo):
            row["install"] = self.install_cmd
        return {**self.extra, **row}


def test_directives(repo: str, test_patch: str) -> list[str]:
    """SWE-bench's rule: the ``b/`` paths of ``test_patch`` minus data files; Django's become
    dotted module names relative to ``tests/``."""
    paths = [
        p
        for p in re.findall(r"^diff --git a/.* b/(.*)$", test_patch, flags=re.MULTILINE)
        if not any(p.endswith(ext) for ext in NON_TEST_EXTS)
    ]
    if not paths and test_patch.strip():
        paths = [fp.path for fp in parse_patch(test_patch) if not fp.path.endswith(NON_TEST_EXTS)]
    if repo == "django/django":
        out = []
        for p in paths:
            p = p[: -len(".py")] if p.endswith(".py") else p
            p = p[len("tests/") :] if p.startswith("tests/") else p
            out.append(p.replace("/", "."))
        return out
    return paths


test_directives.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


# -- image names --------------------------------------------------------------------------------


def swebench_image(
    instance_id: str, *, namespace: str = "swebench", arch: str = "x86_64", tag: str = "latest"
) -> str:
    """SWE-bench's instance image: on Docker Hub under ``namespace`` (``"__"`` written ``_1776_``,
    as repository names there cannot hold it), or as the harness tags a local build when
    ``namespace`` is empty. Lower-cased, as Docker requires."""
    if namespace:
        return f"{namespace}/sweb.eval.{arch}.{instance_id.replace('__', '_1776_')}:{tag}".lower()
    return f"sweb.eval.{arch}.{instance_id}:{tag}".lower()


def swegym_image(
    instance_id: str, *, namespace: str = "xingyaoww", arch: str = "x86_64", tag: str = "latest"
) -> str:
    """SWE-Gym's instance image (``"__"`` written ``_s_``)."""
    return f"{namespace}/sweb.eval.{arch}.{instance_id.replace('__', '_s_')}:{tag}".lower()


def swesmith_image(
    repo: str, *, namespace: str = "swebench", arch: str = "x86_64", tag: str = "latest"
) -> str:
    """SWE-smith's image of a repository snapshot (``swesmith/<owner>__<name>.<commit8>``), for rows
    without ``image_name``."""
    snapshot = repo.split("/", 1)[-1]
    return f"{namespace}/swesmith.{arch}.{snapshot.replace('__', '_1776_')}:{tag}".lower()


def sandbox_kind(image: str) -> str:
    """The sandbox kind (pool key) of an image: ``swe.`` plus the image name made safe."""
    return "swe." + re.sub(r"[^A-Za-z0-9_.-]+", "-", image).strip("-")[:100]
