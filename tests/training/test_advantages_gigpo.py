"""GiGPO on hand-computed step tables: both modes, discounting, penalty, singleton groups, similarity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolgym.core.errors import ConfigError
from toolgym.training.advantages import discounted_returns, gigpo_advantages, step_groups

S = 1 / math.sqrt(2)  # (x - mean) / std for any two distinct values


def two_trajectories(**kw: object) -> tuple:
    """τ0: anchors s0 s1 s2, rewards 0 0 1 (R = 1); τ1: anchors s0 s3 s1, rewards 0 0 0 (R = 0).

    With γ = 0.5 the step returns are τ0: 0.25 0.5 1, τ1: 0 0 0. Step groups: s0 = {τ0 t0, τ1 t0},
    s1 = {τ0 t1, τ1 t2}; s2 and s3 are singletons.
    """
    args = dict(
        episode_index=[0, 0, 0, 1, 1, 1],
        group_ids=["g"] * 6,
        step_index=[0, 1, 2, 0, 1, 2],
        step_rewards=[0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        anchors=["s0", "s1", "s2", "s0", "s3", "s1"],
        valid=None,
        episode_rewards=[1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
    )
    args.update(kw)
    return args  # type: ignore[return-value]


def test_mean_norm_hand_computed() -> None:
    adv = gigpo_advantages(**two_trajectories(), gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(adv.episode, [0.5, 0.5, 0.5, -0.5, -0.5, -0.5])
    # s0: 0.25 vs 0 (mean 0.125); s1: 0.5 vs 0 (mean 0.25); s2, s3 singletons → 0
    np.testing.assert_allclose(adv.step, [0.125, 0.25, 0.0, -0.125, 0.0, -0.25])
    np.testing.assert_allclose(adv.combined, [0.625, 0.75, 0.5, -0.625, -0.5, -0.75])


def test_mean_std_norm_hand_computed() -> None:
    adv = gigpo_advantages(**two_trajectories(), gamma=0.5, mode="mean_std_norm", eps=0.0)
    np.testing.assert_allclose(adv.episode, [S, S, S, -S, -S, -S])
    np.testing.assert_allclose(adv.step, [S, S, 0.0, -S, 0.0, -S])
    np.testing.assert_allclose(adv.combined, adv.episode + adv.step)


def test_omega_weights_the_step_term() -> None:
    adv = gigpo_advantages(**two_trajectories(), gamma=0.5, mode="mean_norm", omega=2.0)
    np.testing.assert_allclose(adv.combined, adv.episode + 2.0 * adv.step)
    episode, step, combined = adv  # unpacks as a triple
    assert episode is adv.episode and step is adv.step and combined is adv.combined


def test_defaults_follow_verl_agent() -> None:
    # γ = 0.95, ω = 1, mean_std_norm, penalty 0.1 (no invalid steps here)
    adv = gigpo_advantages(**two_trajectories())
    returns_s1 = np.array([0.95, 0.0])  # τ0 t1: 0.95 · 1; τ1 t2: 0
    assert adv.step[1] == pytest.approx(
        (returns_s1[0] - returns_s1.mean()) / (np.std(returns_s1, ddof=1) + 1e-6)
    )
    np.testing.assert_allclose(adv.combined, adv.episode + adv.step)


def test_discounting() -> None:
    ep, st, r = [0, 0, 0], [0, 1, 2], [0.0, 0.0, 1.0]
    np.testing.assert_allclose(discounted_returns(ep, st, r), [0.9025, 0.95, 1.0])
    np.testing.assert_allclose(discounted_returns(ep, st, r, gamma=1.0), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(discounted_returns(ep, st, r, gamma=0.0), [0.0, 0.0, 1.0])
    # rewards at every step; rows out of order; two episodes interleaved
    np.testing.assert_allclose(
        discounted_returns(["b", "a", "b", "a"], [1, 1, 0, 0], [2.0, 3.0, 1.0, 5.0], gamma=0.5),
        [2.0, 3.0, 2.0, 6.5],
    )


def test_long_episode_matches_backward_recursion() -> None:
    rng = np.random.default_rng(3)
    n = 1537  # not a power of two: exercises the partial last pass of the scan
    r = rng.normal(size=n)
    expected = np.empty(n)
    acc = 0.0
    for t in range(n - 1, -1, -1):
        acc = r[t] + 0.99 * acc
        expected[t] = acc
    np.testing.assert_allclose(
        discounted_returns(np.zeros(n, int), np.arange(n), r, gamma=0.99), expected, rtol=1e-9, atol=1e-9
    )


def test_invalid_penalty_on_reward_and_on_return() -> None:
    valid = [True, False, True, True, True, True]
    # on the reward: τ0 rewards 0, −0.1, 1 → returns 0.2, 0.4, 1 (γ = 0.5)
    adv = gigpo_advantages(**two_trajectories(valid=valid), gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(adv.step, [0.1, 0.2, 0.0, -0.1, 0.0, -0.2])
    # on the return (verl-agent): τ0 returns 0.25, 0.4, 1
    adv = gigpo_advantages(**two_trajectories(valid=valid), gamma=0.5, mode="mean_norm", penalty_on="return")
    np.testing.assert_allclose(adv.step, [0.125, 0.2, 0.0, -0.125, 0.0, -0.2])
    # the episode advantage is the task outcome, untouched by the penalty
    np.testing.assert_allclose(adv.episode, [0.5, 0.5, 0.5, -0.5, -0.5, -0.5])
    # penalty 0 disables it
    adv = gigpo_advantages(**two_trajectories(valid=valid), gamma=0.5, mode="mean_norm", invalid_penalty=0.0)
    np.testing.assert_allclose(adv.step, [0.125, 0.25, 0.0, -0.125, 0.0, -0.25])


def test_penalised_step_loses_to_its_valid_twin() -> None:
    # Same state, same reward, one action invalid: the default penalty (0.1) alone separates them.
    adv = gigpo_advantages([0, 1], ["g", "g"], [0, 0], [0.0, 0.0], ["s", "s"], [True, False], [0.0, 0.0])
    assert adv.step[0] > 0 > adv.step[1]
    assert adv.episode.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_one_trajectory_gets_zero_everywhere(mode: str) -> None:
    # One trajectory: its episode group and its (distinct-anchor) step groups are singletons.
    adv = gigpo_advantages(
        [0, 0, 0], ["g"] * 3, [0, 1, 2], [0.0, 0.5, 1.0], ["a", "b", "c"], None, [1.5] * 3, mode=mode
    )
    assert adv.combined.tolist() == [0.0, 0.0, 0.0]


def test_one_trajectory_revisiting_a_state_compares_its_visits() -> None:
    # A step group can hold two visits of one trajectory: returns 0.25 and 1 at state "a" (γ = 0.5).
    adv = gigpo_advantages(
        [0, 0, 0],
        ["g"] * 3,
        [0, 1, 2],
        [0.0, 0.0, 1.0],
        ["a", "b", "a"],
        None,
        [1.0] * 3,
        gamma=0.5,
        mode="mean_norm",
    )
    np.testing.assert_allclose(adv.step, [-0.375, 0.0, 0.375])
    assert adv.episode.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_equal_rewards_give_zero(mode: str) -> None:
    # Two identical trajectories: every group has equal values.
    adv = gigpo_advantages(
        [0, 0, 1, 1],
        ["g"] * 4,
        [0, 1, 0, 1],
        [0.1, 0.2, 0.1, 0.2],
        ["a", "b", "a", "b"],
        None,
        [0.3] * 4,
        mode=mode,
    )
    assert adv.combined.tolist() == [0.0] * 4


def test_all_steps_distinct_reduces_to_episode_level() -> None:
    adv = gigpo_advantages(
        **two_trajectories(anchors=["a", "b", "c", "d", "e", "f"]), gamma=0.5, mode="mean_norm"
    )
    assert adv.step.tolist() == [0.0] * 6
    np.testing.assert_allclose(adv.combined, adv.episode)


def test_all_steps_identical_form_one_group() -> None:
    # returns τ0: 0.25 0.5 1, τ1: 0 0 0 → mean 0.29166…
    adv = gigpo_advantages(**two_trajectories(anchors=["x"] * 6), gamma=0.5, mode="mean_norm")
    returns = np.array([0.25, 0.5, 1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(adv.step, returns - returns.mean())


def test_empty_anchor_is_never_grouped() -> None:
    adv = gigpo_advantages(
        **two_trajectories(anchors=["", "s1", "s2", "", "s3", "s1"]), gamma=0.5, mode="mean_norm"
    )
    assert adv.step[0] == adv.step[3] == 0.0
    assert adv.step[1] == pytest.approx(0.25)
    codes, n = step_groups(["g"] * 3, [None, None, "x"])
    assert n == 3 and len(set(codes.tolist())) == 3


def test_step_groups_stay_inside_episode_groups() -> None:
    codes, n = step_groups(["g1", "g1", "g2", "g2"], ["s", "s", "s", "s"])
    assert n == 2 and codes[0] == codes[1] != codes[2] == codes[3]
    codes, n = step_groups([1, 1, 1], [10, 11, 10])  # integer anchors
    assert n == 2 and codes[0] == codes[2] != codes[1]


def test_episode_stats_trajectory_vs_step() -> None:
    # τ0 (R = 1) has three rows, τ1 (R = 0) one row.
    args = dict(
        episode_index=[0, 0, 0, 1],
        group_ids=["g"] * 4,
        step_index=[0, 1, 2, 0],
        step_rewards=[0.0, 0.0, 1.0, 0.0],
        anchors=["a", "b", "c", "d"],
        valid=None,
        episode_rewards=[1.0, 1.0, 1.0, 0.0],
    )
    per_traj = gigpo_advantages(**args, mode="mean_norm")  # type: ignore[arg-type]
    per_step = gigpo_advantages(**args, mode="mean_norm", episode_stats="step")  # type: ignore[arg-type]
    np.testing.assert_allclose(per_traj.episode, [0.5, 0.5, 0.5, -0.5])
    np.testing.assert_allclose(per_step.episode, [0.25, 0.25, 0.25, -0.75])  # row-weighted mean 0.75


def test_similarity_threshold_groups_near_identical_texts() -> None:
    anchors = ["room A, counter 1", "room A, counter 2", "kitchen, fridge open", "room A, counter 1"]
    groups = ["g", "g", "g", "h"]
    exact, n_exact = step_groups(groups, anchors)
    assert n_exact == 4 and exact[0] != exact[3]
    similar, n_similar = step_groups(groups, anchors, similarity_threshold=0.9)  # ratio 32/34 ≈ 0.94
    assert n_similar == 3
    assert similar[0] == similar[1] != similar[2]
    assert similar[3] not in (similar[0], similar[2])  # other episode group
    strict, n_strict = step_groups(groups, anchors, similarity_threshold=0.99)
    assert n_strict == 4 and strict[0] != strict[1]
    adv = gigpo_advantages(
        [0, 1, 2, 3],
        groups,
        [0] * 4,
        [1.0, 0.0, 0.0, 0.0],
        anchors,
        None,
        [1.0, 0.0, 0.0, 0.0],
        mode="mean_norm",
        similarity_threshold=0.9,
    )
    np.testing.assert_allclose(adv.step, [0.5, -0.5, 0.0, 0.0])


def test_similarity_grouping_does_not_depend_on_row_order() -> None:
    anchors = ["abcdefghij", "abcdefghiX", "abcdefgXYZ", "zzzzzzzzzz", "abcdefghij"]
    codes, _ = step_groups(["g"] * 5, anchors, similarity_threshold=0.85)
    perm = [4, 2, 0, 3, 1]
    codes_perm, _ = step_groups(["g"] * 5, [anchors[i] for i in perm], similarity_threshold=0.85)
    same = codes[:, None] == codes[None, :]
    same_perm = codes_perm[:, None] == codes_perm[None, :]
    np.testing.assert_array_equal(same[np.ix_(perm, perm)], same_perm)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(mode="zscore"), "unknown normalisation mode"),
        (dict(invalid_penalty=-0.1), "invalid_penalty must be"),
        (dict(penalty_on="episode"), "penalty_on"),
        (dict(episode_stats="token"), "episode_stats"),
        (dict(gamma=1.5), "gamma must be in"),
        (dict(similarity_threshold=0.0), "similarity_threshold must be in"),
        (dict(similarity_threshold=1.2), "similarity_threshold must be in"),
    ],
)
def test_bad_options_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        gigpo_advantages(**two_trajectories(), **kwargs)


def test_inconsistent_tables_are_refused() -> None:
    with pytest.raises(ConfigError, match="same step_index"):
        gigpo_advantages(**two_trajectories(step_index=[0, 1, 1, 0, 1, 2]))
    with pytest.raises(ConfigError, match="episode_rewards differs"):
        gigpo_advantages(**two_trajectories(episode_rewards=[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]))
    with pytest.raises(ConfigError, match="group_ids differs"):
        gigpo_advantages(**two_trajectories(group_ids=["g", "g", "h", "g", "g", "g"]))
    with pytest.raises(ConfigError, match="anchors has 2 rows"):
        gigpo_advantages(**two_trajectories(anchors=["a", "b"]))
    with pytest.raises(ConfigError, match="observation strings"):
        gigpo_advantages(**two_trajectories(anchors=[1, 2, 3, 1, 2, 3]), similarity_threshold=0.9)


def test_empty_table() -> None:
    adv = gigpo_advantages([], [], [], [], [], None, [])
    assert adv.combined.shape == (0,)


def test_tuple_anchors() -> None:
    codes, n = step_groups(["g"] * 3, [(1, 2), (1, 2), (2, 1)])
    assert n == 2 and codes[0] == codes[1] != codes[2]
