"""The grade's guards on their own: patch filtering, the pytest-section check, the reporter
(run with the pytest here, on small repositories written to a temporary directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.plugins.swe import guard
from toolgym.plugins.swe.logs import PARSERS, parse_pytest
from toolgym.plugins.swe.patches import make_patch, patched_paths

# -- patch filtering --------------------------------------------------------------------------------


def test_filter_drops_what_steers_the_test_run() -> None:
    before = {"pkg/mod.py": "x = 1\n", "setup.cfg": "[metadata]\nname = pkg\n"}
    after = {
        "pkg/mod.py": "x = 2\n",
        "setup.cfg": "[metadata]\nname = pkg2\n",
        "conftest.py": "bad\n",
        "tests/sub/conftest.py": "bad\n",
        "pytest.ini": "[pytest]\n",
        "tox.ini": "[pytest]\n",
        "sitecustomize.py": "bad\n",
        "pkg/usercustomize.py": "bad\n",
        "evil.pth": "import x\n",
        "pkg-1.0.dist-info/entry_points.txt": "[pytest11]\nx = y\n",
        "pkg.egg-info/entry_points.txt": "x\n",
        "pkg/conftest_helpers.py": "ok = 1\n",
    }
    filtered = guard.filter_patch(make_patch(before, after))
    assert sorted(patched_paths(filtered.patch)) == ["pkg/conftest_helpers.py", "pkg/mod.py", "setup.cfg"]
    assert sorted(filtered.dropped) == sorted(
        set(after) - {"pkg/mod.py", "setup.cfg", "pkg/conftest_helpers.py"}
    )
    assert filtered.config_files == ["setup.cfg"]


def test_filter_drops_renames_into_protected_names_and_symlinks() -> None:
    rename = (
        "diff --git a/helpers.py b/tests/conftest.py\nsimilarity index 100%\n"
        "rename from helpers.py\nrename to tests/conftest.py\n"
    )
    link = (
        "diff --git a/pkg/link.py b/pkg/link.py\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/pkg/link.py\n@@ -0,0 +1 @@\n+/tmp/x\n\\ No newline at end of file\n"
    )
    plain = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    filtered = guard.filter_patch(rename + link + plain)
    assert filtered.patch == plain
    assert set(filtered.dropped) == {"helpers.py", "tests/conftest.py", "pkg/link.py"}
    assert guard.filter_patch(plain).patch == plain  # no diff --git headers: split on ---/+++ pairs
    assert guard.filter_patch("").patch == ""


def _git(root: Path, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True
    ).stdout


def test_config_guard_reverts_only_pytest_sections(tmp_path: Path) -> None:
    cfg = "[metadata]\nname = pkg\n\n[tool:pytest]\ntestpaths = tests\n"
    toml = (
        '[project]\nname = "pkg"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n[tool.ruff]\nx = 1\n'
    )
    (tmp_path / "setup.cfg").write_text(cfg)
    (tmp_path / "pyproject.toml").write_text(toml)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "base")
    base = _git(tmp_path, "rev-parse", "HEAD").strip()
    changed_cfg = cfg.replace("name = pkg", "name = pkg2")  # outside the pytest section: kept
    changed_toml = toml.replace('testpaths = ["tests"]', 'addopts = "-p forged"')  # inside: reverted
    (tmp_path / "setup.cfg").write_text(changed_cfg)
    (tmp_path / "pyproject.toml").write_text(changed_toml)
    script = guard.config_guard_script(["setup.cfg", "pyproject.toml"], base)
    out = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout
    assert (tmp_path / "setup.cfg").read_text() == changed_cfg
    assert (tmp_path / "pyproject.toml").read_text() == toml
    assert "pyproject.toml" in out and "setup.cfg" not in out


def test_inject_reporter_after_the_pytest_invocation() -> None:
    assert guard.inject_reporter("python3 -m pytest -rA", "m") == "python3 -m pytest -p m -rA"
    assert guard.inject_reporter("pytest --no-header -rA", "m") == "pytest -p m --no-header -rA"
    assert guard.inject_reporter("A='x y' pytest -rA", "m") == "A='x y' pytest -p m -rA"
    for other in (
        "./tests/runtests.py --verbosity 2",
        "tox --current-env -epy39 -v --",
        "bin/test -C",
        "make test",
    ):
        assert guard.inject_reporter(other, "m") is None


# -- the reporter, run with this host's pytest --------------------------------------------------------

TESTS = """\
import pytest
import pkg

def test_ok():
    assert pkg.value() == 1

def test_bad():
    assert pkg.value() == 2

@pytest.mark.xfail(reason="known")
def test_known():
    assert False

