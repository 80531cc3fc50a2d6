"""The wheel: one top-level package (toolgym), folders mapped to sub-packages, data files included."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("toolgym-*.whl")
    return whl


def test_wheel_layout(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"toolgym"}
    for sub in ("core", "plugins", "sandboxes", "trajectories", "training"):
        assert f"toolgym/{sub}/__init__.py" in names
    assert "toolgym/core/llm/local/templates/qwen.jinja" in names
    assert "toolgym/plugins/qa/math/README.md" in names
    meta = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "toolgym = toolgym.cli:main" in text and "[toolgym]" in text


def test_wheel_ships_the_typing_marker(wheel: Path) -> None:
    """``py.typed`` (PEP 561): type checkers read toolgym's own annotations in an installed wheel."""
    assert "toolgym/py.typed" in zipfile.ZipFile(wheel).namelist()


def test_fresh_venv_imports_public_api(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    before = {p.name for p in site.iterdir()}
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True
    )
    added = {p.name for p in site.iterdir()} - before
    assert added == {"toolgym", "toolgym-0.1.0.dist-info"}
    # dependencies come from this test run's environment; toolgym itself must come from the wheel
    deps = sysconfig.get_paths()["purelib"]
    code = "import toolgym, toolgym.core.rollout.engine, toolgym.trajectories; print(toolgym.__file__); print(len(toolgym.__all__))"
    res = subprocess.run(
        [str(py), "-c", code],
        env={**os.environ, "PYTHONPATH": deps},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    where, count = res.stdout.split()
    assert where.startswith(str(site)) and int(count) > 30
    cli = subprocess.run(
        [str(env_dir / "bin" / "toolgym"), "envs", "list", "--json"],
        env={**os.environ, "PYTHONPATH": deps},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert cli.returncode == 0 and '"math-python"' in cli.stdout, cli.stderr
