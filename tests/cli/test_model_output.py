"""Malformed model output is the model's problem, shown to it as a tool error: never an episode error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import Runner

DEPTH = 1500  # past Python's recursion limit: json.loads raises RecursionError, not JSONDecodeError


@pytest.mark.parametrize("as_string", [False, True], ids=["object", "string"])
def test_deeply_nested_tool_call_arguments_are_a_tool_error(
    cli: Runner, tmp_path: Path, as_string: bool
) -> None:
    nested = '{"a":' * DEPTH + "1" + "}" * DEPTH
    args = json.dumps(nested) if as_string else nested
    text = f'<tool_call>{{"name": "python", "arguments": {args}}}</tool_call>'
    out = tmp_path / "run"
    done = cli(
        "collect",
        "--env",
        "math-python",
        "--model",
        "sim:0",
        "--backend-arg",
        f"text={text}",
        "--sandbox-backend",
        "none",
        "--no-progress",
        "-n",
        "1",
        "--max-turns",
        "2",
        "--max-tokens-per-turn",
        "20000",
        "--max-tokens-per-trajectory",
        "100000",
        "--out",
        out,
    )
    assert done.code == 0, done.text
    assert (out / "failures.jsonl").read_text() == ""
    traj = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert traj["status"] == "ok" and len(traj["steps"]) == 2
    for step in traj["steps"]:
        assert step["valid"] is False
        assert "nested too deeply" in step["error"]
