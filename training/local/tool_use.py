"""Tool use and ARPO branching in a batch of rollouts: the figures ARPO's claim is judged by.

ARPO (Dong et al., 2025) claims GRPO's accuracy or better with about half the tool calls, by
forking episodes after uncertain tool results instead of sampling whole new ones. So beside
success, a run records per RL step (``metrics.jsonl``, ``step_groups``) and per held-out
evaluation (``heldout``):

- ``tool_calls_per_trajectory``: tool calls in a trajectory's steps, mean over trajectories. A fork
  counts the calls of the prefix it shares with its parent: they are in its context.
- ``tool_calls_sampled_per_trajectory``: the same without a fork's shared prefix, i.e. the calls the
  policy made in this batch per trajectory (ARPO's rollout cost; equal to the above without forks).
- ``tool_calls_per_solved``: tool calls of the successful trajectories, mean over them (absent when
  none succeeded): what a solved task cost.
- ``solved``: successful trajectories.

and, when the batch branched under ARPO (some trajectory carries branch decisions):

- ``arpo_decisions``: branch decisions drawn (one per source episode and tool result, while its
  group had budget left), ``arpo_branch_rate``: the share of them that forked at least once, and
  ``arpo_fork_share``: the share of the batch's trajectories that are forks.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolgym.core.trajectory import Step, Trajectory

SUCCESS_REWARD = 1.0 - 1e-9
"""An episode succeeded when its reward reaches 1 (the full task reward)."""


def shared_with_parent(traj: Trajectory, step: Step) -> bool:
    """Whether ``step`` of a fork is one it copied from its parent: its model call ended inside the
    first ``branch_point`` tokens of sequence 0 (the fork's own first call starts right there)."""
    if traj.parent_id is None or traj.branch_point is None or step.llm is None:
        return False
    return step.llm.sequence == 0 and step.llm.prompt_len + step.llm.completion_tokens <= traj.branch_point


def tool_calls(traj: Trajectory, *, sampled_only: bool = False) -> int:
    """Tool calls in ``traj``'s steps; ``sampled_only``: not counting a fork's shared prefix."""
    return sum(len(s.tool_calls) for s in traj.steps if not (sampled_only and shared_with_parent(traj, s)))


def solved(traj: Trajectory) -> bool:
    return traj.status.value != "error" and traj.reward >= SUCCESS_REWARD


def tool_calls_per_trajectory(trajectories: Sequence[Trajectory]) -> float:
    """Mean number of tool calls per trajectory (a fork's shared prefix included)."""
    if not trajectories:
        return 0.0
    return sum(tool_calls(t) for t in trajectories) / len(trajectories)


def tool_use_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The figures of the module docstring for ``trajectories`` (empty when there are none)."""
    n = len(trajectories)
    if n == 0:
        return {}
    wins = [t for t in trajectories if solved(t)]
    out = {
        "tool_calls_per_trajectory": tool_calls_per_trajectory(trajectories),
        "tool_calls_sampled_per_trajectory": sum(tool_calls(t, sampled_only=True) for t in trajectories) / n,
        "solved": float(len(wins)),
    }
    if wins:
        out["tool_calls_per_solved"] = sum(tool_calls(t) for t in wins) / len(wins)
    decisions = [
        d
        for t in trajectories
        for d in t.metadata.get("arpo_branch_decisions") or ()
        if len(d) >= 4 and d[3]  # [turn, ΔH, forks made, budget left]: drawn with budget left
    ]
    if decisions or any(t.parent_id is not None for t in trajectories):
        out["arpo_decisions"] = float(len(decisions))
        out["arpo_branch_rate"] = sum(1 for d in decisions if d[2] > 0) / len(decisions) if decisions else 0.0
        out["arpo_fork_share"] = sum(t.parent_id is not None for t in trajectories) / n
    return out
