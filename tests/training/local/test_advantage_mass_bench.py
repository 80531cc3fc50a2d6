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
        steps.append(
            Step(
                index=i,
                action="x",
                anchor=anchor,
                valid=ok == "1",
                info={"won": won},
                llm=LLMCall(prompt_len=0, segment=len(segments) - 1, completion_tokens=2),
            )
        )
    return Trajectory(
        trajectory_id=tid,
        group_id=group,
        task="demo",
        reward=1.0 if won else 0.0,
        segments=segments,
        steps=steps,
    )


def test_the_bench_splits_advantage_mass_by_solved_groups(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"rl": {"tasks_per_step": 2, "group_size": 2}}))
    episodes = [
        _episode("a", "solved", "sb", "11", True),
        _episode("b", "solved", "sc", "11", False),
        _episode("c", "unsolved", "sd", "01", False),
        _episode("d", "unsolved", "se", "11", False),
    ]
    (run / "trajectories" / "trajectories.jsonl").write_text(
        "".join(t.model_dump_json() + "\n" for t in episodes)
    )
    figures = tmp_path / "mass.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "advantage_mass.py"),
            str(run),
            "--steps",
            "1",
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 task groups, success 25.0%, 1 groups with a success, 12.5% of steps invalid" in proc.stdout
    rows = {r["estimator"]: r for r in json.loads(figures.read_text())["1"]["rows"]}
    assert rows["GRPO"]["unsolved_share"] == 0.0 and rows["GRPO"]["mean_on_success"] > 0
    assert (
        rows["GiGPO, penalty 0.1: A_S only"]["unsolved_share"] > 0.0
    )  # the penalty's signal in the unsolved group
    assert rows["GiGPO, no penalty: A_E + A_S"]["unsolved_share"] == 0.0
    # the std-normalised variant: same signs, larger advantages here (each group's spread is under 1)
    std, plain = rows["GiGPO, no penalty, std-normalised: A_E + A_S"], rows["GiGPO, no penalty: A_E + A_S"]
    assert std["unsolved_share"] == 0.0 and std["mean_abs"] > plain["mean_abs"] > 0
    missing = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "advantage_mass.py"), str(run), "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert missing.returncode != 0 and "has no RL step 2" in missing.stderr


def test_steps_are_read_by_policy_version_when_an_episode_is_missing(tmp_path: Path) -> None:
    """An episode that ended in an error goes to failures.jsonl, not trajectories.jsonl: RL step 1
    has 3 lines here, and step 2 must still be step 2's 4 episodes (sliced by lines, it took one of
    step 1's). Also: the mean advantage over all step rows, and steps per success and failure."""
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"rl": {"tasks_per_step": 2, "group_size": 2}}))
    first = [
        _episode("a", "g1", "sb", "11", True),
        _episode("b", "g1", "sc", "11", False),
        _episode("c", "g2", "sd", "11", False),
    ]
    second = [
        _episode("e", "h1", "s", "1", True),
        _episode("f", "h1", "sxyz", "1111", False),
        _episode("g", "h2", "s", "1", True),
        _episode("h", "h2", "sq", "11", True),
    ]
    lines = [t.model_copy(update={"weight_version": "0"}) for t in first] + [
        t.model_copy(update={"weight_version": "1"}) for t in second
    ]
    (run / "trajectories" / "trajectories.jsonl").write_text(
        "".join(t.model_dump_json() + "\n" for t in lines)
    )
    figures = tmp_path / "mass.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "advantage_mass.py"),
            str(run),
            "--steps",
            "2",
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        "4 episodes in 2 task groups, success 75.0%" in proc.stdout
        and "1.3 steps per success and 4.0 per failure" in proc.stdout
    )
    grpo = next(r for r in json.loads(figures.read_text())["2"]["rows"] if r["estimator"] == "GRPO")
    # group h1: the success (1 step) gets +a, the failure (4 steps) -a; group h2 is all successes (0)
    assert grpo["mean_per_row"] < 0 and grpo["mean_on_success"] > 0 > grpo["mean_on_failure"]


def test_graphgpo_rows_show_invalid_steps_credited_through_a_shared_text_node(tmp_path: Path) -> None:
    """The hub of the alfworld_graphgpo attack test, in rollouts as a run saves them: "N" is the node
    every invalid action leads to; the success passed through it, so the failed episode's invalid
    step out of t gets a positive graph advantage, its valid sibling a negative one."""
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"rl": {"tasks_per_step": 1, "group_size": 3}}))
    episodes = [
        _episode("a", "g", "sNb", "011", True),
        _episode("b", "g", "tNc", "011", False),
        _episode("c", "g", "td", "11", False),
    ]
    (run / "trajectories" / "trajectories.jsonl").write_text(
        "".join(t.model_dump_json() + "\n" for t in episodes)
    )
    figures = tmp_path / "mass.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "advantage_mass.py"),
            str(run),
            "--steps",
            "1",
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["estimator"]: r for r in json.loads(figures.read_text())["1"]["rows"]}
    graph = rows["GraphGPO: A_G only"]
    assert graph["mean_on_invalid"] > 0 > graph["mean_on_valid"]
    assert "| GraphGPO: A_G only |" in proc.stdout and "mean A, invalid steps" in proc.stdout
