"""Loading the search plugins must not let JAX preallocate the GPU (bm25s imports JAX when present).

A fake ``jax`` package on the path records the environment it was imported under, as JAX reads
``XLA_PYTHON_CLIENT_PREALLOCATE`` when it starts its GPU client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_JAX = """
import json, os
open(os.environ["FAKE_JAX_OUT"], "w").write(json.dumps({"preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}))
"""
FAKE_LAX = """
def top_k(x, k):
    return x[:k], list(range(k))
"""


@pytest.mark.parametrize("module", ["toolgym.plugins.search.bm25", "toolgym.plugins.webshop.search"])
def test_bm25s_imports_jax_without_preallocation(module: str, tmp_path: Path) -> None:
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_JAX)
    (fake / "lax.py").write_text(FAKE_LAX)
    out = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    env.update(PYTHONPATH=str(tmp_path / "site"), FAKE_JAX_OUT=str(out))
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True, cwd=tmp_path, timeout=120)
    assert out.exists(), "bm25s did not import the (fake) jax: this test no longer exercises the JAX path"
    assert json.loads(out.read_text()) == {"preallocate": "false"}


def test_a_users_own_setting_is_kept(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_JAX)
    (fake / "lax.py").write_text(FAKE_LAX)
    out = tmp_path / "seen.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "site"),
        "FAKE_JAX_OUT": str(out),
        "XLA_PYTHON_CLIENT_PREALLOCATE": "true",
    }
    subprocess.run(
        [sys.executable, "-c", "import toolgym.plugins.search.bm25"],
        env=env,
        check=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert json.loads(out.read_text()) == {"preallocate": "true"}
