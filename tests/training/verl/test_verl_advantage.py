"""verl's advantage path (``compute_advantage_for_multi_trajectories`` → ``compute_advantage`` →
the registered ``toolgym_*`` estimator) on DataProtos built from trajectories, compared with
toolgym's own estimators on the same trajectories."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.required import need_module

need_module("verl")
need_module("transfer_queue")

import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl_helpers import synthetic_trajectory

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory
from toolgym.training.advantages import compute_token_advantages
from toolgym.training.verl.agent_loop import agent_loop_outputs
from toolgym.training.verl.estimators import advantage_context, metas_from_extra_fields
from toolgym.training.verl.rows import META_KEY, RowMeta

ALGO = OmegaConf.create(
    {"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False}
)


def group_batch() -> list[Trajectory]:
    """Two task groups of four; anchors recur within and across trajectories, some steps invalid."""
    out = []
    for g, offset in (("task-a", 0.0), ("task-b", 0.3)):
        specs = [
            [("s0", 0.0, True), ("s1", 1.0 + offset, True), ("s2", 0.0, True)],
            [("s0", 0.0, False), ("s0", 0.0, True), ("s1", 0.5, True)],
            [("s0", 0.2, True), ("s3", 0.0, False)],
            [("s0", 0.0, True), ("s1", 0.0, True), ("s1", 2.0, True), ("s2", offset, True)],
        ]
        out += [synthetic_trajectory(f"{g}-{i}", g, s, seed=i) for i, s in enumerate(specs)]
    return out


def verl_batch(
    trajectories: list[Trajectory], layout: str
) -> tuple[DataProto, list[str], list[dict[str, Any]]]:
    """The trajectories as verl's V1 trainer sees them: right-padded rows, uid = group, keys uid_session_index."""
    rows, keys, metas = [], [], []
    for session, traj in enumerate(trajectories):
        for k, out in enumerate(agent_loop_outputs(traj, layout)):  # type: ignore[arg-type]
            rows.append(out.as_dict())
            keys.append(f"{traj.group_id.replace('-', '')}_{session}_{k}")
            metas.append({**out.extra_fields[META_KEY], "response_len": len(out.response_ids)})
    width = max(r["responses"].numel() for r in rows)

    def pad(name: str, dtype: torch.dtype) -> torch.Tensor:
        out = torch.zeros(len(rows), width, dtype=dtype)
        for i, r in enumerate(rows):
            out[i, : r[name].numel()] = r[name]
        return out

    batch = TensorDict(
        {
            "response_mask": pad("response_mask", torch.int64),
            "token_level_rewards": pad("rm_scores", torch.float32),
        },
        batch_size=[len(rows)],
    )
    uid = np.array([t.group_id for t in trajectories for _ in agent_loop_outputs(t, layout)], dtype=object)  # type: ignore[arg-type]
    return DataProto(batch=batch, non_tensor_batch={"uid": uid}), keys, metas


def verl_advantages(
    data: DataProto, keys: list[str], metas: list[Any], estimator: str, options: dict[str, Any]
) -> torch.Tensor:
    parsed = [
        None if m is None else RowMeta.from_dict({k: v for k, v in m.items() if k != "response_len"})
        for m in metas
    ]
    with advantage_context(parsed, options):
        out = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator=estimator, config=ALGO
        )
    return out.batch["advantages"]


def assert_matches(
    adv: torch.Tensor, metas: list[Any], trajectories: list[Trajectory], expected: list[list[np.ndarray]]
) -> int:
    """Each row equals toolgym's token advantages at its place in its sequence; returns the rows compared."""
    index = {t.trajectory_id: i for i, t in enumerate(trajectories)}
    for r, meta in enumerate(metas):
        want = expected[index[meta["trajectory_id"]]][meta["sequence"]][
            meta["offset"] : meta["offset"] + meta["response_len"]
        ]
        np.testing.assert_allclose(adv[r, : want.size].numpy(), want, atol=1e-6)
        assert not adv[r, want.size :].any()
    return len(metas)


@pytest.mark.parametrize("layout", ["trajectory", "step"])
@pytest.mark.parametrize(
    "options",
    [{}, {"gamma": 0.9, "omega": 0.5, "mode": "mean_norm", "invalid_penalty": 0.2, "episode_stats": "step"}],
)
def test_gigpo_through_verl_equals_toolgym(layout: str, options: dict[str, Any]) -> None:
    trajs = group_batch()
    data, keys, metas = verl_batch(trajs, layout)
    adv = verl_advantages(data, keys, metas, "toolgym_gigpo", options)
    assert assert_matches(adv, metas, trajs, compute_token_advantages(trajs, "gigpo", **options)) == (
        8 if layout == "trajectory" else 24
    )
    assert adv.abs().sum() > 0


