"""GraphGPO on hand-worked graphs: distances, progress inside failed trajectories, detours, loops,
groups without success, per-task graphs; the trajectory layer and tokens; a loop-based reference."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import LLMCall, Segment, Step, Trajectory
from toolgym.training.advantages import (
    ESTIMATORS,
    compute_token_advantages,
    graphgpo_advantages,
    graphgpo_trajectory_advantages,
)
from toolgym.training.advantages.reference import loop_normalize
from toolgym.training.advantages.steps import reached_goal


def table(trajectories: list[tuple[str, str, bool, float]], **kw: object) -> dict[str, object]:
    """Rows from ``(group, anchors as a string of one-letter states, success, episode reward)``."""
    cols: dict[str, list[object]] = defaultdict(list)
    for e, (group, anchors, success, reward) in enumerate(trajectories):
        for t, anchor in enumerate(anchors):
            cols["episode_index"].append(e)
            cols["group_ids"].append(group)
            cols["step_index"].append(t)
            cols["anchors"].append(anchor)
            cols["success"].append(success)
            cols["episode_rewards"].append(reward)
    args: dict[str, object] = {**cols, "valid": None}
    args.update(kw)
    return args


# τ0 succeeds a → b → goal; τ1 fails a → c → b → (dead end); τ2 fails a → c → d → (dead end).
# Distances: goal 0, b 1, a 2 (a → b), c 2 (c → b), d unreachable: d_max + 1 = 3.
# With ω = 0.5, r_goal = 1 the graph returns ω^d(s') are
#   τ0: a→b 0.5, b→goal 1;  τ1: a→c 0.25, c→b 0.5, b→dead 0.125;  τ2: a→c 0.25, c→d 0.125, d→dead 0.125.
# Steps leaving a: {0.5, 0.25, 0.25} (mean 1/3); b: {1, 0.125}; c: {0.5, 0.125}; d: alone.
THREE = [("g", "ab", True, 1.0), ("g", "acb", False, 0.0), ("g", "acd", False, 0.0)]
EASY = dict(omega=0.5, goal_reward=1.0, mode="mean_norm")


def test_distances_to_the_goal_and_unreachable_states() -> None:
    adv = graphgpo_advantages(**table(THREE), **EASY)  # type: ignore[arg-type]
    np.testing.assert_allclose(adv.distance, [2, 1, 2, 2, 1, 2, 2, 3])
    np.testing.assert_allclose(adv.next_distance, [1, 0, 2, 1, 3, 2, 3, 3])


def test_hand_worked_graph_mean_norm() -> None:
    adv = graphgpo_advantages(**table(THREE), **EASY)  # type: ignore[arg-type]
    np.testing.assert_allclose(adv.episode, [2 / 3, 2 / 3, -1 / 3, -1 / 3, -1 / 3, -1 / 3, -1 / 3, -1 / 3])
    np.testing.assert_allclose(adv.step, [1 / 6, 0.4375, -1 / 12, 0.1875, -0.4375, -1 / 12, -0.1875, 0.0])
    np.testing.assert_allclose(adv.combined, adv.episode + adv.step)


def test_progress_inside_a_failed_trajectory_gets_positive_credit() -> None:
    # τ1's c → b reaches a state one step from the goal; τ2's c → d leads nowhere.
    adv = graphgpo_advantages(**table(THREE), **EASY, episode_weight=0.0)  # type: ignore[arg-type]
    tau1_c_to_b, tau2_c_to_d = 3, 6
    assert adv.step[tau1_c_to_b] > 0 > adv.step[tau2_c_to_d]
    assert adv.combined[tau1_c_to_b] > 0  # graph credit only: the failed trajectory's good step is reinforced
    # the detour a → c (distance 2 → 2) loses to a → b (2 → 1), in both failed trajectories
    assert adv.step[0] > 0 > adv.step[2] == adv.step[5]


def test_mean_std_norm_and_weights() -> None:
    adv = graphgpo_advantages(
        **table(THREE), omega=0.5, goal_reward=1.0, eps=0.0, step_weight=2.0, episode_weight=0.5
    )  # type: ignore[arg-type]
    s = 1 / math.sqrt(2)  # (x − mean) / std for two distinct values
    np.testing.assert_allclose(adv.step[[1, 4, 3, 6]], [s, -s, s, -s])  # b and c: pairs
    a_group = np.array([0.5, 0.25, 0.25])
    np.testing.assert_allclose(adv.step[[0, 2, 5]], (a_group - a_group.mean()) / a_group.std(ddof=1))
    np.testing.assert_allclose(adv.combined, 0.5 * adv.episode + 2.0 * adv.step)


def test_defaults_follow_the_reference_recipe() -> None:
    # ω = 0.1, r_goal = 10, mean_std_norm, weights 1: returns from a are 1, 0.1, 0.1.
    adv = graphgpo_advantages(**table(THREE))  # type: ignore[arg-type]
    a_group = np.array([1.0, 0.1, 0.1])
    assert adv.step[0] == pytest.approx((1.0 - a_group.mean()) / (a_group.std(ddof=1) + 1e-6))
    np.testing.assert_allclose(adv.combined, adv.episode + adv.step)


def test_scale_conventions_agree_under_std_norm_and_differ_under_mean_norm() -> None:
    base = graphgpo_advantages(**table(THREE), omega=0.5, eps=0.0)  # type: ignore[arg-type]
    progress = graphgpo_advantages(**table(THREE), omega=0.5, eps=0.0, normalize_distance=True)  # type: ignore[arg-type]
    np.testing.assert_allclose(progress.step, base.step, atol=1e-12)
    # mean_norm: within the group of a (d = 2), the progress form is ω^(d(s') − 1) = base / ω
    plain = graphgpo_advantages(**table(THREE), **EASY)  # type: ignore[arg-type]
    prog = graphgpo_advantages(**table(THREE), **EASY, normalize_distance=True)  # type: ignore[arg-type]
    np.testing.assert_allclose(prog.step[[0, 2, 5]], plain.step[[0, 2, 5]] / 0.5)


def test_self_loop_and_cycle_are_punished() -> None:
    # τ0: a → a (a no-op) → b → goal; τ1: a → b → goal; τ2 fails: a → c → a → b → (dead end)
    trajs = [("g", "aab", True, 1.0), ("g", "ab", True, 1.0), ("g", "acab", False, 0.0)]
    adv = graphgpo_advantages(**table(trajs), **EASY, episode_weight=0.0)  # type: ignore[arg-type]
    # rows: τ0 0:a→a 1:a→b 2:b→goal | τ1 3:a→b 4:b→goal | τ2 5:a→c 6:c→a 7:a→b 8:b→dead
    np.testing.assert_allclose(adv.distance[[0, 5, 6]], [2, 2, 3])
    assert adv.step[0] < 0 and adv.step[5] < 0  # the self-loop and the step into the cycle
    assert adv.step[1] == adv.step[3] == adv.step[7] > 0
    assert adv.step[2] == adv.step[4] > 0 > adv.step[8]
    assert np.all(np.isfinite(adv.combined))


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_group_without_success_falls_back_to_the_episode_level(mode: str) -> None:
    trajs = [("g", "acb", False, 0.3), ("g", "ab", False, 0.0), ("g", "aa", False, 0.0)]
    adv = graphgpo_advantages(**table(trajs), mode=mode, eps=0.0)  # type: ignore[arg-type]
    assert np.all(adv.distance == 1.0) and np.all(adv.next_distance == 1.0)  # nothing reaches a goal
    assert adv.step.tolist() == [0.0] * len(adv.step)
    np.testing.assert_allclose(adv.combined, adv.episode)
    assert adv.episode[0] > 0 > adv.episode[3]  # partial reward still ranks the trajectories (GRPO-like)
    equal = graphgpo_advantages(
        **table([("g", "ab", False, 0.0), ("g", "ac", False, 0.0)]), mode=mode, eps=0.0
    )  # type: ignore[arg-type]
    assert equal.combined.tolist() == [0.0] * 4


def test_each_task_has_its_own_graph() -> None:
    # Same anchor names in two groups: g1 succeeds through b, g2 never succeeds. If the groups
    # shared nodes, g2's b would be one step from g1's goal.
    trajs = [
        ("g1", "ab", True, 1.0),
        ("g1", "ac", False, 0.0),
        ("g2", "ab", False, 0.0),
        ("g2", "ac", False, 0.0),
    ]
    adv = graphgpo_advantages(**table(trajs), **EASY)  # type: ignore[arg-type]
    np.testing.assert_allclose(adv.next_distance[:4], [1, 0, 3, 3])  # c: no path, d_max + 1
    np.testing.assert_allclose(adv.next_distance[4:], [1, 1, 1, 1])
    assert adv.step[0] > 0 > adv.step[2]
    assert adv.step[4:].tolist() == [0.0] * 4
    # and the result for g1 does not depend on g2 being in the batch
    alone = graphgpo_advantages(**table(trajs[:2]), **EASY)  # type: ignore[arg-type]
    np.testing.assert_allclose(alone.combined, adv.combined[:4])


def test_empty_anchors_are_never_merged() -> None:
    # τ0: a → "" → goal; τ1: a → "" → dead end. Merged, the two unknown states would be compared
    # (and τ1's a → "" would look as good as τ0's).
    args = table([("g", "ab", True, 1.0), ("g", "ab", False, 0.0)])
    args["anchors"] = ["a", "", "a", ""]
    adv = graphgpo_advantages(**args, **EASY)  # type: ignore[arg-type]
    np.testing.assert_allclose(adv.distance, [2, 1, 2, 3])
    assert adv.step[1] == adv.step[3] == 0.0
    assert adv.step[0] > 0 > adv.step[2]


def test_similar_anchor_texts_can_be_merged_into_one_node() -> None:
    anchors = ["room A, counter 1", "kitchen", "room A, counter 2", "hall"]
    args = dict(
        episode_index=[0, 0, 1, 1],
        group_ids=["g"] * 4,
        step_index=[0, 1, 0, 1],
        anchors=anchors,
        valid=None,
        success=[True, True, False, False],
        episode_rewards=[1.0, 1.0, 0.0, 0.0],
    )
    exact = graphgpo_advantages(**args, **EASY)  # type: ignore[arg-type]
    assert exact.step.tolist() == [0.0] * 4  # every state left once
    merged = graphgpo_advantages(**args, **EASY, similarity_threshold=0.9)  # type: ignore[arg-type]
    assert merged.step[0] > 0 > merged.step[2]  # "room A" left towards the goal vs towards a dead end


def test_invalid_penalty_is_off_by_default_and_lowers_the_step() -> None:
    trajs = [("g", "ab", True, 1.0), ("g", "ab", True, 1.0)]
    valid = [True, True, False, True]
    off = graphgpo_advantages(**table(trajs, valid=valid), **EASY)  # type: ignore[arg-type]
    assert off.combined.tolist() == [0.0] * 4
    on = graphgpo_advantages(**table(trajs, valid=valid), **EASY, invalid_penalty=0.1)  # type: ignore[arg-type]
    np.testing.assert_allclose(on.step, [0.05, 0.0, -0.05, 0.0])


def test_rows_may_come_in_any_order() -> None:
    args = table(THREE)
    perm = [7, 2, 5, 0, 3, 6, 1, 4]
    shuffled = {k: ([v[i] for i in perm] if isinstance(v, list) else v) for k, v in args.items()}
    a = graphgpo_advantages(**args)  # type: ignore[arg-type]
    b = graphgpo_advantages(**shuffled)  # type: ignore[arg-type]
    np.testing.assert_allclose(a.combined[perm], b.combined)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(mode="zscore"), "unknown normalisation mode"),
        (dict(omega=0.0), "omega"),
        (dict(omega=1.5), "omega"),
        (dict(goal_reward=0.0), "goal_reward"),
        (dict(invalid_penalty=-1.0), "invalid_penalty"),
        (dict(episode_stats="token"), "episode_stats"),
        (dict(success=[True, False, False, False, False, False, False, False]), "success differs"),
        (dict(anchors=["a"]), "anchors has 1 rows"),
    ],
)
def test_bad_input_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        graphgpo_advantages(**table(THREE, **kwargs))  # type: ignore[arg-type]


def test_empty_table() -> None:
    adv = graphgpo_advantages([], [], [], [], None, [], [])
    assert adv.combined.shape == (0,)


# -- trajectories and tokens -------------------------------------------------------------------


def seg(role: str, ids: list[int]) -> Segment:
    return Segment(role=role, token_ids=ids, loss_mask=[1 if role == "assistant" else 0] * len(ids))  # type: ignore[arg-type]


def episode(
    tid: str, anchors: str, *, won: bool | None, reward: float, group: str = "g", terminated: bool = True
) -> Trajectory:
    """prompt [1 2] then, per step, assistant [10+i 10+i] · tool [9]; ``won`` goes into the last step's info."""
    segments, steps = [seg("prompt", [1, 2])], []
    for i, anchor in enumerate(anchors):
        segments += [seg("assistant", [10 + i, 10 + i]), seg("tool", [9])]
        llm = LLMCall(prompt_len=0, segment=len(segments) - 2, completion_tokens=2)
        steps.append(Step(index=i, action=f"a{i}", anchor=anchor, llm=llm))
    if won is not None:
        steps[-1].info["won"] = won
    return Trajectory(
        trajectory_id=tid,
        group_id=group,
        task="demo",
        reward=reward,
        segments=segments,
        steps=steps,
        terminated=terminated,
    )