@pytest.mark.skip(reason="later")
def test_later():
    pass
"""


def run_reporter(
    root: Path,
    package: str,
    *,
    conftest: str | None = None,
    files: dict[str, str] | None = None,
    patched: tuple[str, ...] = (),
) -> tuple[guard.ReporterResult, str, int]:
    """Run pytest on ``root`` (a package ``pkg``, tests/test_it.py, ``files``) with the reporter;
    its result, log, exit code."""
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "__init__.py").write_text(package)
    for path, text in (files or {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_it.py").write_text(TESTS)
    if conftest is not None:
        (root / "conftest.py").write_text(conftest)
    grade_dir = root.parent / f"{root.name}-grade"
    grade_dir.mkdir()
    # this host's pytest is installed in a writable virtual environment: trust it as the sandboxes' read-only one
    setup = guard.reporter_setup(
        str(root),
        trusted=[str(Path(pytest.__file__).parents[1])],
        out=str(grade_dir / "result.json"),
        patched=patched,
    )
    for name, text in setup.files.items():
        (grade_dir / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(grade_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            setup.module,
            "--no-header",
            "-rA",
            "--tb=no",
            "-p",
            "no:cacheprovider",
            "tests/test_it.py",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert not (grade_dir / "settings.json").exists()  # read once, then deleted
    result_file = grade_dir / "result.json"
    raw = result_file.read_bytes() if result_file.exists() else None
    return guard.check_report(raw, setup.nonce), done.stdout, done.returncode


CLEAN = "def value():\n    return 1\n"


def test_reporter_records_what_the_summary_says(tmp_path: Path) -> None:
    result, log, code = run_reporter(tmp_path / "repo", CLEAN)
    assert result.tampered == [], result.tampered
    assert result.tests == {
        "tests/test_it.py::test_ok": ["PASSED"],
        "tests/test_it.py::test_bad": ["FAILED"],
        "tests/test_it.py::test_known": ["XFAIL"],
        "tests/test_it.py::test_later": ["SKIPPED"],
    }
    assert code == 1 and result.exitstatus == 1
    statuses = parse_pytest(log)
    graded = list(statuses)
    assert guard.unbacked_claims(statuses, result, parse_pytest, graded) == []


FORGE_REPORTS = (
    CLEAN
    + """
