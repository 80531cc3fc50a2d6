"""What produced a dataset: versions of the code, of the plugin packages and of key libraries.

``toolgym collect`` records these in ``manifest.json`` so a dataset can be traced back to the
exact environment, tool and model code that made it, and so ``toolgym reverify`` can tell when
the reward code it re-runs is not the code that scored the data.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import platform
import subprocess
import sys
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LIBRARIES = ("toolgym", "torch", "transformers", "tokenizers", "pydantic", "pyarrow")
"""Libraries whose versions change what a collection produces (tokenization, sampling)."""


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


@functools.lru_cache(maxsize=256)
def distribution_of(module: str) -> dict[str, str] | None:
    """The installed distribution that provides ``module`` (a dotted name): ``{"name", "version"}``;
    None for modules outside any distribution (a script, a test helper in a checkout).

    A distribution counts only if the module's file lies inside it (its install root, or the
    source directory of an editable install): two packages may ship a top-level ``tests``."""
    top = module.split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    for name in _distributions().get(top, []):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if origin is None or any(origin.is_relative_to(root) for root in _roots(dist)):
            return {"name": name, "version": dist.version}
    return None


def _roots(dist: importlib.metadata.Distribution) -> list[Path]:
    roots = [Path(str(dist.locate_file(""))).resolve()]
    with contextlib.suppress(Exception):  # PEP 610: an editable install records its source folder
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        if direct.get("dir_info", {}).get("editable") and str(direct.get("url", "")).startswith("file://"):
            roots.append(Path(urllib.parse.unquote(direct["url"][len("file://") :])).resolve())
    return roots


def module_versions(modules: Iterable[str]) -> dict[str, dict[str, str] | None]:
    """``distribution_of`` for each module name."""
    return {m: distribution_of(m) for m in sorted(set(modules))}


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str]:
    """Installed versions of ``names`` (absent ones left out)."""
    out: dict[str, str] = {}
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[name] = importlib.metadata.version(name)
    return out


def code_version() -> str:
    """toolgym's version plus ``git describe --always --dirty`` when running from a checkout."""
    import toolgym

    version = toolgym.__version__
    with contextlib.suppress(Exception):
        here = Path(__file__).resolve().parent.parent
        rev = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if rev.returncode == 0 and rev.stdout.strip():
            version += f"+{rev.stdout.strip()}"
    return version


def runtime() -> dict[str, Any]:
    """Python and platform, for the record."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "libraries": library_versions(),
    }
