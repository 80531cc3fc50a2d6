"""``bench/advantage_mass.py`` on a hand-made run: GRPO puts nothing on a task group without a
success; GiGPO's invalid-action penalty does, and with the penalty off it does not either."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from toolgym.core.trajectory import LLMCall, Segment, Step, Trajectory

ROOT = Path(__file__).resolve().parents[3]


def _episode(tid: str, group: str, anchors: str, valid: str, won: bool) -> Trajectory:
    segments = [Segment(role="prompt", token_ids=[1], loss_mask=[0])]
    steps = []
    for i, (anchor, ok) in enumerate(zip(anchors, valid, strict=True)):
        segments.append(Segment(role="assistant", token_ids=[5, 6], loss_mask=[1, 1]))
        steps.append(Step(index=i, action="x", anchor=anchor, valid=ok == "1", info={"won": won},
                          llm=LLMCall(prompt_len=0, segment=len(segments) - 1, completion_tokens=2)))
    return Trajectory(trajectory_id=tid, group_id=group, task="demo", reward=1.0 if won else 0.0, segments=segments, steps=steps)


def test_the_bench_splits_advantage_mass_by_solved_groups(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"rl": {"tasks_per_step": 2, "group_size": 2}}))
    episodes = [_episode("a", "solved", "sb", "11", True), _episode("b", "solved", "sc", "11", False),
                _episode("c", "unsolved", "sd", "01", False), _episode("d", "unsolved", "se", "11", False)]
    (run / "trajectories" / "trajectories.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in episodes))
    figures = tmp_path / "mass.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "advantage_mass.py"), str(run), "--steps", "1", "--json", str(figures)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 task groups, success 25.0%, 1 groups with a success, 12.5% of steps invalid" in proc.stdout
    rows = {r["estimator"]: r for r in json.loads(figures.read_text())["1"]["rows"]}
    assert rows["GRPO"]["unsolved_share"] == 0.0 and rows["GRPO"]["mean_on_success"] > 0
    assert rows["GiGPO, penalty 0.1: A_S only"]["unsolved_share"] > 0.0  # the penalty's signal in the unsolved group
    assert rows["GiGPO, no penalty: A_E + A_S"]["unsolved_share"] == 0.0
    missing = subprocess.run([sys.executable, str(ROOT / "bench" / "advantage_mass.py"), str(run), "--steps", "2"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert missing.returncode != 0 and "has no RL step 2" in missing.stderr