import _pytest.reports as _r
_orig = _r.TestReport.from_item_and_call.__func__
def _passed(cls, item, call):
    rep = _orig(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep
_r.TestReport.from_item_and_call = classmethod(_passed)
"""
)


def test_reporter_catches_report_monkeypatching(tmp_path: Path) -> None:
    result, log, code = run_reporter(tmp_path / "repo", FORGE_REPORTS)
    assert "PASSED tests/test_it.py::test_bad" in log and code == 0  # the forgery works on pytest itself
    assert any("from_item_and_call was replaced" in t for t in result.tampered), result.tampered
    assert any("test_bad raised AssertionError but its report says it passed" in t for t in result.tampered)


def test_reporter_catches_replaced_helpers(tmp_path: Path) -> None:
    """Rewriting a test file while hiding it from the hash check (hashlib replaced) is still caught."""
    package = CLEAN + (
        "import hashlib, pathlib\n"
        "hashlib.sha256 = lambda data=b'': hashlib.md5(b'same')\n"
        "pathlib.Path(__file__).parents[1].joinpath('tests', 'test_it.py').write_text("
        "'def test_ok():\\n    pass\\n\\ndef test_bad():\\n    pass\\n')\n"
    )
    (tmp_path / "repo" / "tests").mkdir(parents=True)
    (tmp_path / "repo" / "tests" / "conftest.py").write_text("import pkg\n")  # imports the package first
    result, _, _ = run_reporter(tmp_path / "repo", package)
    assert any("hashlib.sha256 was replaced" in t for t in result.tampered), result.tampered
    assert any("tests/test_it.py changed while the tests ran" in t for t in result.tampered), result.tampered


SWAP_TEST_MODULES = """\
import importlib.abc
import importlib.util
import pathlib
import sys


class _Swap(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.rpartition(".")[2].startswith("test_"):
            return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        real = pathlib.Path(__file__).with_name(module.__name__.rpartition(".")[2] + ".py")
        module.__file__ = str(real)
        names = [ln[4:].split("(")[0] for ln in real.read_text().splitlines() if ln.startswith("def test_")]
        exec("".join(f"def {n}():\\n    pass\\n" for n in names), module.__dict__)
        if self in sys.meta_path:
            sys.meta_path.remove(self)


sys.meta_path.insert(0, _Swap())
"""
"""``tests/__init__.py`` that serves every test module from an import hook (all tests pass), then
removes the hook, so the import hooks and the files look untouched afterwards."""


def test_reporter_catches_test_modules_from_an_import_hook(tmp_path: Path) -> None:
    result, log, code = run_reporter(tmp_path / "repo", CLEAN, files={"tests/__init__.py": SWAP_TEST_MODULES})
    assert "PASSED tests/test_it.py::test_bad" in log and code == 0  # the forgery works on pytest itself
    assert any("test module tests.test_it was loaded by _Swap" in t for t in result.tampered), result.tampered


def test_log_lines_the_reporter_did_not_see_are_unbacked(tmp_path: Path) -> None:
    """A conftest that was there from the start (so the reporter trusts it) prints PASSED lines."""
    conftest = (
        "_ids = []\ndef pytest_collection_modifyitems(items):\n    _ids.extend(i.nodeid for i in items)\n"
        "def pytest_unconfigure(config):\n    print('\\n'.join(f'PASSED {i}' for i in _ids))\n"
    )
    result, log, _ = run_reporter(tmp_path / "repo", CLEAN, conftest=conftest)
    statuses = parse_pytest(log)
    assert statuses["tests/test_it.py::test_bad"] == "PASSED"  # what a log parser alone believes
    claims = guard.unbacked_claims(statuses, result, PARSERS["pytest"], ["tests/test_it.py::test_bad"])
    assert claims == ["the log says tests/test_it.py::test_bad PASSED, which toolgym's reporter did not see"]


def test_plugins_the_repository_names_are_trusted_unless_patched(tmp_path: Path) -> None:
    plug = {"pkg/plug.py": "import pytest\n\n@pytest.fixture\ndef answer():\n    return 42\n"}
    conftest = 'pytest_plugins = ["pkg.plug"]\n'
    result, _, code = run_reporter(tmp_path / "a", CLEAN, conftest=conftest, files=plug)
    assert result.tampered == [] and code == 1
    result, _, _ = run_reporter(
        tmp_path / "b", CLEAN, conftest=conftest, files=plug, patched=("pkg/plug.py",)
    )
    assert result.tampered == ["plugin module pkg.plug was changed by the patch"]


REGISTER = (
    CLEAN
    + """
import gc, _pytest.config, pytest
class _Skip:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        return True
for _o in gc.get_objects():
    if isinstance(_o, _pytest.config.Config) and not _o.pluginmanager.has_plugin("x"):
        _o.pluginmanager.register(_Skip(), "x")
"""
)


def test_reporter_catches_plugins_registered_by_the_code(tmp_path: Path) -> None:
    result, log, code = run_reporter(tmp_path / "repo", REGISTER)
    assert "PASSED tests/test_it.py::test_bad" in log and code == 0
    assert any("plugin 'x'" in t for t in result.tampered), result.tampered


def test_nothing_of_the_code_under_test_runs_after_the_result(tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    package = CLEAN + f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').write('x'))\n"
    result, _, code = run_reporter(tmp_path / "repo", package)
    assert result.tampered == [] and code == 1 and not marker.exists()


def test_missing_or_foreign_results_are_tampering() -> None:
    assert guard.check_report(None, "n").tampered
    assert guard.check_report(b'{"nonce": "other", "tests": {}}', "n").tampered
    assert guard.check_report(b"not json", "n").tampered
    ok = guard.check_report(
        b'{"nonce": "n", "tests": {"t": ["PASSED"]}, "tampered": [], "exitstatus": 0}', "n"
    )
    assert ok.tampered == [] and ok.tests == {"t": ["PASSED"]} and ok.exitstatus == 0


def test_reporter_is_python36_syntax() -> None:
    """SWE-bench images run Python 3.6 and later: the reporter parses with that grammar."""
    import ast

    source = guard.REPORTER_SOURCE.read_text()
    ast.parse(source, feature_version=(3, 6))
    with pytest.raises(SyntaxError):
        ast.parse("(x := 1)", feature_version=(3, 6))  # the check can fail
    assert "from __future__ import annotations" not in source


@pytest.mark.parametrize(
    "parser", ["pytest", "pytest_options", "pytest_v2", "matplotlib", "seaborn", "pytest_verbose"]
)
def test_log_keys_follow_each_parser(parser: str) -> None:
    assert guard.log_key(PARSERS[parser], "tests/t.py::test_a[x]") == "tests/t.py::test_a[x]"
    assert guard.log_key(PARSERS["pytest_options"], "t.py::f[/tmp/a/b.csv]") == "t.py::f[/b.csv]"
