"""``toolgym reverify`` on WebShop trajectories collected before the reward took the original's semantics (commit b6f9836) reports the changed scores.

The dataset (``tests/plugins/webshop/data/pre_issue18``, see its README) was collected with the
old reward; replaying its actions on today's ``webshop`` environment must re-score the three
purchases whose scores the original's rules change, and leave the oracle's purchase alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from toolgym.cli import app

DATA = Path(__file__).resolve().parents[1] / "plugins" / "webshop" / "data" / "pre_issue18"


def test_reverify_reports_the_changed_webshop_scores(tmp_path: Path) -> None:
    stored = {
        r["trajectory_id"]: r["reward"]
        for r in map(json.loads, (DATA / "trajectories.jsonl").read_text().splitlines())
    }
    changes = tmp_path / "changes.jsonl"
    res = CliRunner().invoke(
        app, ["reverify", str(DATA), "--sandbox-backend", "none", "--changes", str(changes)]
    )
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert "re-scored 4 trajectories: 1 unchanged, 3 changed, 0 replay errors" in text
    found = {c["trajectory_id"]: c for c in map(json.loads, changes.read_text().splitlines())}
    assert {tid: (c["stored_reward"], round(c["new_reward"], 4)) for tid, c in found.items()} == {
        "389913d381c0692a": (
            0.75,
            1.0,
        ),  # 16 fl oz (pack of 1) for (8 fl oz (pack of 2)): sizes are fuzzy (87 > 85)
        "8a28d45f9d464c31": (1.0, 0.6667),  # "oak" for "white": "oak" inside "Oakhaven" no longer counts
        "9de65f9e72264fcb": (2 / 3, 1.0),  # 8 fl oz (pack of 2) for (pack of 1): fuzzy size
    }
    assert all(c["error"] is None and c["step_changes"][0]["index"] == 3 for c in found.values())
    assert [tid for tid in stored if tid not in found] == ["ff6ff30a4c5f6dd5"] and stored[
        "ff6ff30a4c5f6dd5"
    ] == 1.0
    assert "Δ 8a28d45f9d464c31 reward 1 → 0.666667 (step 3: 1 → 0.666667)" in text
