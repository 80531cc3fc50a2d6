"""ARPO branching in the engine, with a backend whose entropies the test controls."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from toolgym import (
    EngineConfig,
    EnvSpec,
    RolloutEngine,
    Task,
    ToolTaskEnv,
    Trajectory,
    hookimpl,
    plan_episodes,
    tool,
)
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.registry import Registry
from toolgym.core.rollout.arpo import (
    ArpoConfig,
    BranchBudget,
    arpo_entropy,
    branch_probability,
    normalized_entropy,
    token_entropy,
    turn_entropy,
)
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.trajectories.verify import check_trajectory

CALLS = {"n": 0}


@tool
async def probe(step: int) -> str:
    """Record a call (to prove forks replay the prefix's tool calls)."""
    CALLS["n"] += 1
    return f"PROBE-RESULT {step}"


class TwoToolEnv(ToolTaskEnv):
    tools = [probe]
    tasks = [Task("t", "Call probe twice, then answer done.", "done")]


class Plugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("two-tools", TwoToolEnv)]


def _responder(prompt: str, _i: int) -> str:
    n = prompt.count("PROBE-RESULT")  # tool results seen so far
    if n < 2:
        return '<tool_call>{"name": "probe", "arguments": {"step": ' + str(n + 1) + "}}</tool_call>"
    return "done"


def _flat(prompt: str, pos: int) -> list[tuple[int, float]]:
    """Uniform over 20 alternatives after a tool result, certain otherwise."""
    if "PROBE-RESULT" in prompt:
        return [(i, math.log(1 / 20)) for i in range(20)]
    return [(0, 0.0)] + [(i, -50.0) for i in range(1, 20)]


def _run(tokenizer: Any, arpo: ArpoConfig, tasks: int = 1) -> list[Trajectory]:
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("arpo-test", Plugin())])
    cfg = EngineConfig(max_turns=6, arpo=arpo)
    out: list[Trajectory] = []
    backend = MockLLMBackend(tokenizer, _responder, top_logprobs=_flat)
    engine = RolloutEngine(
        registry=registry, policy=ModelPolicy(backend, cfg), config=cfg, on_trajectory=out.append
    )
    import asyncio

    asyncio.run(engine.run(plan_episodes("two-tools", num_tasks=tasks, group_size=arpo.initial)))
    return out


def test_mean_measure_and_probability() -> None:
    assert token_entropy([(1, 0.0)]) == 0.0
    assert token_entropy([(i, math.log(0.25)) for i in range(4)]) == pytest.approx(math.log(4))
    rows = [[(i, math.log(1 / 20)) for i in range(20)]] * 3
    assert normalized_entropy(rows, 20, 2048) == pytest.approx(math.log(20) / math.log(2048))
    assert normalized_entropy(None, 20, 2048) is None
    # without alternatives, the sampled tokens' mean -logprob estimates the entropy
    assert turn_entropy(None, [-2.0, -4.0], 20, 2048, "mean") == pytest.approx(3.0 / math.log(2048))
    assert turn_entropy(rows, [-9.0], 20, 2048, "mean") == pytest.approx(math.log(20) / math.log(2048))
    assert turn_entropy(None, None, 20, 2048) is None
    assert branch_probability(0.6, 0.1, 0.5, 0.2) == pytest.approx(0.6)
    assert branch_probability(1.0, 0.0, 0.9, 0.5) == 1.0 and branch_probability(0.0, 1.0, 0.1, 0.5) == 0.0


def _published(rows: list[list[tuple[int, float]]], k: int, vocab: int) -> float:
    """The published formula written out: flatten the top-k logprobs of the first k tokens, Σ -p log p, / log |V|."""
    flat = [lp for row in rows[:k] for _, lp in row]
    return -sum(math.exp(lp) * lp for lp in flat) / math.log(vocab)


