"""Type-check toolgym under the names it installs as (``toolgym.core``, never ``core``).

setup.py maps the top-level folders onto sub-packages of ``toolgym``; the editable install does it
with an import hook that mypy cannot follow. Given the folders themselves, mypy would name the
modules ``core.engine`` and so on and type every ``from toolgym.core… import X`` as ``Any``. So this
script keeps a tree of symbolic links, ``build/typecheck/toolgym/``, that lays the folders out as the
installed package (``toolgym/cli`` → ``../../../toolgym/cli``, ``toolgym/core`` → ``../../../core``),
runs ``mypy -p toolgym`` with that tree on ``MYPYPATH``, and prints mypy's report with the real paths.
Then it checks the in-sandbox agent (``sandboxes/agent/``) a second time, as the sibling scripts it
runs as there (``main`` imports ``protocol``, ``procs``, …): one mypy run cannot hold a file under
two module names.

The links point at folders, so files added later are seen without rebuilding the tree; the tree is
brought up to date (never wiped) on every run, so that two runs at once do not disturb each other.
Extra arguments are passed to both mypy runs. Exit status: the first non-zero of the two, else 0.

mypy's incremental cache lives in ``$TOOLGYM_CACHE/mypy`` (default ``~/.cache/toolgym/mypy``;
``MYPY_CACHE_DIR`` overrides it), not in the checkout, so that a fresh clone on a machine that has
checked the project before takes seconds rather than a minute: mypy keys its entries by each
module's source hash, and rechecks whatever changed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "typecheck"
SKIP = {"__pycache__"}


def package_roots() -> tuple[str, ...]:
    """The folders setup.py installs as ``toolgym.<folder>`` (its ``ROOTS``, read without running it)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ROOTS" for t in node.targets
        ):
            roots = ast.literal_eval(node.value)
            return tuple(str(r) for r in roots)
    raise SystemExit("typecheck: setup.py has no ROOTS tuple; this script reads the package layout from it")


def wanted_links() -> dict[str, Path]:
    """Name inside ``build/typecheck/toolgym/`` → the repository path it stands for."""
    links = {p.name: p for p in sorted((REPO / "toolgym").iterdir()) if p.name not in SKIP}
    for root in package_roots():
        if root in links:
            raise SystemExit(f"typecheck: toolgym/{root} would hide the {root}/ folder; rename one of them")
        links[root] = REPO / root
    return links


def sync_tree() -> Path:
    """Bring the link tree up to date and return the folder to put on ``MYPYPATH``."""
    pkg = TREE / "toolgym"
    pkg.mkdir(parents=True, exist_ok=True)
    want = wanted_links()
    for entry in pkg.iterdir():
        if entry.name not in want or not entry.is_symlink():
            if entry.is_symlink() or entry.is_file():
                entry.unlink()
    for name, target in want.items():
        link = pkg / name
        rel = os.path.relpath(target, pkg)
        if link.is_symlink() and os.readlink(link) == rel:
            continue
        tmp = pkg / f".{name}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(rel)
        os.replace(tmp, link)  # atomic: a concurrent run sees the old link or the new one
    return TREE


def real_path(line: str, roots: tuple[str, ...]) -> str:
    """``build/typecheck/toolgym/core/x.py:3: …`` → ``core/x.py:3: …``; other lines unchanged."""
    prefix = "build/typecheck/toolgym/"
    if not line.startswith(prefix):
        return line
    rest = line[len(prefix) :]
    head = rest.split("/", 1)[0]
    return rest if head in roots else "toolgym/" + rest


def cache_dir() -> str:
    root = os.environ.get("TOOLGYM_CACHE") or str(Path.home() / ".cache" / "toolgym")
    return os.environ.get("MYPY_CACHE_DIR") or str(Path(root) / "mypy")


def run_mypy(args: list[str], mypypath: str, roots: tuple[str, ...]) -> int:
    env = dict(os.environ)
    env["MYPY_CACHE_DIR"] = cache_dir()
    env["MYPYPATH"] = os.pathsep.join(p for p in (mypypath, env.get("MYPYPATH", "")) if p)
    cmd = [sys.executable, "-m", "mypy", *args]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(real_path(line, roots))
    return proc.wait()


def agent_modules() -> list[str]:
    return sorted(p.stem for p in (REPO / "sandboxes" / "agent").glob("*.py") if p.stem != "__init__")


def main(argv: list[str]) -> int:
    tree = sync_tree()
    roots = package_roots()
    package = run_mypy(["-p", "toolgym", *argv], str(tree.relative_to(REPO)), roots)
    agent_args = [arg for mod in agent_modules() for arg in ("-m", mod)]
    agent = run_mypy([*agent_args, *argv], "sandboxes/agent", roots)
    return package or agent


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
