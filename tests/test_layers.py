"""The floor plan's dependency rule (docs/architecture.md), kept by reading every module's imports.

1. No import cycle between modules: imports at the top, inside functions and under
   ``if TYPE_CHECKING:`` all count (a cycle hidden in a function is still a knot to untie).
2. Packages in layers: ``core`` < ``sandboxes``, ``trajectories`` < ``plugins``, the test doubles <
   ``training`` (what both trainers share < the local trainer, the verl bridge < warm starts < the local
   trainer's entry point) < the application (``toolgym.cli``, ``toolgym.collect``, ``training.demo``). A module
   imports its own package and lower layers only; the face (``toolgym/__init__.py``) imports only ``core``.
3. Inside ``core``, rooms in order: the values at its root < ``util`` < ``tokens``, ``parsing``, ``env`` <
   ``llm`` < the plugin system (``hookspecs``, ``registry``) < ``builtin`` < ``rollout``.

Each exception names the module pair and why it stays.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("core", "plugins", "sandboxes", "trajectories", "training", "toolgym")
SKIP = ("sandboxes/images/", "plugins/swe/data/")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "toolgym" else ["toolgym", *parts])


@cache
def modules() -> dict[str, Path]:
    out = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if not any(rel.startswith(s) for s in SKIP):
                out[module_name(path)] = path
    return out


def imports_in(source: str, module: str, *, package: bool, known: Iterable[str]) -> set[str]:
    """The toolgym modules ``source`` (the text of ``module``) imports, anywhere in the file.
    ``from pkg import sub`` counts ``pkg.sub`` when that is a module, else ``pkg``."""
    known = set(known)
    here = module if package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                base = ".".join(
                    parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else [])
                )
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != module}


@cache
def graph() -> dict[str, frozenset[str]]:
    known = modules()
    return {
        m: frozenset(imports_in(p.read_text(), m, package=p.name == "__init__.py", known=known))
        for m, p in known.items()
    }


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# -- 1. modules ------------------------------------------------------------------------------------


def test_no_module_imports_itself_in_a_circle() -> None:
    knots = cycles(graph())
    assert not knots, (
        "import cycles (untie each: move what both need into a module of its own):\n"
        + "\n".join(" <-> ".join(k) for k in knots)
    )


def test_the_cycle_check_can_fail() -> None:
    a = "from toolgym.core.rollout import engine\n"
    b = "def f():\n    from .episode import Episode\n"
    known = {"toolgym.core.rollout.engine", "toolgym.core.rollout.episode"}
    edges = {
        "toolgym.core.rollout.episode": frozenset(
            imports_in(a, "toolgym.core.rollout.episode", package=False, known=known)
        ),
        "toolgym.core.rollout.engine": frozenset(
            imports_in(b, "toolgym.core.rollout.engine", package=False, known=known)
        ),
    }
    assert cycles(edges) == [sorted(known)]


# -- 2. packages -----------------------------------------------------------------------------------

APPLICATION = ("toolgym.cli", "toolgym.collect", "toolgym.__main__", "toolgym.training.demo")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("toolgym.core",),
    ("toolgym.sandboxes", "toolgym.trajectories"),
    ("toolgym.plugins", "toolgym.testing", "toolgym.scaffold", "toolgym.logs", "toolgym.gym"),
    ("toolgym.training",),  # advantages, filters, tasks, the config file: what both trainers share
    ("toolgym.training.local", "toolgym.training.verl", "toolgym.training.trl"),
    ("toolgym.training.warmstart",),
    ("toolgym.training.runner",),
    APPLICATION,
)
"""Lowest first. A module may import modules of its own layer and of lower layers; between the packages
of one layer, imports run one way only (:func:`test_packages_form_no_cycle`)."""

PACKAGE_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("toolgym.plugins.search.cli", "toolgym.cli.progress"): (
        "`toolgym index`, a command group the search plugin adds to the CLI, uses the CLI's progress display"
    ),
    ("toolgym.plugins.swe.cli", "toolgym.cli.common"): (
        "`toolgym swe`, a command group the SWE plugin adds to the CLI, prints through the CLI's console"
    ),
}
"""(importer, imported) pairs that run against the layers, each with its reason."""


def place_of(module: str, levels: tuple[tuple[str, ...], ...]) -> tuple[int, str]:
    """(level, name) of ``module`` in ``levels``: the longest prefix listed there; (-1, "") for none."""
    best = (-1, "")
    for level, names in enumerate(levels):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best[1]):
                best = (level, name)
    return best


def package_of(module: str) -> tuple[int, str]:
    """(layer, package) of ``module`` in :data:`LAYERS`."""
    return place_of(module, LAYERS)


def test_every_module_has_a_layer() -> None:
    homeless = [m for m in modules() if m != "toolgym" and package_of(m)[0] < 0]
    assert not homeless, f"modules outside every layer (add their package to LAYERS): {homeless}"


def test_packages_import_only_their_own_and_lower_layers() -> None:
    bad = []
    for module, imported in graph().items():
        if module == "toolgym":
            continue
        level, _package = package_of(module)
        for other in imported:
            other_level, _other_package = package_of(other)
            if other_level <= level or (module, other) in PACKAGE_EXCEPTIONS:
                continue
            bad.append(f"{module} (layer {level}) imports {other} (layer {other_level})")
    assert not bad, "imports that run up or across the layers (docs/architecture.md):\n" + "\n".join(
        sorted(bad)
    )


def collapsed(group: dict[str, str], skip: Iterable[tuple[str, str]] = ()) -> dict[str, frozenset[str]]:
    """The module graph with each module replaced by its package (or room) in ``group``, self-edges and
    the ``skip`` imports dropped."""
    skip = set(skip)
    out: dict[str, set[str]] = {}
    for module, imported in graph().items():
        if module not in group:
            continue
        out.setdefault(group[module], set()).update(
            group[o] for o in imported if o in group and group[o] != group[module] and (module, o) not in skip
        )
    return {k: frozenset(v) for k, v in out.items()}


def test_packages_form_no_cycle() -> None:
    group = {m: package_of(m)[1] for m in modules() if m != "toolgym" and package_of(m)[0] >= 0}
    knots = cycles(collapsed(group, skip=PACKAGE_EXCEPTIONS))
    assert not knots, f"packages that import each other: {knots}"


def test_package_exceptions_are_still_needed() -> None:
    stale = [pair for pair in PACKAGE_EXCEPTIONS if pair[1] not in graph().get(pair[0], ())]
    assert not stale, f"exceptions no module needs any more (remove them): {stale}"


def test_the_face_imports_only_core() -> None:
    outside = sorted(m for m in graph()["toolgym"] if not m.startswith("toolgym.core."))
    assert not outside, f"toolgym/__init__.py imports beyond core: {outside}"
    face = (REPO / "toolgym" / "__init__.py").read_text()
    lazy = [line for line in face.splitlines() if '": "toolgym.' in line and '": "toolgym.core.' not in line]
    assert not lazy, f"the face's lazy names load modules beyond core: {lazy}"


def test_the_cli_imports_no_plugin() -> None:
    bad = sorted(
        f"{m} imports {o}"
        for m, imported in graph().items()
        if m.startswith("toolgym.cli")
        for o in imported
        if o.startswith("toolgym.plugins")
    )
    assert not bad, (
        "the CLI reaches plugins through the registry (toolgym_cli_commands, toolgym_audit_checks):\n"
        + "\n".join(bad)
    )


@pytest.mark.parametrize("package", ["toolgym.core", "toolgym.sandboxes", "toolgym.trajectories"])
def test_lower_packages_import_no_plugin_training_or_application(package: str) -> None:
    above = ("toolgym.plugins", "toolgym.training", *APPLICATION)
    bad = sorted(
        f"{m} imports {o}"
        for m, imported in graph().items()
        if m.startswith(package + ".")
        for o in imported
        if o.startswith(above)
    )
    assert not bad, "\n".join(bad)


# -- 3. rooms of core ------------------------------------------------------------------------------

VALUES = ("types", "errors", "deadline", "trajectory", "tools", "sandbox", "sandbox_profiles", "commands")
ROOMS: tuple[tuple[str, ...], ...] = (
    tuple(f"toolgym.core.{v}" for v in VALUES),
    ("toolgym.core.util",),
    ("toolgym.core.tokens", "toolgym.core.parsing", "toolgym.core.env"),
    ("toolgym.core.llm",),
    ("toolgym.core.hookspecs", "toolgym.core.registry"),
    ("toolgym.core.builtin",),
    ("toolgym.core.rollout",),
)
"""core's rooms, lowest first; a room imports its own layer and lower ones, and rooms import each other
one way only."""

ROOM_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("toolgym.core.llm.resolve", "toolgym.core.registry"): (
        "a model backend is found by name among the registered ones (third-party backends too); the registry is "
        "loaded only when the caller passes none"
    ),
    ("toolgym.core.parsing.auto", "toolgym.core.registry"): (
        "`--parser auto` chooses among the registered parsers and returns a registry view that resolves the "
        "environment's parser name to the choice"
    ),
}


def room_of(module: str) -> tuple[int, str]:
    """(level, room) of a core module in :data:`ROOMS`."""
    return place_of(module, ROOMS)


def test_every_core_module_has_a_room() -> None:
    homeless = [m for m in modules() if m.startswith("toolgym.core.") and room_of(m)[0] < 0]
    assert not homeless, (
        f"core modules in no room (give them one in ROOMS and docs/architecture.md): {homeless}"
    )


def test_core_rooms_import_only_their_own_and_lower_rooms() -> None:
    bad = []
    for module, imported in graph().items():
        if not module.startswith("toolgym.core."):
            continue
        level, room = room_of(module)
        for other in imported:
            other_level, other_room = room_of(other)
            if other_level <= level or (module, other) in ROOM_EXCEPTIONS:
                continue
            bad.append(f"{module} ({room}) imports {other} ({other_room})")
    assert not bad, "imports that run up or across core's rooms (docs/architecture.md):\n" + "\n".join(
        sorted(bad)
    )


def test_rooms_form_no_cycle() -> None:
    group = {m: room_of(m)[1] for m in modules() if m.startswith("toolgym.core.") and room_of(m)[0] >= 0}
    knots = cycles(collapsed(group, skip=ROOM_EXCEPTIONS))
    assert not knots, f"rooms of core that import each other: {knots}"


def test_room_exceptions_are_still_needed() -> None:
    stale = [pair for pair in ROOM_EXCEPTIONS if pair[1] not in graph().get(pair[0], ())]
    assert not stale, f"exceptions no module needs any more (remove them): {stale}"
