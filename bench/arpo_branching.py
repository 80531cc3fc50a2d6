"""ARPO branching: does it follow the entropy? Branch rates by ΔH bin beside the rate the rule
``clip(p + w·ΔH, 0, 1)`` predicts, per condition, with toolgym's earlier entropy measure
(``"mean"``, the baseline) in the same run.

The task is the benchmarks' tool-use task (``bench/_common.py``: every turn calls ``lookup`` until
the episode's turn limit). The model is the tiny Qwen-style model (built locally, random weights
drawn from ``--model-seed``): at every turn it is teacher-forced on the tool-using agent's reply, so
the entropies ARPO sees are the tiny model's own top-k logprobs at the tokens a tool-using agent
emits (a random tiny model would rarely call a tool on its own). Every condition sees the same
episodes, and each decision's uniform draw is seeded by (task, sample, turn), so conditions differ
only in the entropies. Conditions (columns):

- ``mean,expected``: the earlier measure (baseline); ``expected``: the published measure, the tool
  answering as expected;
- ``surprising``: at a seeded ``--surprise-rate`` of calls the tool answers an error and noise;
- ``surpr.,top-k=|V|``: every token's whole distribution (the flattened sum is the full entropy);
- ``surpr.,peaked``: a model drawn with a larger weight scale (its top-10 holds nearly all the mass);
- ``sensitive,peaked`` / ``sensitive,flat``: a *constructed* surprise-sensitive model: after an
  error result the logits are divided by a temperature (2 and 3), as a model that did not expect
  the result would be less sure; from the peaked model and from the default one. A random-weight
  model knows nothing of errors, so this is what shows the mechanism when entropy does rise;
- ``fitted,expected`` / ``fitted,surprising``: the default model trained (``--fit-steps`` Adam steps,
  cross-entropy on the sampled tokens) on the ``expected`` column's episodes: a model that has
  learnt to expect the tool's usual answers, meeting errors and noise it was never trained on.

Rows: decisions (drawn with budget left), branch rate, ΔH mean and spread, w·std(ΔH) here and for
the same per-token entropies over a 151,936-token vocabulary, per-token top-k entropy and mass,
ΔH / predicted / seen rate after surprising and after expected tool results, lowest and highest
ΔH quintile, Pearson(ΔH, forked) and the share of the outcome's variance the entropy decides
(``toolgym.core.rollout.arpo.branching_profile``); then each condition's quintile table and the scale ΔH
needs (per-token nats) to move p.

    .venv/bin/python bench/arpo_branching.py [--tasks 48] [--surprise-rate 0.5] [--smoke]
    .venv/bin/python bench/arpo_branching.py --model toolgym-demo/warm-start   # the demo's warm start, sampling
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CALL_TEXT, BenchEnv, BenchPlugin

from toolgym import EngineConfig, EnvSpec, RolloutEngine, Trajectory, hookimpl, plan_episodes, tool
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.registry import Registry
from toolgym.core.rollout.arpo import ArpoConfig, branching_profile, fork_probability, rescale_to_vocab
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.types import GenerationRequest, GenerationResult

SURPRISE = "ERROR"


def surprising(step: int, rate: float) -> bool:
    """Whether the tool's ``step``-th answer is a surprise (seeded: same steps in every run)."""
    return random.Random(f"surprise/{step}").random() < rate


class SurpriseEnv(BenchEnv):
    """The bench task with a tool whose answers are, at a seeded ``rate`` of calls, an error followed
    by noise instead of the expected record."""

    def __init__(self, rate: float = 0.5, **kwargs: Any) -> None:
        self.rate = rate
        self.seed = 0

        @tool(name="lookup")
        async def noisy_lookup(key: str) -> str:
            """Look a key up in a small in-memory table."""
            rng = random.Random(f"noise/{self.seed}/{self.n}")
            if surprising(self.seed * 1000 + self.n, self.rate):
                noise = "".join(rng.choice("#%&*@~^|<>0123456789abcdefXYZ") for _ in range(40))
                return f"{SURPRISE}: upstream returned 502 Bad Gateway\n{noise}"
            return f"{key}: 2,102,650 (2023 estimate, record {rng.randrange(10**6)})"

        self.tools = [noisy_lookup]
        super().__init__(**kwargs)

    async def reset(self, *, seed: int, options: Mapping[str, Any] | None = None) -> Any:
        self.seed = seed
        return await super().reset(seed=seed, options=options)


class SurprisePlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("bench-surprise", SurpriseEnv)]


class TeacherForcedTiny(MockLLMBackend):
    """Replies with the scripted tool call; logprobs and top-k come from the tiny model's forward pass.

    ``surprise_temperature`` > 1 makes a *constructed* surprise-sensitive model: after a tool
    result that starts with ``ERROR`` its logits are divided by that temperature (flatter), as a
    model that did not expect the result would be less sure of its next tokens. ``stats`` collects,
    per call, the top-k ``-p·log p`` per token (nats) and the top-k mass, averaged over its first 20 tokens.
    """

    def __init__(self, model: Any, tokenizer: Any, surprise_temperature: float = 1.0) -> None:
        super().__init__(tokenizer, lambda _prompt, _i: CALL_TEXT)
        self.model, self.tokenizer, self.surprise_temperature = model, tokenizer, surprise_temperature
        self._cache: dict[tuple[int, ...], GenerationResult] = {}
        self.stats: list[tuple[float, float]] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        import torch

        base = await super().generate(request)
        key = (*request.input_ids, -1, request.sampling.top_logprobs)
        if key not in self._cache:
            ids = list(request.input_ids) + base.output_ids
            with torch.no_grad():
                logits = self.model(torch.tensor([ids])).logits[0, len(request.input_ids) - 1 : -1].float()
            if self.surprise_temperature != 1.0 and SURPRISE in self.tokenizer.decode(
                request.input_ids[-80:]
            ):
                logits = logits / self.surprise_temperature
            logp = torch.log_softmax(logits, dim=-1)
            k = max(1, request.sampling.top_logprobs)
            top_v, top_i = logp.topk(min(k, logp.shape[-1]), dim=-1)
            head = top_v[:20]
            self.stats.append(
                (float(-(head.exp() * head).sum()) / len(head), float(head.exp().sum(-1).mean()))
            )
            out = torch.tensor(base.output_ids)
            sampled = logp.gather(1, out[:, None])[:, 0].tolist()
            top = [list(zip(i.tolist(), v.tolist(), strict=True)) for i, v in zip(top_i, top_v, strict=True)]
            self._cache[key] = GenerationResult(
                output_ids=base.output_ids,
                logprobs=sampled,
                finish_reason=base.finish_reason,
                top_logprobs=top if request.sampling.top_logprobs else None,
                prompt_tokens=len(request.input_ids),
            )
        return self._cache[key]


@dataclass
class Condition:
    """One column of the table: the task, the measure and the model the branching sees."""

    name: str
    env: str = "bench"
    measure: str = "arpo"
    top_k: int = 10
    init_std: float = 0.5
    surprise_temperature: float = 1.0
    fitted: bool = False


CONDITIONS = [
    Condition("mean,expected", measure="mean"),
    Condition("expected"),
    Condition("surprising", env="bench-surprise"),
    Condition("surpr.,top-k=|V|", env="bench-surprise", top_k=0),
    Condition("surpr.,peaked", env="bench-surprise", init_std=2.0),
    Condition("sensitive,peaked", env="bench-surprise", init_std=2.0, surprise_temperature=2.0),
    Condition("sensitive,flat", env="bench-surprise", surprise_temperature=3.0),
    Condition("fitted,expected", fitted=True),
    Condition("fitted,surprising", env="bench-surprise", fitted=True),
]
"""``mean,expected`` is the baseline (the earlier measure); ``top_k=0`` asks for the whole
vocabulary (the flattened sum is then the full entropy); ``peaked``: logits of a model drawn with a
larger weight scale (its top-10 holds nearly all the mass); ``sensitive``: the constructed model that
flattens its logits after a surprise, from the peaked model (a confident model made unsure) or from
the default one (whose top-10 then holds less of the mass); ``fitted``: the default model trained
(``--fit-steps`` Adam steps) on the ``expected`` column's episodes, so that it expects the tool's
usual answers and meets errors and noise only in the surprising task."""