def test_success_comes_from_the_environment() -> None:
    assert reached_goal(episode("t", "ab", won=True, reward=1.0))
    assert not reached_goal(
        episode("t", "ab", won=False, reward=0.5)
    )  # a partial WebShop score is not a success
    assert reached_goal(
        episode("t", "ab", won=None, reward=1.0)
    )  # no `won`: terminated with a positive reward
    assert not reached_goal(episode("t", "ab", won=None, reward=1.0, terminated=False))
    assert reached_goal(episode("t", "ab", won=False, reward=0.5), success_threshold=0.5)
    assert not reached_goal(Trajectory(trajectory_id="t", group_id="g", task="demo"))


def test_trajectory_layer_matches_the_array_layer_and_tokens_follow_the_masks() -> None:
    trajs = [
        episode("t0", "ab", won=True, reward=1.0),
        episode("t1", "acb", won=False, reward=0.0),
        Trajectory(trajectory_id="empty", group_id="g", task="demo"),
        episode("t2", "acd", won=False, reward=0.0),
    ]
    per = graphgpo_trajectory_advantages(trajs, **EASY)
    assert [p.combined.size for p in per] == [2, 3, 0, 3]
    # the empty trajectory takes no part: the same numbers as the hand-worked table
    expected = graphgpo_advantages(**table(THREE), **EASY)  # type: ignore[arg-type]
    np.testing.assert_allclose(np.concatenate([p.combined for p in per]), expected.combined)
    assert graphgpo_trajectory_advantages([]) == []

    tokens = compute_token_advantages(trajs, "graphgpo", **EASY)
    assert "graphgpo" in ESTIMATORS
    for traj, p, (seq0,) in zip(trajs, per, tokens, strict=True):
        mask = np.array(traj.sequence_mask(0))
        assert seq0.dtype == np.float32 and seq0.size == len(traj.sequence_ids(0))
        assert np.all(seq0[mask == 0] == 0)
        np.testing.assert_allclose(seq0[mask == 1], np.repeat(p.combined, 2), rtol=1e-6)
    # τ1's c → b (index 1): a progress step of a failed trajectory; graph credit only makes it positive
    graph_only = compute_token_advantages(trajs, "graphgpo", **EASY, episode_weight=0.0)
    assert graph_only[1][0][5] > 0 and graph_only[1][0][2] < 0  # tokens of c → b and of a → c