def test_gigpo_on_history_window_trajectories() -> None:
    trajs = [
        synthetic_trajectory(
            f"w{i}",
            "g",
            [("a", 0.0, True), ("b", float(i), True), ("a", 1.0 - i, i != 2)],
            window=True,
            seed=i,
        )
        for i in range(4)
    ]
    data, keys, metas = verl_batch(trajs, "trajectory")
    adv = verl_advantages(data, keys, metas, "toolgym_gigpo", {})
    assert assert_matches(adv, metas, trajs, compute_token_advantages(trajs, "gigpo")) == 12


def test_grpo_counts_each_trajectory_once() -> None:
    trajs = group_batch()
    data, keys, metas = verl_batch(trajs, "step")  # several rows per trajectory
    adv = verl_advantages(data, keys, metas, "toolgym_grpo", {})
    assert_matches(adv, metas, trajs, compute_token_advantages(trajs, "grpo"))


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_arpo_branches_through_verl_equal_toolgym(mode: str) -> None:
    root = synthetic_trajectory("root", "g", [("x", 0.0, True), ("y", 1.0, True), ("z", 0.0, True)], seed=1)
    b1 = synthetic_trajectory(
        "b1", "g", [("x", 0.0, True), ("y", 0.0, True), ("w", 0.0, True)], parent=root, share_steps=1, seed=2
    )
    b2 = synthetic_trajectory(
        "b2", "g", [("x", 0.0, True), ("y", 1.0, True), ("v", 2.0, True)], parent=b1, share_steps=2, seed=3
    )
    orphan_parent = synthetic_trajectory("gone", "g", [("x", 0.0, True), ("q", 0.0, True)], seed=4)
    orphan = synthetic_trajectory(
        "o1", "g", [("x", 0.0, True), ("q", 3.0, True)], parent=orphan_parent, share_steps=1, seed=5
    )
    lone = synthetic_trajectory("lone", "g", [("x", 0.5, True)], seed=6)
    trajs = [root, b1, b2, orphan, lone]  # "gone" was dropped from the batch: it links nothing to anything
    data, keys, metas = verl_batch(trajs, "trajectory")
    adv = verl_advantages(data, keys, metas, "toolgym_arpo", {"mode": mode})
    expected = compute_token_advantages(trajs, "arpo", mode=mode)
    assert_matches(adv, metas, trajs, expected)
    shared = slice(
        0, metas[1]["steps"][0]["end"]
    )  # b1's first step: root's tokens, shared by root, b1 and b2
    if mode == "hard":
        assert torch.allclose(adv[0, shared], adv[1, shared]) and torch.allclose(
            adv[1, shared], adv[2, shared]
        )
    else:
        assert not torch.allclose(adv[0, shared], adv[1, shared])


def arpo_tree() -> dict[str, Trajectory]:
    """R ─ A ─ D and R ─ A ─ E (A forked from R after step 1, D and E from A after step 2), and
    R ─ C after step 1; each fork carries the lineage the engine records (``arpo_lineage``)."""
    root = synthetic_trajectory("R", "g", [("x", 0.0, True), ("y", 1.0, True), ("z", 0.0, True)], seed=1)
    a = synthetic_trajectory(
        "A", "g", [("x", 0.0, True), ("y", 0.0, True), ("w", 0.0, True)], parent=root, share_steps=1, seed=2
    )
    c = synthetic_trajectory(
        "C", "g", [("x", 0.0, True), ("u", 0.5, True)], parent=root, share_steps=1, seed=3
    )
    d = synthetic_trajectory(
        "D", "g", [("x", 0.0, True), ("y", 0.0, True), ("v", 2.0, True)], parent=a, share_steps=2, seed=4
    )
    e = synthetic_trajectory(
        "E", "g", [("x", 0.0, True), ("y", 0.0, True), ("t", -1.0, True)], parent=a, share_steps=2, seed=5
    )
    tree = {t.trajectory_id: t for t in (root, a, c, d, e)}
    for t in tree.values():
        lineage, node = [], t
        while node.parent_id is not None:
            lineage.append([node.parent_id, node.branch_point])
            node = tree[node.parent_id]
        if lineage:
            t.metadata["arpo_lineage"] = lineage
    return tree


@pytest.mark.parametrize("absent", [(), ("A",), ("R",), ("R", "A"), ("A", "C")])
def test_arpo_hard_through_verl_places_absent_ancestors_by_lineage(absent: tuple[str, ...]) -> None:
    """verl rows carry ``arpo_lineage`` (``RowMeta.lineage``): whichever nodes of a branching tree
    are absent from the batch, the verl path gives the local estimator's hard attribution, and the
    tokens every present member shares (R's first step) get one value."""
    tree = arpo_tree()
    trajs = [t for tid, t in tree.items() if tid not in absent]
    data, keys, metas = verl_batch(trajs, "trajectory")
    assert all((m["lineage"] is None) == (m["parent_id"] is None) for m in metas)
    adv = verl_advantages(data, keys, metas, "toolgym_arpo", {"mode": "hard"})
    assert_matches(adv, metas, trajs, compute_token_advantages(trajs, "arpo", mode="hard"))
    first = tree["R"].steps[0].llm
    assert first is not None
    step0 = slice(0, first.completion_tokens)  # sampled by R, shared by all five
    for r in range(1, len(metas)):
        assert torch.allclose(adv[0, step0], adv[r, step0], atol=1e-6)