def fit(model: Any, trajs: list[Trajectory], steps: int, seed: int) -> Any:
    """A copy of ``model`` trained by cross-entropy on the model-sampled tokens of ``trajs``' roots."""
    import copy

    import torch

    torch.manual_seed(seed)
    fitted = copy.deepcopy(model).train()
    data = [
        (t.sequence_ids(0), [m for seg in t.segments if seg.sequence == 0 for m in seg.loss_mask])
        for t in trajs
        if t.parent_id is None
    ]
    opt = torch.optim.Adam(fitted.parameters(), lr=3e-3)
    for step in range(steps):
        ids, mask = data[step % len(data)]
        logits = fitted(torch.tensor([ids])).logits[0, :-1]
        weight = torch.tensor(mask[1:], dtype=torch.float32)
        loss = (
            torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none") * weight
        ).sum() / weight.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"fitted model: {steps} steps on {len(data)} episodes, last loss {loss.item():.3f}")
    return fitted.eval()


def registry() -> Registry:
    from toolgym.core.builtin import parsers as builtin

    return Registry.load(
        entry_points=False,
        plugins=[("parsers", builtin), ("bench", BenchPlugin()), ("surprise", SurprisePlugin())],
    )


def run(
    cond: Condition, backend: TeacherForcedTiny, tasks: int, turns: int, arpo: dict[str, Any], rate: float
) -> tuple[list[Trajectory], float]:
    top_k = cond.top_k or len(backend.tokenizer)
    cfg = EngineConfig(
        max_turns=turns,
        arpo=ArpoConfig(enabled=True, entropy=cond.measure, entropy_top_k=top_k, **arpo),
        max_live_episodes=8,
    )
    out: list[Trajectory] = []
    kwargs: dict[str, Any] = {
        "turns": turns,
        "vary": True,
        "min_turns": 2,
        **({"rate": rate} if cond.env == "bench-surprise" else {}),
    }
    engine = RolloutEngine(
        registry=registry(),
        policy=ModelPolicy(backend, cfg),
        config=cfg,
        env_kwargs=kwargs,
        on_trajectory=out.append,
    )
    t0 = time.perf_counter()
    asyncio.run(engine.run(plan_episodes(cond.env, num_tasks=tasks, group_size=arpo["initial"])))
    return out, time.perf_counter() - t0


def run_sampled(
    measure: str, model: Any, tokenizer: Any, tasks: int, arpo: dict[str, Any], env: str
) -> tuple[list[Trajectory], float]:
    """The model samples freely (temperature 0.5, as the demo's RL) on ``env`` (the demo's keychain task)."""
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.registry import get_registry

    cfg = EngineConfig(
        max_turns=5,
        max_tokens_per_turn=32,
        max_tokens_per_trajectory=640,
        seed=1,
        sampling={"temperature": 0.5},
        arpo=ArpoConfig(enabled=True, entropy=measure, **arpo),
        max_live_episodes=64,
    )
    backend = TransformersBackend(
        model, tokenizer=tokenizer, max_batch_size=64, model_name="tiny-warm-start", weight_version="0"
    )
    out: list[Trajectory] = []
    engine = RolloutEngine(
        registry=get_registry(),
        policy=ModelPolicy(backend, cfg),
        config=cfg,
        env_kwargs={"min_hops": 1, "max_hops": 3, "split": "train"},
        on_trajectory=out.append,
    )
    t0 = time.perf_counter()
    asyncio.run(engine.run(plan_episodes(env, num_tasks=tasks, group_size=arpo["initial"], seed=123_000)))
    return out, time.perf_counter() - t0


def decisions_of(trajs: list[Trajectory]) -> list[tuple[float, int, bool]]:
    """(ΔH, forks made, whether the tool result before it was a surprise) of every decision drawn with budget left."""
    out = []
    for t in trajs:
        for turn, dh, forks, room in t.metadata.get("arpo_branch_decisions", []):
            if room:
                obs = t.steps[int(turn) - 1].observation if 0 < turn <= len(t.steps) else ""
                out.append((float(dh), int(forks), SURPRISE in obs))
    return out


