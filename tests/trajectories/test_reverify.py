"""``toolgym reverify``: unchanged data re-scores the same; a tampered stored reward, a changed
action and black-box tool calls are handled and reported."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.trajectories.helpers import dataset_registry
from toolgym.cli import app
from toolgym.collect.run import CollectOptions, collect
from toolgym.trajectories.reverify import reverify
from toolgym.trajectories.store import iter_trajectories


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("adder")
    opts = CollectOptions(
        env="adder", out=out, model="scripted", episodes=4, group_size=2, sandbox_backend="none"
    )
    asyncio.run(collect(opts, registry=dataset_registry()))
    return out


async def test_unchanged_data_reports_no_change(dataset: Path) -> None:
    report = await reverify(iter_trajectories(dataset), dataset_registry(), concurrency=3)
    assert (report.checked, report.changed, report.replay_errors, report.unchanged) == (8, 0, 0, 8)
    assert report.observation_mismatches == 0 and report.parse_mismatches == 0
    assert report.stored_reward_sum == report.new_reward_sum == 8.0
    assert report.by_env == {"adder": {"checked": 8, "changed": 0, "replay_errors": 0}}


def _rewrite(src: Path, dst: Path, edit: dict[int, object]) -> list[str]:
    """Copy the dataset, applying ``edit[line number](record)`` to some lines; returns the ids edited."""
    dst.mkdir()
    lines = (src / "trajectories.jsonl").read_text().splitlines()
    edited = []
    for i, fn in edit.items():
        record = json.loads(lines[i])
        fn(record)  # type: ignore[operator]
        lines[i] = json.dumps(record)
        edited.append(record["trajectory_id"])
    (dst / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    (dst / "manifest.json").write_text((src / "manifest.json").read_text())
    return edited


def _tamper_reward(record: dict) -> None:
    record["reward"] = 0.5
    record["steps"][-1]["step_reward"] = 0.5


def _wrong_answer(record: dict) -> None:
    record["steps"][0]["action"] = "I think it is 7."


def _as_chat_api_call(record: dict) -> None:  # a chat API returns calls as structure, not text
    record["steps"][0]["action"] = ""
    record["token_faithful"], record["segments"] = False, []


def test_tampered_rewards_and_actions_are_reported(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad"
    tampered, wrong, chat = _rewrite(
        dataset, bad, {1: _tamper_reward, 4: _wrong_answer, 6: _as_chat_api_call}
    )
    monkeypatch.setattr("toolgym.core.registry._default", dataset_registry())
    changes = tmp_path / "changes.jsonl"
    res = CliRunner().invoke(
        app, ["reverify", str(bad), "--sandbox-backend", "none", "--changes", str(changes)]
    )
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert "re-scored 8 trajectories: 6 unchanged, 1 changed, 1 replay errors" in text
    assert f"Δ {tampered} reward 0.5 → 1 (step 1: 0.5 → 1)" in text
    found = {c["trajectory_id"]: c for c in map(json.loads, changes.read_text().splitlines())}
    assert (
        set(found) == {tampered, wrong} and chat not in found
    )  # structured calls replay from the stored records
    assert (
        found[tampered]["step_changes"] == [{"index": 1, "stored": 0.5, "new": 1.0}]
        and found[tampered]["error"] is None
    )
    assert "ends the episode at step 0" in found[wrong]["error"]
    clean = CliRunner().invoke(app, ["reverify", str(dataset), "--sandbox-backend", "none"])
    assert clean.exit_code == 0 and "8 unchanged, 0 changed" in " ".join(clean.output.split())