def test_unclaimed_tokens_get_the_weighted_episode_advantage() -> None:
    trajs = [episode("t0", "ab", won=True, reward=1.0), episode("t1", "ab", won=False, reward=0.0)]
    trajs[0].steps[1].llm = LLMCall(
        prompt_len=0, segment=-1, completion_tokens=2
    )  # chat backend: no token data
    (seq0,) = compute_token_advantages(trajs, "graphgpo", mode="mean_norm", episode_weight=0.5)[0]
    assert seq0[6] == pytest.approx(0.5 * 0.5)  # τ0's A^E = 0.5, weighted by β^E = 0.5


def test_unknown_estimator_lists_graphgpo() -> None:
    with pytest.raises(ConfigError, match="graphgpo"):
        compute_token_advantages([episode("t", "a", won=True, reward=1.0)], "ppo")  # type: ignore[arg-type]


# -- against a plain-loop reference ------------------------------------------------------------


def naive_graphgpo(
    batch: list[tuple[str, str, bool, float]], *, omega: float, std_norm: bool, progress: bool
) -> list[float]:
    """Edges per trajectory, distances by Bellman-Ford relaxation, then the two normalisations."""
    edges = []  # (group, source, target) per row, in trajectory then step order
    for e, (group, anchors, success, _r) in enumerate(batch):
        for t, a in enumerate(anchors):
            nxt = (
                (group, anchors[t + 1])
                if t + 1 < len(anchors)
                else ((group, "GOAL") if success else ("dead", e))
            )
            edges.append(((group, a), nxt))
    dist: dict[object, float] = {node: math.inf for edge in edges for node in edge}
    for g, _a, s, _r in batch:
        if s:
            dist[(g, "GOAL")] = 0.0
    for _ in range(len(dist)):
        for src, dst in edges:
            dist[src] = min(dist[src], dist[dst] + 1)
    d_max: dict[object, float] = defaultdict(float)
    group_of = {node: (node[0] if node[0] != "dead" else batch[node[1]][0]) for node in dist}  # type: ignore[index]
    for node, d in dist.items():
        if d < math.inf:
            d_max[group_of[node]] = max(d_max[group_of[node]], d)
    final = {node: d if d < math.inf else d_max[group_of[node]] + 1 for node, d in dist.items()}
    returns = [
        omega ** (final[dst] - final[src] + 1 if progress else final[dst]) * 10.0 for src, dst in edges
    ]
    step = loop_normalize(returns, [src for src, _dst in edges], std_norm, 1e-6)
    ep = loop_normalize([r for _g, _a, _s, r in batch], [g for g, _a, _s, _r in batch], std_norm, 1e-6)
    rows_ep = [e for e, (_g, anchors, _s, _r) in enumerate(batch) for _ in anchors]
    return [ep[e] + s for e, s in zip(rows_ep, step, strict=True)]


batch_st = st.lists(
    st.tuples(
        st.sampled_from(["g1", "g2"]),
        st.text(alphabet="abcde", min_size=1, max_size=7),
        st.booleans(),
        st.sampled_from([0.0, 0.5, 1.0]),
    ),
    min_size=1,
    max_size=10,
)


@settings(deadline=None, max_examples=60)
@given(
    batch_st, st.sampled_from(["mean_norm", "mean_std_norm"]), st.sampled_from([0.1, 0.5, 1.0]), st.booleans()
)
def test_graphgpo_matches_reference(batch: list, mode: str, omega: float, progress: bool) -> None:
    adv = graphgpo_advantages(**table(batch), mode=mode, omega=omega, normalize_distance=progress)  # type: ignore[arg-type]
    expected = naive_graphgpo(batch, omega=omega, std_norm=mode == "mean_std_norm", progress=progress)
    np.testing.assert_allclose(adv.combined, expected, rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(adv.combined))