def summarise(
    trajs: list[Trajectory], arpo: dict[str, Any], vocab: int, stats: list[tuple[float, float]]
) -> dict[str, Any]:
    tau, beta, b = arpo["tau"], arpo["beta"], arpo["branch_factor"]
    dec = decisions_of(trajs)
    prof = branching_profile([(d, f) for d, f, _ in dec], tau, beta, b, bins=BINS)
    dhs = [d for d, _, _ in dec]
    std = statistics.pstdev(dhs)
    split = {k: [d for d in dec if d[2] == k] for k in (True, False)}

    def mean(xs: list[float]) -> float:
        return statistics.mean(xs) if xs else float("nan")

    return {
        "decisions": len(dec),
        "branch_rate": prof.rate,
        "mean_dH": mean(dhs),
        "std_dH": std,
        "w_std_dH": beta * std,
        "w_std_dH_151k": beta * rescale_to_vocab(std, vocab, REAL_VOCAB),
        "H_tok": mean([s[0] for s in stats]),
        "topk_mass": mean([s[1] for s in stats]),
        "dH_surpr": mean([d for d, _, _ in split[True]]),
        "dH_expect": mean([d for d, _, _ in split[False]]),
        "n_surpr": len(split[True]),
        "rate_surpr": mean([1.0 if f else 0.0 for _, f, _ in split[True]]),
        "rate_expect": mean([1.0 if f else 0.0 for _, f, _ in split[False]]),
        "p_surpr": mean([fork_probability(d, tau, beta, b) for d, _, _ in split[True]]),
        "p_expect": mean([fork_probability(d, tau, beta, b) for d, _, _ in split[False]]),
        "p_bin1": prof.bins[0].predicted,
        "rate_bin1": prof.bins[0].measured,
        "p_binN": prof.bins[-1].predicted,
        "rate_binN": prof.bins[-1].measured,
        "corr": prof.corr,
        "explained": prof.explained,
        "forks": sum(1 for t in trajs if t.parent_id is not None),
        "trajectories": len(trajs),
        "profile": prof,
    }