def test_arpo_measure_is_the_published_formula_on_hand_built_rows() -> None:
    rows = [
        [(0, math.log(0.5)), (1, math.log(0.3)), (2, math.log(0.1))],  # not renormalised: sums to 0.9
        [(5, math.log(0.9)), (6, math.log(0.05))],
        [(7, 0.0)],  # a certain token adds nothing
    ]
    by_hand = -(
        0.5 * math.log(0.5)
        + 0.3 * math.log(0.3)
        + 0.1 * math.log(0.1)
        + 0.9 * math.log(0.9)
        + 0.05 * math.log(0.05)
    )
    assert arpo_entropy(rows, 20, 1000) == pytest.approx(by_hand / math.log(1000))
    assert turn_entropy(rows, [-1.0, -1.0, -1.0], 20, 1000) == pytest.approx(
        _published(rows, 20, 1000)
    )  # "arpo" is the default
    # only the first k positions count, and every alternative of each of them
    long = [[(i, math.log(0.1)) for i in range(10)] for _ in range(25)]
    assert arpo_entropy(long, 20, 32000) == pytest.approx(20 * math.log(10) / math.log(32000))
    assert arpo_entropy(long, 20, 32000) == pytest.approx(_published(long, 20, 32000))
    # a sum over positions: about k times the mean measure for flat rows
    assert arpo_entropy(long, 20, 32000) == pytest.approx(20 * normalized_entropy(long, 20, 32000))  # type: ignore[operator]
    assert arpo_entropy(None, 20, 1000) is None and arpo_entropy(rows, 20, 1) is None
    # sampled-token-only servers: the sum of the first k surprisals / log |V|
    assert turn_entropy(None, [-2.0, -4.0] + [-1.0] * 30, 20, 2048) == pytest.approx(
        (6.0 + 18.0) / math.log(2048)
    )
    with pytest.raises(ValueError, match="use 'arpo' or 'mean'"):
        turn_entropy(rows, None, 20, 1000, "sum")  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [-3.0, -1.0, -0.5, 0.0, 0.4, 1.0, 2.5])
def test_branching_rate_follows_clip_p_plus_w_delta(delta: float) -> None:
    """Over many seeded draws the fraction of decisions that fork is clip(p + w·ΔH, 0, 1)."""
    cfg = ArpoConfig(enabled=True, budget=10**9, initial=1, tau=0.5, beta=0.2, branch_factor=2)
    budget = BranchBudget(cfg)
    budget.start("g")
    rng = random.Random(1234)
    n = 20_000
    forks = sum(len(budget.decide("g", 0.3 + delta, 0.3, rng)) for _ in range(n))
    expected = min(1.0, max(0.0, 0.5 + 0.2 * delta))
    sigma = math.sqrt(expected * (1 - expected) / n)
    assert abs(forks / n - expected) <= max(4 * sigma, 1e-12)


def test_engine_branches_more_where_the_published_entropy_rises(qwen_tokenizer: Any) -> None:
    """Flat alternatives after tool results, certain ones on the first turn: ΔH is large under the
    published measure (branching at ~1), about 1/20 of it under the mean measure."""

    def decisions(measure: str) -> list[list[float]]:
        out = _run(
            qwen_tokenizer,
            ArpoConfig(
                enabled=True, budget=10**6, initial=8, tau=0.5, beta=0.2, entropy=measure, fill_budget=False
            ),
        )  # type: ignore[arg-type]
        return [d for t in out for d in t.metadata.get("arpo_branch_decisions", [])]

    new, old = decisions("arpo"), decisions("mean")
    vocab = len(qwen_tokenizer)
    per_token = (
        10 * (1 / 20) * math.log(20) / math.log(vocab)
    )  # 10 requested alternatives at p = 1/20, not renormalised
    assert all(
        any(d[1] == pytest.approx(n * per_token, abs=1e-9) for n in range(1, 21)) for d in new
    )  # summed over ≤ 20 tokens
    assert max(d[1] for d in new) == pytest.approx(20 * per_token, abs=1e-9)
    assert all(
        d[1] == pytest.approx(math.log(10) / math.log(vocab), abs=1e-9) for d in old
    )  # renormalised top-10, mean over tokens
    assert all(d[2] == 1 for d in new if d[1] >= 2.5)  # clip(0.5 + 0.2·ΔH) = 1: these always fork
    rate_new, rate_old = sum(d[2] for d in new) / len(new), sum(d[2] for d in old) / len(old)
    assert rate_new > 0.7 and rate_old < 0.6  # the mean measure barely moves p = 0.5


def test_budget_caps_forks() -> None:
    budget = BranchBudget(ArpoConfig(enabled=True, budget=4, initial=2, tau=1.0, beta=0.0, branch_factor=3))
    budget.start("g")
    budget.start("g")
    rng = random.Random(0)
    assert budget.decide("g", 0.5, 0.5, rng) == [2, 3]  # B-1 = 2 forks, sample indices after the initial ones
    assert budget.decide("g", 0.5, 0.5, rng) == []  # M = 4 reached
    assert budget.decide("h", None, 0.1, rng) == []  # no entropy data: no branching


