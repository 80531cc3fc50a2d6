"""Task model and loaders: the shipped set, SWE-bench / SWE-Gym / SWE-smith files, image names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry
from toolgym.plugins.swe import build
from toolgym.plugins.swe.bugs import BUGS
from toolgym.plugins.swe.datasets import base_files, load_tasks, repo_files, shipped_tasks, task_from_row
from toolgym.plugins.swe.patches import apply_patch, make_patch, patched_paths
from toolgym.plugins.swe.task import (
    SHIPPED_TEST_CMD,
    TEST_SWESMITH,
    sandbox_kind,
    swebench_image,
    swegym_image,
    swesmith_image,
    test_directives,
)

DJANGO_TEST_PATCH = """diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py
--- a/tests/admin_views/tests.py
+++ b/tests/admin_views/tests.py
@@ -1,1 +1,2 @@
 x = 1
+y = 2
diff --git a/tests/admin_views/fixtures/data.json b/tests/admin_views/fixtures/data.json
new file mode 100644
--- /dev/null
+++ b/tests/admin_views/fixtures/data.json
@@ -0,0 +1 @@
+{}
"""


def swebench_row(**changes: Any) -> dict[str, Any]:
    row = {
        "repo": "django/django",
        "instance_id": "django__django-11099",
        "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
        "patch": "diff --git a/django/x.py b/django/x.py\n--- a/django/x.py\n+++ b/django/x.py\n@@ -1 +1 @@\n-a\n+b\n",
        "test_patch": DJANGO_TEST_PATCH,
        "problem_statement": "UsernameValidator allows trailing newline",
        "hints_text": "",
        "created_at": "2019-03-20T03:46:18Z",
        "version": "3.0",
        "FAIL_TO_PASS": json.dumps(
            ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]
        ),
        "PASS_TO_PASS": "[]",
        "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27",
    }
    return {**row, **changes}


def test_shipped_set_is_big_varied_and_well_formed() -> None:
    tasks = shipped_tasks()
    assert len(tasks) >= 10 and len({t.instance_id for t in tasks}) == len(tasks)
    assert len({t.repo for t in tasks}) >= 5 and len({t.extra["category"] for t in tasks}) >= 8
    for t in tasks:
        assert t.family == "toolgym" and t.image is None and t.test_cmd == SHIPPED_TEST_CMD
        assert t.fail_to_pass and t.pass_to_pass and not set(t.fail_to_pass) & set(t.pass_to_pass)
        assert all(not p.startswith("tests/") for p in patched_paths(t.patch)), t.instance_id
        assert all(p.startswith("tests/") for p in patched_paths(t.test_patch)), t.instance_id
        assert len(t.base_commit) == 40 and t.environment_setup_commit == t.base_commit
        base, fixed = base_files(t), repo_files(t.repo.split("/")[1])
        assert base != fixed and set(base) == set(fixed)
        assert apply_patch(apply_patch(base, t.patch), t.test_patch) == fixed
        # the hidden tests are not in the base; the listed tests are in the files the command runs
        for test in t.fail_to_pass + t.pass_to_pass:
            path, name = test.split("::")
            assert path in t.test_directives() and f"def {name}(" in fixed[path]
        hidden = next(b.hidden for b in BUGS if b.instance_id == t.instance_id)
        for path, names in hidden.items():
            assert all(f"def {n}(" not in base[path] and f"{path}::{n}" in t.fail_to_pass for n in names)


def test_shipped_rows_match_the_bug_definitions() -> None:
    """data/tasks.jsonl is what build.py makes of bugs.py and data/repos (bar the measured test lists,
    which the oracle tests check in sandboxes)."""
    by_id = {t.instance_id: t for t in shipped_tasks()}
    assert set(by_id) == {b.instance_id for b in BUGS}
    for bug in BUGS:
        task = by_id[bug.instance_id]
        fixed, buggy_src, base = build.bug_files(bug)
        sources = sorted({p for p, _, _ in bug.edits})
        assert task.patch == make_patch({p: buggy_src[p] for p in sources}, {p: fixed[p] for p in sources})
        assert task.test_patch == make_patch(
            {p: base[p] for p in bug.hidden}, {p: fixed[p] for p in bug.hidden}
        )
        assert task.problem_statement == bug.problem_statement
    first = BUGS[0]
    assert by_id[first.instance_id].base_commit == build.base_commit(
        build.bug_files(first)[2], build.commit_message(f"toolgym/{first.repo}", first.instance_id)
    )


def test_row_round_trip() -> None:
    for task in shipped_tasks()[:3]:
        row = task.to_row()
        assert isinstance(row["FAIL_TO_PASS"], str) and json.loads(row["FAIL_TO_PASS"]) == list(
            task.fail_to_pass
        )
        assert task_from_row(row, "toolgym") == task


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
def test_swebench_files(tmp_path: Path, suffix: str) -> None:
    rows = [swebench_row(), swebench_row(instance_id="django__django-11133", PASS_TO_PASS=["a", "b"])]
    path = tmp_path / f"tasks{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(rows))
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(
            pa.Table.from_pylist(
                [
                    {**r, "PASS_TO_PASS": json.dumps(r["PASS_TO_PASS"])}
                    if isinstance(r["PASS_TO_PASS"], list)
                    else r
                    for r in rows
                ]
            ),
            path,
        )
    tasks = load_tasks(path)
    assert [t.instance_id for t in tasks] == ["django__django-11099", "django__django-11133"]
    t = tasks[0]
    assert t.family == "swebench" and t.fail_to_pass == (
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)",
    )
    assert t.image == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert t.test_cmd.startswith("./tests/runtests.py") and t.log_parser == "django"
    assert t.test_directives() == ["admin_views.tests"]  # the fixture file is not a directive
    assert t.test_files() == ["tests/admin_views/tests.py"]  # the new file is not reset to the base
    assert tasks[1].pass_to_pass == ("a", "b")
    assert load_tasks(path, instance_ids=["django__django-11133"])[0].instance_id == "django__django-11133"
    local = load_tasks(path, image_namespace="")[0]
    assert local.image == "sweb.eval.x86_64.django__django-11099:latest"


def test_swegym_rows(tmp_path: Path) -> None:
    row = swebench_row(
        repo="Project-MONAI/MONAI",
        instance_id="Project-MONAI__MONAI-6975",
        FAIL_TO_PASS=["tests/test_x.py::test_a"],
        PASS_TO_PASS=["tests/test_x.py::test_b"],
        test_patch="diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n"
        "@@ -1 +1,2 @@\n x\n+y\n",
    )
    path = tmp_path / "swegym.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(path, "swegym")
    assert task.image == "xingyaoww/sweb.eval.x86_64.project-monai_s_monai-6975:latest"
    assert (
        task.test_cmd == "pytest --no-header -rA --tb=no -p no:cacheprovider" and task.log_parser == "pytest"
    )
    assert task.test_directives() == ["tests/test_x.py"] and task.grading_rule == "swebench"


def test_swesmith_rows(tmp_path: Path) -> None:
    bug = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,2 +1,2 @@\n def f(x):\n-    return x + 1\n+    return x - 1\n"
    row = {
        "instance_id": "oauthlib__oauthlib.1fd52536.func_pm_op_change__abc",
        "repo": "swesmith/oauthlib__oauthlib.1fd52536",
        "patch": bug,
        "FAIL_TO_PASS": ["tests/test_m.py::test_f", "tests/oauth/test_n.py::T::test_g"],
        "PASS_TO_PASS": ["tests/test_m.py::test_h"],
        "created_at": "2025-03-01",
        "problem_statement": "f is wrong",
        "image_name": "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
        "base_commit": "abc",
    }
    path = tmp_path / "smith.json"
    path.write_text(
        json.dumps([row, {**row, "instance_id": "x.2", "image_name": "swesmith.x86_64.a_1776_b.12345678"}])
    )
    task, other = load_tasks(path)
    assert task.family == "swesmith" and task.grading_rule == "swesmith" and task.bug_patch == bug
    assert apply_patch({"pkg/m.py": "def f(x):\n    return x - 1\n"}, task.patch) == {
        "pkg/m.py": "def f(x):\n    return x + 1\n"
    }
    assert task.image == "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"
    assert other.image == "swebench/swesmith.x86_64.a_1776_b.12345678"
    assert task.test_cmd == TEST_SWESMITH and task.log_parser == "pytest_verbose"
    assert task.test_directives() == ["tests/oauth/test_n.py", "tests/test_m.py"]
    assert swesmith_image(row["repo"]) == "swebench/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536:latest"


def test_image_names_and_kinds() -> None:
    assert (
        swebench_image("astropy__astropy-12907")
        == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    )
    assert (
        swebench_image("sympy__sympy-20590", arch="arm64", tag="v1")
        == "swebench/sweb.eval.arm64.sympy_1776_sympy-20590:v1"
    )
    assert swegym_image("getmoto__moto-6470") == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-6470:latest"
    kind = sandbox_kind("swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest")
    assert kind == "swe.swebench-sweb.eval.x86_64.astropy_1776_astropy-12907-latest"


def test_test_directives() -> None:
    patch = "diff --git a/tests/test_a.py b/tests/test_a.py\ndiff --git a/docs/notes.md b/docs/notes.md\n"
    assert test_directives("x/y", patch) == ["tests/test_a.py"]
    assert test_directives("django/django", DJANGO_TEST_PATCH) == ["admin_views.tests"]


def test_bad_files_and_rows_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_tasks(tmp_path / "missing.json")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    with pytest.raises(ConfigError, match="line 1"):
        load_tasks(bad)
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{k: v for k, v in swebench_row().items() if k != "test_patch"}]))
    with pytest.raises(ConfigError, match="test_patch"):
        load_tasks(rows)
    rows.write_text(json.dumps([swebench_row(FAIL_TO_PASS="not a list")]))
    with pytest.raises(ConfigError, match="FAIL_TO_PASS"):
        load_tasks(rows)
    rows.write_text(json.dumps([swebench_row()]))
    with pytest.raises(ConfigError, match="family"):
        load_tasks(rows, "swe-bench-pro")
    with pytest.raises(ConfigError, match="not in the dataset"):
        load_tasks(rows, instance_ids=["nope"])


def test_registered_and_listed() -> None:
    registry = Registry.load()
    assert "swe" in registry.envs and not [e for e in registry.errors if "swe" in str(e)]
    env = registry.envs["swe"].make()
    assert env.num_tasks == len(shipped_tasks())
    with pytest.raises(ConfigError, match="max_turns"):
        registry.envs["swe"].make(max_turns="many")
    with pytest.raises(ConfigError, match="not in the dataset"):
        registry.envs["swe"].make(instance_ids="toolgym__nope-1")
    assert registry.envs["swe"].make(instance_ids="toolgym__ledger-2,toolgym__textkit-1").num_tasks == 2