BINS = 5
REAL_VOCAB = 151_936  # Qwen2.5/Qwen3's vocabulary
FORMATS = [
    ("decisions", "{:.0f}"),
    ("branch_rate", "{:.1%}"),
    ("mean_dH", "{:+.3f}"),
    ("std_dH", "{:.3f}"),
    ("w_std_dH", "{:.3f}"),
    ("w_std_dH_151k", "{:.3f}"),
    ("H_tok", "{:.3f}"),
    ("topk_mass", "{:.3f}"),
    ("n_surpr", "{:.0f}"),
    ("dH_surpr", "{:+.3f}"),
    ("dH_expect", "{:+.3f}"),
    ("p_surpr", "{:.1%}"),
    ("rate_surpr", "{:.1%}"),
    ("p_expect", "{:.1%}"),
    ("rate_expect", "{:.1%}"),
    ("p_bin1", "{:.1%}"),
    ("rate_bin1", "{:.1%}"),
    ("p_binN", "{:.1%}"),
    ("rate_binN", "{:.1%}"),
    ("corr", "{:+.3f}"),
    ("explained", "{:.3f}"),
    ("forks", "{:.0f}"),
    ("trajectories", "{:.0f}"),
    ("wall_s", "{:.1f}"),
]
LEGEND = """w_std_dH: w·std(ΔH), how far the entropy term moves p; _151k: the same per-token entropies over a 151,936-token vocabulary
H_tok: top-k Σ -p·log p per token (nats), each turn's first 20 tokens; topk_mass: their mean probability mass in the top-k
dH_/p_/rate_surpr|expect: decisions right after a surprising (error + noise) or an expected tool result: mean ΔH,
  the fork probability the rule predicts, the rate seen; bin1/binN: lowest/highest ΔH quintile, predicted and seen
corr: Pearson(ΔH, forked); explained: Var(p_i)/(p̄(1-p̄)), the share of the branching outcome the entropy decides (0 = random at p)"""


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    names = list(rows)
    width = max(16, *(len(n) + 2 for n in names))
    print(f"{'':16s}" + "".join(f"{n:>{width}s}" for n in names))
    for key, fmt in FORMATS:
        print(f"{key:16s}" + "".join(f"{fmt.format(rows[n][key]):>{width}s}" for n in names))
    print(LEGEND)
    for name in names:
        print(f"\n{name}: branch rate by ΔH quintile (predicted clip(p + w·ΔH) vs measured ± binomial s.e.)")
        for k, b in enumerate(rows[name]["profile"].bins):
            print(
                f"  bin {k + 1}  ΔH [{b.lo:+.3f}, {b.hi:+.3f}]  n={b.n:4d}  predicted {b.predicted:6.1%}  measured {b.measured:6.1%} ± {b.stderr:.1%}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--surprise-rate",
        type=float,
        default=0.5,
        help="fraction of tool calls answered with an error and noise in the surprising task",
    )
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument(
        "--fit-steps",
        type=int,
        default=60,
        help="training steps of the 'fitted' model on the expected episodes",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="a trained model directory (OUT/warm-start of `toolgym demo`): it samples freely on --env instead of being teacher-forced",
    )
    parser.add_argument(
        "--env", default="keychain", help="with --model: the tool-use task it samples on (the demo's)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="two tasks, small groups (checks the bench runs)"
    )
    args = parser.parse_args()
    import torch

    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.training.local.models import fresh_model, load_tokenizer

    torch.set_num_threads(1)
    arpo = {
        "budget": 16,
        "initial": 8,
        "tau": 0.5,
        "beta": 0.2,
        "branch_factor": 2,
    }  # the published M, N, p, w, B
    tasks = args.tasks
    if args.smoke:
        tasks, arpo = 2, {**arpo, "budget": 6, "initial": 3}
    rows: dict[str, dict[str, Any]] = {}
    head = f"{tasks} tasks, M={arpo['budget']} N={arpo['initial']} p={arpo['tau']} w={arpo['beta']} B={arpo['branch_factor']}"
    if args.model is not None:
        from transformers import AutoModelForCausalLM

        model, tokenizer = (
            AutoModelForCausalLM.from_pretrained(str(args.model)).float().eval(),
            load_tokenizer(args.model),
        )
        print(f"ARPO branching on {args.env}, model {args.model} sampling at temperature 0.5, {head}")
        for measure in ("mean", "arpo"):
            trajs, wall = run_sampled(measure, model, tokenizer, tasks, arpo, args.env)
            rows[measure] = {**summarise(trajs, arpo, len(tokenizer), []), "wall_s": wall}
        print_table(rows)
        return
    model_dir = ensure_tiny_model("qwen")
    tokenizer = load_tokenizer(model_dir)
    models: dict[tuple[float, bool], Any] = {}
    runs: dict[str, list[Trajectory]] = {}
    print(
        f"ARPO branching on the tool-use task, tiny qwen model (|V| = {len(tokenizer)}) teacher-forced on a tool-calling "
        f"reply, {head}; surprising task: {args.surprise_rate:.0%} of tool calls answer an error and noise"
    )
    for cond in CONDITIONS:
        key = (cond.init_std, cond.fitted)
        if key not in models:
            base = models.get((cond.init_std, False)) or fresh_model(
                model_dir, seed=args.model_seed, init_std=cond.init_std
            )
            models[key] = (
                fit(base, runs["expected"], args.fit_steps, args.model_seed) if cond.fitted else base
            )
        backend = TeacherForcedTiny(models[key], tokenizer, cond.surprise_temperature)
        trajs, wall = run(cond, backend, tasks, args.turns, arpo, args.surprise_rate)
        runs[cond.name] = trajs
        rows[cond.name] = {**summarise(trajs, arpo, len(tokenizer), backend.stats), "wall_s": wall}
    print_table(rows)
    print_scale(arpo, len(tokenizer))


def print_scale(arpo: dict[str, Any], vocab: int) -> None:
    """What ΔH takes to move p, in per-token nats, for this vocabulary and a real-size one."""
    need = (1 - arpo["tau"]) / arpo["beta"]  # ΔH that takes p from tau to 1
    print(
        f"\nscale: p goes from {arpo['tau']:.0%} to 100% at ΔH = {need:.2f}, a change of the summed top-10 entropy of "
        f"{need:.2f}·log|V| nats over 20 tokens, i.e. per token on average:"
    )
    for v in (vocab, REAL_VOCAB):
        print(
            f"  |V| = {v:>7d}: {need * math.log(v) / 20:.2f} nats/token (the top-10 measure is at most "
            f"20·log 10/log|V| = {20 * math.log(10) / math.log(v):.2f}); w·ΔH per 0.1 nat/token of change: {arpo['beta'] * 2.0 / math.log(v):.3f}"
        )


if __name__ == "__main__":
    main()