def test_padding_rows_take_no_part() -> None:
    """verl pads a batch with copies of its first row (same extra_fields, another uid): they must
    get 0 and leave the real rows' numbers unchanged."""
    trajs = group_batch()
    data, keys, metas = verl_batch(trajs, "step")
    clean = verl_advantages(data, keys, metas, "toolgym_gigpo", {})
    padded = DataProto.concat([data, data.select_idxs([0, 0])])
    padded.non_tensor_batch["uid"][-2:] = "padXYZ"
    plain = [{k: v for k, v in m.items() if k != "response_len"} for m in metas]
    parsed = metas_from_extra_fields(
        [{META_KEY: m} for m in plain] + [{META_KEY: plain[0]}] * 2, [False] * len(metas) + [True, True]
    )
    with advantage_context(parsed):
        out = compute_advantage_for_multi_trajectories(
            padded, batch_keys=[*keys, "padXYZ_0_0", "padXYZ_1_0"], adv_estimator="toolgym_gigpo", config=ALGO
        )
    assert torch.equal(out.batch["advantages"][: len(metas)], clean)
    assert not out.batch["advantages"][len(metas) :].any()


def test_estimators_explain_what_they_need() -> None:
    trajs = group_batch()[:2]
    data, keys, metas = verl_batch(trajs, "trajectory")
    with pytest.raises(ConfigError, match=r"trainer\.v1\.trainer_mode=toolgym"):
        compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator="toolgym_gigpo", config=ALGO
        )
    with pytest.raises(ConfigError, match="has no toolgym metadata"):
        metas_from_extra_fields([{"turn_scores": []}])
    with pytest.raises(ConfigError, match="takes no option 'omega'"):
        verl_advantages(data, keys, metas, "toolgym_grpo", {"omega": 1.0})


def test_episode_filters_through_verl() -> None:
    """A masked trajectory keeps its place in the group's baseline with zero advantages; a dropped
    one (or a group of equal rewards) takes no part; the counts reach the context."""
    from toolgym.training.filters import EpisodeFilters

    trajs = group_batch()
    trajs[1] = trajs[1].model_copy(
        update={
            "terminated": False,
            "truncated": True,
            "truncation_reason": "context budget (max_tokens_per_trajectory) used up",
        }
    )
    trajs[2] = trajs[2].model_copy(
        update={"terminated": False, "truncated": True, "truncation_reason": "turn limit (30) reached"}
    )
    data, keys, metas = verl_batch(trajs, "trajectory")
    assert [m["outcome"] for m in metas[:3]] == ["ok", "overlong", "turn_limit"]
    parsed = [RowMeta.from_dict({k: v for k, v in m.items() if k != "response_len"}) for m in metas]
    filters = EpisodeFilters(overlong="mask", turn_limit="drop")
    with advantage_context(parsed, {"std_norm": False}, filters) as ctx:
        out = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator="toolgym_grpo", config=ALGO
        )
    adv = out.batch["advantages"]
    assert not adv[1].any() and not adv[2].any()
    # the baseline of task-a is the mean over trajectories 0, 1 and 3 (2 was dropped, 1 masked but counted)
    rewards = [t.reward for t in trajs]
    baseline = (rewards[0] + rewards[1] + rewards[3]) / 3
    first = adv[0][adv[0] != 0][0].item()
    assert first == pytest.approx(rewards[0] - baseline, abs=1e-5)
    assert (
        ctx.counts["filter/overlong"] == 1
        and ctx.counts["filter/masked"] == 1
        and ctx.counts["filter/dropped"] == 1
    )

    same = [t.model_copy(update={"reward": 1.0}) if t.group_id == "task-b" else t for t in group_batch()]
    data, keys, metas = verl_batch(same, "trajectory")
    parsed = [RowMeta.from_dict({k: v for k, v in m.items() if k != "response_len"}) for m in metas]
    with advantage_context(parsed, {}, EpisodeFilters(equal_reward_groups="drop")) as ctx:
        out = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator="toolgym_gigpo", config=ALGO
        )
    assert ctx.counts["filter/equal_reward_groups"] == 1
    assert not out.batch["advantages"][4:].any() and out.batch["advantages"][:4].any()