def test_always_branch_fills_the_budget_with_faithful_forks(qwen_tokenizer: Any) -> None:
    CALLS["n"] = 0
    out = _run(qwen_tokenizer, ArpoConfig(enabled=True, budget=5, initial=2, tau=1.0, beta=0.2))
    assert len(out) == 5 and len({t.trajectory_id for t in out}) == 5
    assert sorted(t.sample_index for t in out) == [0, 1, 2, 3, 4] and len({t.group_id for t in out}) == 1
    by_id = {t.trajectory_id: t for t in out}
    forks = [t for t in out if t.parent_id is not None]
    assert len(forks) == 3
    for f in forks:
        parent = by_id[f.parent_id]  # type: ignore[index]
        assert f.branch_point is not None and 0 < f.branch_point < len(f.sequence_ids(0))
        assert f.sequence_ids(0)[: f.branch_point] == parent.sequence_ids(0)[: f.branch_point]
        assert f.reward == 1.0 and f.terminated and check_trajectory(f) == []
        assert "arpo_initial_entropy" in f.metadata
    # forks rebuild their environment by replaying the prefix's tool calls: every tool-calling
    # step of every trajectory (copied prefix steps included) is one real call
    assert CALLS["n"] == sum(len([s for s in t.steps if s.tool_calls]) for t in out)
    assert CALLS["n"] > 4


def test_never_branch_keeps_the_initial_rollouts_when_the_budget_is_a_ceiling(qwen_tokenizer: Any) -> None:
    out = _run(
        qwen_tokenizer,
        ArpoConfig(enabled=True, budget=16, initial=3, tau=0.0, beta=0.0, fill_budget=False),
        tasks=2,
    )
    assert len(out) == 6 and all(t.parent_id is None for t in out)


def test_groups_are_filled_to_the_budget_by_default(qwen_tokenizer: Any) -> None:
    """Published rollout: slots branching left unused are sampled fresh from the prompt."""
    out = _run(qwen_tokenizer, ArpoConfig(enabled=True, budget=8, initial=2, tau=0.0, beta=0.0), tasks=3)
    sizes: dict[str, list[int]] = {}
    for t in out:
        sizes.setdefault(t.group_id, []).append(t.sample_index)
    assert len(sizes) == 3 and all(sorted(v) == list(range(8)) for v in sizes.values())
    assert all(t.parent_id is None for t in out)  # nothing branched: the fills are fresh roots
    assert len({t.trajectory_id for t in out}) == 24


@pytest.mark.parametrize("fill", [True, False])
def test_group_sizes_with_random_branching(qwen_tokenizer: Any, fill: bool) -> None:
    out = _run(
        qwen_tokenizer,
        ArpoConfig(enabled=True, budget=8, initial=2, tau=0.5, beta=0.0, fill_budget=fill),
        tasks=6,
    )
    sizes: dict[str, int] = {}
    for t in out:
        sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
    if fill:
        assert set(sizes.values()) == {8}
    else:
        assert all(2 <= n <= 8 for n in sizes.values()) and len(set(sizes.values())) > 1


async def test_run_group_fills_to_the_budget_and_reports_group_sizes(qwen_tokenizer: Any) -> None:
    from toolgym.core.builtin import parsers as builtin

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("arpo-test", Plugin())])
    cfg = EngineConfig(max_turns=6, arpo=ArpoConfig(enabled=True, budget=6, initial=2, tau=0.0, beta=0.0))
    engine = RolloutEngine(
        registry=registry,
        policy=ModelPolicy(MockLLMBackend(qwen_tokenizer, _responder, top_logprobs=_flat), cfg),
        config=cfg,
    )
    requests = [
        r for r in plan_episodes("two-tools", num_tasks=1, group_size=2) if r.sample_index == 1
    ]  # sample 0 is stored
    out = await engine.run_group(requests, stored=[0])
    assert sorted(t.sample_index for t in out) == [1, 2, 3, 4, 5]  # 1 re-run + 4 fills: 6 with the stored one
    assert engine.stats.group_size_summary() == "group size mean 5.00 (min 5, max 5, 1 groups)"


def test_budget_on_resume_counts_what_is_stored_and_never_reuses_an_index() -> None:
    budget = BranchBudget(ArpoConfig(enabled=True, budget=6, initial=4, tau=1.0, beta=0.0, branch_factor=3))
    budget.start("g", 2)  # samples 0 and 1 are stored; 2 and 3 run again
    budget.start("g", 3)
    budget.stored("g", [0, 1, 4])  # and one fork (4) of the interrupted run
    rng = random.Random(0)
    assert budget.used("g") == 5
    assert budget.decide("g", 0.5, 0.5, rng) == [5]  # after the initial samples, skipping 4; M = 6 reached


