"""vLLM's own tool parsers and toolgym's extract the same calls from the same text, per family.

The texts are what each family's model writes (calls rendered by the family's chat template, with
random arguments), plus final answers; vLLM's parser for the family runs in ``.venv-vllm``
(``tests/core/llm/vllm_tool_parse.py``, one subprocess for every case), with the same tiny
tokenizer (gpt-oss: vLLM's harmony parsing, on the text's ids in the real harmony encoding). Skipped, with the reason, only where ``.venv-vllm`` is absent (``make test-engines``
installs it).
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.core.family_helpers import (
    FAMILIES,
    FAMILY_PARSER,
    ONE_CALL_PER_TURN,
    assistant_text,
    call_id,
    lookup,
)
from toolgym.core.builtin.parsers import builtin_parsers
from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.llm.serving.server_vllm import vllm_python
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.tokenizer import load_tokenizer
from toolgym.core.types import ActionKind, ToolCall

VLLM_PARSER = {
    "qwen3": "hermes",
    "qwen3-coder": "qwen3_coder",
    "mistral": "mistral",
    "llama": "llama3_json",
    "llama4": "llama4_pythonic",
    "deepseek-v3.1": "deepseek_v31",
    "kimi-k2": "kimi_k2",
    "glm-4.5": "glm45",
    "gpt-oss": "openai",
}
"""Family → the name of vLLM's parser for it (vLLM's docs: ``--tool-call-parser``). gpt-oss's
``openai`` is a stub: vLLM parses harmony with its ``HarmonyParser`` on token ids of the real o200k
harmony encoding, which ``vllm_tool_parse.py`` encodes the text with (the tiny tokenizer's ids are
not those; the format is the same)."""
CHECKED = tuple(f for f in FAMILIES if f in VLLM_PARSER)
WORDS = [
    "fox",
    "red shoes",
    "Zürich",
    "a\nb",
    'quote " and \\ backslash',
    "",
    "1, 2, 3",
    "日本語",
    "x = {'a': 1}",
]


def _args(rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {"key": rng.choice(WORDS)}
    if rng.random() < 0.5:
        args["count"] = rng.randint(-5, 10**6)
    if rng.random() < 0.4:
        args["scale"] = rng.choice([0.5, -2.25, 1e-3, 3.0])
    if rng.random() < 0.4:
        args["exact"] = rng.random() < 0.5
    if rng.random() < 0.3:
        args["tags"] = [rng.choice(WORDS) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.3:
        args["extra"] = {"n": rng.randint(0, 9), "s": rng.choice(WORDS), "z": None}
    return args


def _cases(family: str, chat: ChatFormat, n: int = 12) -> list[tuple[str, bool]]:
    rng = random.Random(f"vllm-cross-check/{family}")
    out = [("The answer is red.", False)]
    for i in range(n):
        k = 1 if family in ONE_CALL_PER_TURN else rng.randint(1, 3)
        calls = [ToolCall("lookup", _args(rng), call_id(family, "lookup", j, f"{i}")) for j in range(k)]
        out.append((assistant_text(chat, calls), True))
    return out


@pytest.fixture(scope="module")
def vllm_results(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    try:
        python = vllm_python()
    except ConfigError as exc:
        reason = f"no real vLLM here: {exc}"
        print(f"\nSKIPPED vLLM tool-parser cross-check: {reason}")
        pytest.skip(reason)
    cases = []
    for family in CHECKED:
        directory = ensure_tiny_model(family, with_weights=False)  # type: ignore[arg-type]
        chat = ChatFormat(load_tokenizer(directory))
        for text, is_call in _cases(family, chat):
            cases.append(
                {
                    "family": family,
                    "parser": VLLM_PARSER[family],
                    "tokenizer": str(directory),
                    "tools": [lookup.schema],
                    "text": text,
                    "is_call": is_call,
                }
            )
    work = tmp_path_factory.mktemp("vllm-parsers")
    (work / "in.json").write_text(json.dumps(cases))
    script = Path(__file__).with_name("vllm_tool_parse.py")
    done = subprocess.run(
        [str(python), str(script), str(work / "in.json"), str(work / "out.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return cases, json.loads((work / "out.json").read_text())


@pytest.mark.parametrize("family", CHECKED)
def test_vllm_and_toolgym_extract_the_same_calls(
    family: str, vllm_results: tuple[list[dict[str, Any]], list[dict[str, Any]]]
) -> None:
    parser = {p.name: p for p in builtin_parsers()}[FAMILY_PARSER[family]]
    cases, results = vllm_results
    checked = 0
    for case, theirs in zip(cases, results, strict=True):
        if case["family"] != family:
            continue
        ours = parser.parse(case["text"], {"lookup": lookup})
        assert theirs["error"] is None, (case["text"], theirs["error"])
        if case["is_call"]:
            assert ours.kind is ActionKind.TOOL_CALLS, (case["text"], ours.error)
            assert theirs["tools_called"], case["text"]
            assert [[c.name, c.arguments] for c in ours.tool_calls] == theirs["calls"], case["text"]
        else:
            assert ours.kind is ActionKind.ANSWER and not theirs["tools_called"]
        checked += 1
    assert checked >= 10
