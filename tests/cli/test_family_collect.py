"""Each model family's tiny model collects and verifies end to end, through the real CLI:
``toolgym collect --model tiny-<family> --parser auto`` then ``toolgym verify``.

The tiny models have random weights, so what they write is noise: the point is that every family's
tokenizer, chat template and parser run through the engine and the store, and that the stored
token sequences pass every faithfulness check (including the prompt against the template).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import Runner
from tests.core.family_helpers import FAMILY_PARSER

TINY = {
    "qwen3": "tiny-qwen3",
    "qwen3-coder": "tiny-qwen3-coder",
    "mistral": "tiny-mistral",
    "llama": "tiny-llama",
    "llama4": "tiny-llama4",
    "deepseek-v3.1": "tiny-deepseek-v3.1",
    "kimi-k2": "tiny-kimi-k2",
    "gpt-oss": "tiny-gpt-oss",
    "glm-4.5": "tiny-glm-4.5",
}


@pytest.mark.parametrize("family", list(TINY))
def test_tiny_family_model_collects_and_verifies(family: str, tmp_path: Path, cli: Runner) -> None:
    out = tmp_path / family
    done = cli(
        "collect",
        "--env",
        "math-python",
        "--model",
        TINY[family],
        "--parser",
        "auto",
        "-n",
        "4",
        "--max-turns",
        "3",
        "--max-tokens-per-turn",
        "40",
        "--sandbox-backend",
        "none",
        "--no-progress",
        "--out",
        str(out),
    )
    assert done.code == 0, done.text
    assert "4 trajectories written, 0 failed" in done.text, done.text
    manifest = json.loads((out / "manifest.json").read_text())
    want = FAMILY_PARSER[family]
    assert manifest["environment"].get("parser_used", manifest["environment"]["parser"]) == want
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert all(r["metadata"]["policy"] == "model" and r["segments"] for r in rows)
    done = cli("verify", str(out), "--tokenizer", TINY[family])
    assert done.code == 0 and "all invariants hold" in done.text, done.text


def test_parser_option_errors_are_one_sentence(tmp_path: Path, cli: Runner) -> None:
    done = cli(
        "collect",
        "--env",
        "math-python",
        "--model",
        "tiny-mistral",
        "--parser",
        "klingon",
        "-n",
        "1",
        "--sandbox-backend",
        "none",
        "--no-progress",
        "--out",
        str(tmp_path / "x"),
    )
    assert done.code != 0 and "klingon" in done.text and "Traceback" not in done.text, done.text
