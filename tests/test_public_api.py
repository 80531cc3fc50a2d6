"""One public door: the built-in plugins and the docs import from ``toolgym``, and ``__all__`` is exact.

The face (``toolgym/__init__.py``) is what a third-party plugin author may rely on; built-ins register
as third-party plugins do, so they import from it too. Deep modules (``toolgym.core.env.contract``,
``toolgym.core.sandbox_profiles``, …) may change without notice.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import toolgym
import toolgym.testing

REPO = Path(__file__).resolve().parent.parent
PLUGINS = REPO / "plugins"

PENDING: dict[str, str] = {}
"""Plugin modules that still import deep modules because others are editing them: each test run
reports them; remove an entry once the file imports from the face (a stale entry fails)."""

ALLOWED: dict[tuple[str, str], str] = {
    ("plugins/swe/images.py", "toolgym.sandboxes.docker"): (
        "builds, pulls and prunes Docker images for SWE instances: it shares the Docker backend's "
        "image-use cache (`warm`), which is Docker tooling, not plugin API"
    ),
    ("plugins/sql/audit.py", "toolgym.sandboxes.audit.rows"): (
        "the SQL tool's rows of `toolgym sandbox audit`: the audit's own row and outcome "
        "types (`Row`, `Fail`, `Skip`), a contract with the CLI, not plugin API"
    ),
    ("plugins/search/cli.py", "toolgym.cli.progress"): (
        "`toolgym index`, a command of the toolgym CLI that the search plugin adds: the CLI's own progress display"
    ),
    ("plugins/search/cli.py", "toolgym.core.util.http_server"): (
        "`toolgym index serve` serves the index in the foreground, as `toolgym serve` serves a model"
    ),
    ("plugins/search/cli.py", "toolgym.core.util.terminal"): (
        "prints corpus text on the operator's terminal, made safe as every command's output is"
    ),
    (
        "plugins/swe/cli.py",
        "toolgym.cli.common",
    ): "`toolgym swe`, a command of the toolgym CLI: the CLI's console",
    ("plugins/swe/cli.py", "toolgym.core.util.terminal"): (
        "prints image names and build logs on the operator's terminal, made safe as every command's output is"
    ),
    ("plugins/swe/cli.py", "toolgym.sandboxes.docker"): (
        "lists, builds and prunes the per-instance Docker images (as plugins/swe/images.py does): Docker tooling"
    ),
    ("plugins/mcp/client.py", "toolgym.core.sandbox"): (
        "lists a stdio MCP server's tools in a sandbox while the process-wide registry is being loaded: "
        "it opens the `auto` backend over the sandboxes plugin alone (get_registry() would wait on itself)"
    ),
    ("plugins/mcp/client.py", "toolgym.sandboxes"): (
        "the same listing: the sandboxes plugin, registered in a registry of its own"
    ),
    ("plugins/mcp/egress.py", "toolgym.sandboxes.netproxy"): (
        "holds the host-side client of an HTTP MCP server to the sandboxes' egress decision "
        "(`EgressProxy.decide`), the one place that decides egress: sandbox machinery, not plugin API"
    ),
}
"""(plugin module, deep module) pairs that stay deep on purpose, with the reason."""

CODE_FILES = ("toolgym/scaffold.py",)
"""Modules whose text carries code for plugin authors (the scaffold's templates)."""


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _package(rel: str) -> list[str]:
    """The package a repository file's relative imports start from (``plugins/sql/tools.py`` → toolgym.plugins.sql)."""
    parts = ["toolgym", *Path(rel).with_suffix("").parts]
    return parts[:-1]


def _resolve(node: ast.ImportFrom, rel: str) -> str:
    if not node.level:
        return node.module or ""
    base = _package(rel)[: len(_package(rel)) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def deep_imports(source: str, rel: str) -> Iterator[tuple[str, str, int]]:
    """(module, name, line) for every import of a toolgym module other than the face and the plugins,
    at any depth of the file (imports inside functions count)."""
    for node in ast.walk(ast.parse(source, rel)):
        if isinstance(node, ast.ImportFrom):
            module = _resolve(node, rel)
            if module.startswith("toolgym.") and not module.startswith("toolgym.plugins"):
                for alias in node.names:
                    yield module, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("toolgym.") and not alias.name.startswith("toolgym.plugins"):
                    yield alias.name, "<module>", node.lineno


def _deep(path: Path) -> list[tuple[str, str, int]]:
    return list(deep_imports(path.read_text(), _rel(path)))


def plugin_files() -> list[Path]:
    # skip what plugins ship to run elsewhere: the SWE bugs' repositories, sandbox-side scripts
    return [p for p in sorted(PLUGINS.rglob("*.py")) if "/data/" not in _rel(p)]


def test_the_scan_sees_deep_imports() -> None:
    """The checker itself: absolute, relative, plain and in-function deep imports are caught; the face
    and sibling plugin modules are not."""
    src = (
        "from toolgym.core.env.contract import digest\nfrom toolgym import tool\nfrom .tools import x\nimport toolgym.core.types\n"
        "def f():\n    from ...core import errors\n    from ..sql import backends\n"
    )
    found = [(m, n) for m, n, _ in deep_imports(src, "plugins/x/y.py")]
    assert found == [
        ("toolgym.core.env.contract", "digest"),
        ("toolgym.core.types", "<module>"),
        ("toolgym.core", "errors"),
    ]


def test_builtin_plugins_import_only_the_face() -> None:
    offenders = []
    for path in plugin_files():
        rel = _rel(path)
        if rel in PENDING:
            continue
        for module, name, line in _deep(path):
            if (rel, module) not in ALLOWED:
                offenders.append(f"{rel}:{line}: from {module} import {name}")
    assert not offenders, (
        "built-in plugins must import from `toolgym` (the face), as third-party plugins do; "
        "export the name from toolgym/__init__.py if it is missing:\n" + "\n".join(offenders)
    )


def test_pending_plugins_are_reported_and_the_list_is_current() -> None:
    still = {_rel(p) for p in plugin_files() if _rel(p) in PENDING and _deep(p)}
    stale = sorted(set(PENDING) - still)
    assert not stale, f"these now import only from the face; remove them from PENDING: {stale}"
    if still:
        warnings.warn(
            f"{len(still)} plugin modules still import deep modules (PENDING): {sorted(still)}", stacklevel=1
        )


def test_every_name_the_plugins_import_deeply_is_on_the_face() -> None:
    """Pending files included: switching them must be an edit of the import line, nothing more."""
    missing = []
    for path in plugin_files():
        rel = _rel(path)
        for module, name, line in _deep(path):
            if (rel, module) not in ALLOWED and name not in toolgym.__all__:
                missing.append(f"{rel}:{line}: {module}.{name}")
    assert not missing, "plugins use names the face does not export:\n" + "\n".join(missing)


def _doc_files() -> list[Path]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for folder in ("plugins", "sandboxes", "core", "trajectories", "training", "toolgym"):
        docs += sorted((REPO / folder).rglob("README.md"))
    return docs


def _face_imports(text: str) -> Iterator[tuple[str, str]]:
    """(module, name) for each ``from toolgym… import name`` in a block of code (or of prose with code)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a fragment, or a template with {placeholders}: take the single-line imports
        for module, names in re.findall(r"^\s*from (toolgym[\w.]*) import ([\w, ]+)$", text, re.MULTILINE):
            yield from ((module, n.strip()) for n in names.split(",") if n.strip())
        return
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] == "toolgym"
        ):
            yield from ((node.module or "", a.name) for a in node.names)


def doc_imports() -> Iterator[tuple[str, str, str]]:
    """(where, module, name) for every ``from toolgym… import`` in the docs' Python blocks, in the
    docstrings of the face and of ``toolgym.testing``, and in the scaffold's templates."""
    sources = [
        (_rel(p), block)
        for p in _doc_files()
        for block in re.findall(r"```python\n(.*?)```", p.read_text(), re.DOTALL)
    ]
    for documented in (toolgym, toolgym.testing):
        doc = documented.__doc__ or ""
        sources += [
            (documented.__name__, "\n".join(ln[4:] for ln in b.splitlines()))
            for b in re.findall(r"::\n\n((?:    .*\n|\n)+)", doc)
        ]
    for f in CODE_FILES:
        strings = [
            n.value
            for n in ast.walk(ast.parse((REPO / f).read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        sources += [(f, text) for text in strings if "from toolgym" in text]
    for where, text in sources:
        for module, name in _face_imports(text):
            yield where, module, name


def test_the_docs_import_only_what_exists() -> None:
    found = list(doc_imports())
    assert any(m == "toolgym" and n == "hookimpl" for _, m, n in found), "the scan found no doc imports"
    bad = []
    for where, module, name in found:
        mod = importlib.import_module(module)
        if importlib.util.find_spec(f"{module}.{name}") if hasattr(mod, "__path__") else False:
            continue  # a submodule (``from toolgym.core.builtin import parsers``)
        public = getattr(mod, "__all__", None)
        if (public is not None and name not in public) or not hasattr(mod, name):
            bad.append(f"{where}: from {module} import {name}")
    assert not bad, "the docs import names their module does not export:\n" + "\n".join(bad)


def test_the_readme_example_uses_only_the_face() -> None:
    readme = (REPO / "README.md").read_text()
    deep = [f"{m}.{n}" for w, m, n in doc_imports() if w == "README.md" and m != "toolgym"]
    assert "make_policy" in readme and not deep, f"README's examples reach past the face: {deep}"


_NOT_API = {"annotations", "TYPE_CHECKING", "Any"}
"""Names the face's own code needs (``from __future__``, typing), not part of the API."""


@pytest.mark.parametrize("module", [toolgym, toolgym.testing], ids=lambda m: m.__name__)
def test_all_matches_what_the_module_defines(module: types.ModuleType) -> None:
    public = module.__all__
    assert len(public) == len(set(public)), "duplicates in __all__"
    defined = {
        n
        for n, v in vars(module).items()
        if (not n.startswith("_") or n == "__version__")
        and n not in _NOT_API
        and not isinstance(v, types.ModuleType)
    }
    defined |= set(getattr(module, "_LAZY", {}))
    assert not set(public) - defined, f"stale: in __all__ but not defined: {sorted(set(public) - defined)}"
    assert not defined - set(public), f"missing: defined but not in __all__: {sorted(defined - set(public))}"
    for name in public:
        assert getattr(module, name) is not None or name == "__version__"


def test_lazy_names_match_the_type_checking_imports() -> None:
    """What mypy sees (the ``if TYPE_CHECKING`` block) and what ``__getattr__`` loads are the same names."""
    tree = ast.parse((REPO / "toolgym" / "__init__.py").read_text())
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                seen.update({a.name: imp.module for a in imp.names})
    assert seen == toolgym._LAZY
    for name, module in toolgym._LAZY.items():
        assert getattr(toolgym, name) is getattr(sys.modules[module], name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        toolgym.no_such_name  # noqa: B018
    assert set(toolgym._LAZY) <= set(dir(toolgym))


def test_the_face_loads_no_lazy_module_at_import() -> None:
    heavy = sorted({*toolgym._LAZY.values(), "toolgym.testing", "toolgym.sandboxes"})
    code = f"import sys, toolgym; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO.parent, check=True
    )
    assert out.stdout.strip() == "[]", f"`import toolgym` loads {out.stdout.strip()}: keep them in _LAZY"


def test_the_testing_doubles_are_the_shipped_ones() -> None:
    from toolgym.core.llm.testing import MockLLMBackend
    from toolgym.sandboxes.memory import MemoryBackend

    assert toolgym.testing.MockLLMBackend is MockLLMBackend and toolgym.testing.MemoryBackend is MemoryBackend


def _testing_examples() -> list[str]:
    blocks = re.findall(r"::\n\n((?:    .*\n|\n)+)", toolgym.testing.__doc__ or "")
    return ["\n".join(line[4:] for line in block.splitlines()) for block in blocks]


def test_the_testing_docstring_sandbox_example_runs() -> None:
    """``toolgym.testing``'s first example (a tool on the in-memory sandbox) runs as written; its own
    assert checks the answer."""
    namespace: dict[str, object] = {}
    exec(compile(_testing_examples()[0], "toolgym.testing:sandbox-example", "exec"), namespace)
    assert callable(namespace["count_files"])


def test_the_testing_docstring_engine_example_runs() -> None:
    """The second example (an episode driven by ``MockLLMBackend``) runs as written."""
    namespace: dict[str, object] = {}
    exec(compile(_testing_examples()[1], "toolgym.testing:engine-example", "exec"), namespace)
    done = namespace["done"]
    assert isinstance(done, list) and len(done) == 1 and done[0].status == "ok"
