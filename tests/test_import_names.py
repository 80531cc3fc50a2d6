"""The repository's folders import only as ``toolgym.<folder>`` (see tests/conftest.py)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def package_roots() -> tuple[str, ...]:
    """setup.py's ``ROOTS``: the folders installed as ``toolgym.<folder>``."""
    for node in ast.parse((REPO / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ROOTS" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no ROOTS tuple")


ROOTS = package_roots()


def test_roots_cover_the_folders() -> None:
    assert set(ROOTS) == {"core", "plugins", "sandboxes", "trajectories", "training"}


@pytest.mark.parametrize("name", ROOTS)
def test_folder_does_not_import_under_its_own_name(name: str) -> None:
    assert name not in sys.modules, f"something imported {name!r} itself; import toolgym.{name}"
    assert importlib.util.find_spec(name) is None, (
        f"`import {name}` works in the test process, so modules load twice ({name}.x and toolgym.{name}.x); "
        "keep the repository root off sys.path"
    )
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{name}.__init__")


def test_tests_package_still_imports() -> None:
    helpers = importlib.import_module("tests.sandboxes.helpers")
    assert helpers.__name__ == "tests.sandboxes.helpers"


def test_the_installed_names_work() -> None:
    errors = importlib.import_module("toolgym.core.errors")
    assert Path(errors.__file__ or "").resolve() == REPO / "core" / "errors.py"
