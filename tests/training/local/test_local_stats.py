"""Step-group statistics (hand-computed), the progress line, and the stop-at-action wrapper."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.core.trajectory import Step, Trajectory
from toolgym.core.types import GenerationRequest, GenerationResult, SamplingParams
from toolgym.training.local.loop import EvalResult, StepLog
from toolgym.training.local.progress import format_eta, progress_line, step_record
from toolgym.training.local.stats import step_group_stats
from toolgym.training.local.stops import StopAtBackend


def _traj(group: str, k: int, anchors: list[str], reward: float) -> Trajectory:
    steps = [Step(index=i, action="a", anchor=a) for i, a in enumerate(anchors)]
    return Trajectory(trajectory_id=f"{group}-{k}", group_id=group, task="t", steps=steps, reward=reward)


def test_step_group_statistics_hand_computed() -> None:
    # group g: anchors A,B (won) and A,C,C (lost); group h: A (won) — h's A is not g's A
    trajs = [_traj("g", 0, ["A", "B"], 1.0), _traj("g", 1, ["A", "C", "C"], 0.0), _traj("h", 0, ["A"], 1.0)]
    s = step_group_stats(trajs)
    # step groups: (g,A) x2, (g,B) x1, (g,C) x2, (h,A) x1 → 4 groups over 6 steps
    assert s["steps"] == 6 and s["step_groups"] == 4 and s["mean_group_size"] == pytest.approx(1.5)
    assert s["repeat_rate"] == pytest.approx(4 / 6)
    assert s["size_1"] == pytest.approx(0.5) and s["size_2_4"] == pytest.approx(0.5) and s["size_10p"] == 0.0
    # of the two repeated groups, (g,A) mixes a win and a loss; (g,C) does not
    assert s["mixed_outcome"] == pytest.approx(0.5)
    assert step_group_stats([]) == {}


def test_progress_line_carries_every_figure() -> None:
    log = StepLog(
        step=2,
        mean_reward=0.25,
        success=0.25,
        episodes=32,
        trainable=32,
        rows=400,
        sample_s=8.0,
        update_s=4.0,
        metrics={"loss": -0.01, "approx_kl": 0.002, "kl_ref": 0.0, "entropy": 0.9},
        tokens=1600,
        eval=EvalResult(0.375, 0.375, 32, 0, 3.0),
    )
    rec = step_record(log, wall_s=15.0, kl_coef=0.0)
    line = progress_line(rec, total=10, eta_s=7 * 15.0)
    for part in (
        "step 3/10",
        "train 25%",
        "held-out 38%",
        "reward 0.250",
        "loss -0.0100",
        "KL(old) 0.0020",
        "entropy 0.900",
        "200 tok/s",
        "4.00 ep/s",
        "ETA 1m45s",
    ):
        assert part in line
    assert format_eta(3 * 3600 + 120) == "3h02m"


class _Echo:
    model = object()
    tokenizer = None

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.seen.append(request.sampling.stop)
        return GenerationResult(output_ids=[1, 2], logprobs=[-0.1, -0.2], finish_reason="stop")


def test_stop_at_backend_adds_the_action_end_and_passes_the_rest_through() -> None:
    inner = _Echo()
    wrapped = StopAtBackend(inner, ("</action>",))
    request = GenerationRequest([5, 6], SamplingParams(max_new_tokens=4, stop=("</x>",)))
    result = asyncio.run(wrapped.generate(request))
    assert inner.seen == [("</x>", "</action>")] and result.output_ids == [1, 2]
    assert wrapped.model is inner.model and request.sampling.stop == ("</x>",)
