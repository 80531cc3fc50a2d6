"""Modules that once imported each other (some only behind TYPE_CHECKING or inside functions) no
longer do, and the rollout engine's modules form no import cycle at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = {
    "core": "core",
    "plugins": "plugins",
    "sandboxes": "sandboxes",
    "trajectories": "trajectories",
    "training": "training",
    "toolgym": "toolgym",
}


def module_file(module: str) -> Path | None:
    """``toolgym.core.rollout.engine`` → ``core/rollout/engine.py`` (or the package's ``__init__.py``)."""
    parts = module.split(".")
    if parts[0] != "toolgym" or len(parts) < 2:
        return None
    head, rest = (
        (parts[1], parts[2:]) if parts[1] in FOLDERS and parts[1] != "toolgym" else ("toolgym", parts[1:])
    )
    base = REPO / FOLDERS[head] / Path(*rest) if rest else REPO / FOLDERS[head]
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "toolgym" else ["toolgym", *parts])


def imports_of(module: str) -> set[str]:
    """Every toolgym module ``module`` imports anywhere in its file (see :func:`imports_in`)."""
    path = module_file(module)
    assert path is not None, f"no file for {module}"
    return imports_in(path.read_text(), module, package=path.name == "__init__.py")


def imports_in(source: str, module: str, *, package: bool = False) -> set[str]:
    """The toolgym modules ``source`` (the text of ``module``) imports: at the top level, inside
    functions, under ``if TYPE_CHECKING:``; ``from pkg import name`` counts ``pkg.name`` when that
    is a module."""
    here = module if package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(
                f"{base}.{alias.name}"
                for alias in node.names
                if module_file(f"{base}.{alias.name}") is not None
            )
    return {m for m in out if m.startswith("toolgym.") and module_file(m) is not None}


PAIRS = [
    ("toolgym.core.rollout.engine", "toolgym.core.rollout.episode"),
    ("toolgym.core.llm.resolve", "toolgym.core.llm.clients.openai"),
    ("toolgym.core.llm.resolve", "toolgym.core.llm.clients.sglang"),
    ("toolgym.training.demo.run", "toolgym.training.demo.report"),
]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_pair_does_not_import_both_ways(a: str, b: str) -> None:
    assert not (b in imports_of(a) and a in imports_of(b)), f"{a} and {b} import each other"


def test_the_episode_does_not_import_the_engine() -> None:
    assert "toolgym.core.rollout.engine" not in imports_of("toolgym.core.rollout.episode")
    assert "toolgym.core.rollout.engine" not in imports_of("toolgym.core.rollout.branching")


def cycle_through(start: str, within: str) -> list[str] | None:
    """An import cycle through ``start`` among the modules whose names start with ``within``."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        mod, path = stack.pop()
        for dep in sorted(imports_of(mod)):
            if not dep.startswith(within):
                continue
            if dep == start:
                return [*path, dep]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, [*path, dep]))
    return None


@pytest.mark.parametrize(
    "start",
    [
        "toolgym.core.rollout.engine",
        "toolgym.core.rollout.episode",
        "toolgym.core.rollout.branching",
        "toolgym.core.llm.resolve",
        "toolgym.training.demo.run",
    ],
)
def test_no_import_cycle_through(start: str) -> None:
    within = start.rsplit(".", 1)[0]
    assert cycle_through(start, within) is None


def test_the_walker_sees_hidden_imports() -> None:
    """The check can fail: the imports that made the old circles are all seen."""
    old_report = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .run import DemoResult\n"
    assert "toolgym.training.demo.run" in imports_in(old_report, "toolgym.training.demo.report")
    old_openai = "def f():\n    from ..resolve import load_tokenizer\n"
    assert "toolgym.core.llm.resolve" in imports_in(old_openai, "toolgym.core.llm.clients.openai")
    old_episode = "if TYPE_CHECKING:\n    from .engine import EpisodeRequest, RolloutEngine\n"
    assert "toolgym.core.rollout.engine" in imports_in(old_episode, "toolgym.core.rollout.episode")
    assert "toolgym.core.llm" in imports_in("from ... import llm\n", "toolgym.core.llm.clients.openai")
    assert module_name(REPO / "core" / "rollout" / "engine.py") == "toolgym.core.rollout.engine"
