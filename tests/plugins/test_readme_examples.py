"""The examples in the plugins' READMEs run as written (bash blocks in a shell, Python blocks in Python)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = [
    ROOT / "plugins" / "search" / "README.md",
    ROOT / "plugins" / "search" / "qa" / "README.md",
    ROOT / "plugins" / "sql" / "README.md",
    ROOT / "plugins" / "sql" / "text2sql" / "README.md",
]
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.DOTALL | re.MULTILINE)
BLOCKS = [
    (readme, i, lang, code)
    for readme in READMES
    for i, (lang, code) in enumerate(BLOCK.findall(readme.read_text()))
]


@pytest.mark.parametrize(
    ("readme", "index", "lang", "code"),
    BLOCKS,
    ids=[f"{b[0].parent.relative_to(ROOT / 'plugins')}-{b[1]}-{b[2]}" for b in BLOCKS],
)
def test_readme_example(readme: Path, index: int, lang: str, code: str) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (
        f"{readme.name} block {index} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    assert "Error" not in proc.stdout, proc.stdout
