"""What a test needs that a machine may lack: a skip on a developer's machine, a failure in CI.

``make test`` runs pytest with ``CI=1``. There everything the dev extra and ``scripts/setup.sh``
install must be present, so a test that would skip for want of it fails instead, saying what is
missing and how to install it; a suite that skipped its OpenEnv or MCP tests must not look green.
(``tests/sandboxes/helpers.py`` and ``tests/distributed/conftest.py`` apply the same rule to sandbox
backends, Ray and a second Docker engine.)
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

SETUP_HINT = "bash scripts/setup.sh (or: pip install -e '.[dev]')"
"""How a developer gets every test dependency (``make setup`` runs it)."""
OPENENV_HINT = (
    "bash scripts/setup.sh, which installs openenv-core without its gradio web UI "
    "(pip install --no-deps 'openenv-core>=0.3' beside pip install -e '.[dev]', which brings its "
    "fastmcp, websockets, fastapi and uvicorn)"
)
"""openenv-core is not in the dev extra: its hard dependency on gradio is left out on purpose."""


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` set to anything but empty, ``0`` or ``false``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def need(problem: str | None, what: str) -> None:
    """Nothing when ``problem`` is None; else fail (CI) or skip (elsewhere), naming ``what`` and why.
    Usable at a module's top level."""
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"{what} must be available in CI: {problem}", pytrace=False)
    pytest.skip(f"{what} unavailable here: {problem}", allow_module_level=True)


def missing(exc: ImportError, *, hint: str = SETUP_HINT) -> None:
    """:func:`need` for a failed import: fail (CI) or skip, naming the module and ``hint`` (how to
    install it). At a module's top level, in the ``except`` of a ``try: import ...``, so that the
    imports after it stay in the file's import block::

        try:
            import openenv.core  # noqa: F401
        except ImportError as exc:
            missing(exc, hint=OPENENV_HINT)
    """
    name = exc.name or "a module"
    need(f"cannot import {name} ({exc}); install it with {hint}", name)


def need_module(name: str, *, hint: str = SETUP_HINT) -> ModuleType:
    """``import name``, or :func:`missing`: the ``pytest.importorskip`` of a dependency CI must have."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(exc, hint=hint)
        raise