async def test_resumed_arpo_collection_has_no_duplicate_ids(qwen_tokenizer: Any, tmp_path: Any) -> None:
    from toolgym.collect.run import CollectOptions, collect
    from toolgym.core.builtin import parsers as builtin
    from toolgym.trajectories import iter_trajectories

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("arpo-test", Plugin())])
    cfg = EngineConfig(max_turns=6, arpo=ArpoConfig(enabled=True, budget=5, initial=2, tau=1.0, beta=0.2))
    opts = CollectOptions(
        env="two-tools", out=tmp_path / "ds", episodes=2, group_size=2, engine=cfg, sandbox_backend="none"
    )

    def policy() -> ModelPolicy:
        return ModelPolicy(MockLLMBackend(qwen_tokenizer, _responder, top_logprobs=_flat), cfg)

    result = await collect(opts, registry=registry, policy=policy())
    assert (
        result.stats.group_size_summary() == "group size mean 5.00 (min 5, max 5, 2 groups)"
    )  # the collect summary's line
    first = list(iter_trajectories(opts.out))
    assert len(first) == 10  # 2 groups × budget 5
    # an interrupted run: drop an initial sample and a fork of one group
    group = first[0].group_id
    lost = {
        next(t.trajectory_id for t in first if t.group_id == group and t.sample_index == 1),
        next(t.trajectory_id for t in first if t.group_id == group and t.parent_id is not None),
    }
    data = opts.out / "trajectories.jsonl"
    data.write_text(
        "".join(
            line
            for line in data.read_text().splitlines(keepends=True)
            if not any(i in line[:400] for i in lost)
        )
    )
    await collect(opts, registry=registry, policy=policy())
    after = list(iter_trajectories(opts.out))
    ids = [t.trajectory_id for t in after]
    assert len(ids) == len(set(ids))  # nothing duplicated ...
    raw_ids = [line.split('"trajectory_id":"', 1)[1][:16] for line in data.read_text().splitlines()]
    assert len(raw_ids) == len(set(raw_ids))  # ... not even in the file
    mine = [t for t in after if t.group_id == group]
    assert {0, 1} <= {t.sample_index for t in mine}  # the lost initial sample ran again
    assert len(mine) <= 5  # and the group stayed within its budget


def test_engine_forks_carry_their_lineage_and_attribution_survives_a_dropped_branch(
    qwen_tokenizer: Any,
) -> None:
    from toolgym.training.advantages import arpo_token_advantages

    out = _run(
        qwen_tokenizer, ArpoConfig(enabled=True, budget=12, initial=2, tau=1.0, beta=0.0, fill_budget=False)
    )
    by_id = {t.trajectory_id: t for t in out}
    for t in out:
        lineage = t.metadata.get("arpo_lineage")
        if t.parent_id is None:
            assert lineage is None
            continue
        assert lineage[0] == [t.parent_id, t.branch_point]
        up = by_id[t.parent_id]
        assert lineage[1:] == up.metadata.get("arpo_lineage", [])
    middle = [t for t in out if t.parent_id is not None and any(u.parent_id == t.trajectory_id for u in out)]
    assert middle, "some fork must have forks of its own"
    # give the trajectories different rewards, then drop a branch that has branches of its own
    for k, t in enumerate(out):
        t.reward = float(k % 3)
    kept = [t for t in out if t.trajectory_id != middle[0].trajectory_id]
    adv = arpo_token_advantages(kept, mode="hard")
    # the reference: the full tree's links, the dropped branch as a placeholder without tokens
    from toolgym.training.advantages import arpo_attribution
    from toolgym.training.advantages.grpo import grpo_trajectory_advantages

    grpo = dict(zip([t.trajectory_id for t in kept], grpo_trajectory_advantages(kept), strict=True))
    pos = {t.trajectory_id: k for k, t in enumerate(out)}
    ref = arpo_attribution(
        [grpo.get(t.trajectory_id, np.nan) for t in out],
        [pos[t.parent_id] if t.parent_id else -1 for t in out],
        [t.branch_point or 0 for t in out],
        [len(t.sequence_ids(0)) if t.trajectory_id in grpo else 0 for t in out],
        mode="hard",
    )
    for t, a in zip(kept, adv, strict=True):
        np.testing.assert_allclose(
            a[0], ref[pos[t.trajectory_id]] * np.asarray(t.sequence_mask(0)), atol=1e-6
        )


def test_sampled_only_estimate_is_biased_upward_by_the_tail_entropy() -> None:
    """Without top-k, the estimate averages to the full-vocabulary entropy, above the published
    top-10 sum by the tail's share (as the module docstring says)."""
    rng = random.Random(7)
    weights = [2.0**-i for i in range(10)] + [0.02] * 40  # a peaked head and a flat tail
    z = sum(weights)
    probs = [w / z for w in weights]
    vocab = 1000
    top = [[(i, math.log(p)) for i, p in enumerate(probs[:10])]]
    published = arpo_entropy(top, 20, vocab)
    full = -sum(p * math.log(p) for p in probs) / math.log(vocab)
    draws = [
        turn_entropy(None, [math.log(probs[rng.choices(range(50), probs)[0]])], 20, vocab)
        for _ in range(20_000)
    ]
    mean = sum(d for d in draws if d is not None) / len(draws)
    assert mean == pytest.approx(full, rel=0.03)
    assert published is not None and mean > published * 1.2  # the tail's entropy is counted too
