"""``webshop-web`` with screenshot observations: a scripted purchase whose every page the model
would see as an image with element ids drawn on it; files by hash, verified (Docker)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from PIL import Image

from toolgym.core.tokens.images import image_refs


def test_a_scripted_purchase_with_screenshot_observations_verifies(tmp_path: Path) -> None:
    out = tmp_path / "shots"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolgym",
            "collect",
            "--env",
            "webshop-web",
            "--model",
            "scripted",
            "--env-arg",
            "observation=screenshot",
            "--env-arg",
            "split=test",
            "-n",
            "2",
            "--sandbox-backend",
            "docker",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["status"] == "ok" and r["terminated"] and r["reward"] > 0 for r in rows)
    for r in rows:
        refs = image_refs(r["messages"])
        assert len(refs) == len(r["steps"])  # the start page, and the page after every step but the buy
        assert "yellow label" in r["messages"][0]["content"]
        first_text = r["messages"][1]["content"][0]["text"]
        assert "Instruction:" in first_text and "URL: " in first_text
        assert not re.search(
            r"^\s*\[\d+\]", first_text, re.MULTILINE
        )  # no element lines: they are on the image
        for ref in refs:
            data = (out / "images" / f"{ref[7:]}.png").read_bytes()
            assert hashlib.sha256(data).hexdigest() == ref[7:]
            assert Image.open(io.BytesIO(data)).size == (1280, 720)
    verify = subprocess.run(
        [sys.executable, "-m", "toolgym", "verify", str(out)], capture_output=True, text=True, timeout=300
    )
    assert verify.returncode == 0 and "all invariants hold" in verify.stdout, verify.stdout + verify.stderr
