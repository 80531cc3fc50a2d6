"""ARPO branching: how often tool steps fork, and the mean ΔH, under the published entropy measure
(``entropy="arpo"``, the default) and toolgym's earlier one (``"mean"``, the baseline), same run.

Rows: ``decisions`` (tool steps where a branch was drawn with budget left), ``branch_rate`` (the
fraction of them that forked), ``mean_dH`` / ``std_dH`` (ΔH = H_t - H_initial), ``std_p`` (spread of
the branching probability over decisions: zero means branching at a constant ``p``, i.e. random),
``p_low_dH`` / ``p_high_dH`` and ``rate_low_dH`` / ``rate_high_dH`` (mean probability and observed
rate in the lower and upper halves of the decisions ranked by ΔH).

The task is the benchmarks' tool-use task (``bench/_common.py``: every turn calls ``lookup`` until
the episode's turn limit). The model is the tiny Qwen-style model (built locally, random weights
drawn from ``--model-seed``, logits scaled by ``--init-std``): at every turn it is teacher-forced
on the tool-using agent's reply, so the entropies ARPO sees are the tiny model's own top-k
logprobs at the tokens a tool-using agent emits (a random tiny model would rarely call a tool on
its own). Both measures see exactly the same episodes and logprobs; only the measure differs.

    .venv/bin/python bench/arpo_branching.py [--tasks 8] [--smoke]
    .venv/bin/python bench/arpo_branching.py --model toolgym-demo/warm-start   # the demo's warm start, sampling
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CALL_TEXT, bench_registry

from toolgym import EngineConfig, RolloutEngine, Trajectory, plan_episodes
from toolgym.core.arpo import ArpoConfig
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.policy import ModelPolicy
from toolgym.core.types import GenerationRequest, GenerationResult


class TeacherForcedTiny(MockLLMBackend):
    """Replies with the scripted tool call; logprobs and top-k come from the tiny model's forward pass."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        super().__init__(tokenizer, lambda _prompt, _i: CALL_TEXT)
        self.model = model
        self._cache: dict[tuple[int, ...], GenerationResult] = {}

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        import torch

        base = await super().generate(request)
        key = (*request.input_ids, -1, request.sampling.top_logprobs)
        if key not in self._cache:
            ids = list(request.input_ids) + base.output_ids
            with torch.no_grad():
                logits = self.model(torch.tensor([ids])).logits[0, len(request.input_ids) - 1 : -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            k = max(1, request.sampling.top_logprobs)
            top_v, top_i = logp.topk(k, dim=-1)
            out = torch.tensor(base.output_ids)
            sampled = logp.gather(1, out[:, None])[:, 0].tolist()
            top = [list(zip(i.tolist(), v.tolist(), strict=True)) for i, v in zip(top_i, top_v, strict=True)]
            self._cache[key] = GenerationResult(output_ids=base.output_ids, logprobs=sampled, finish_reason=base.finish_reason,
                                                top_logprobs=top if request.sampling.top_logprobs else None,
                                                prompt_tokens=len(request.input_ids))
        return self._cache[key]


def run(measure: str, model: Any, tokenizer: Any, tasks: int, turns: int, arpo: dict[str, Any]) -> tuple[list[Trajectory], float]:
    cfg = EngineConfig(max_turns=turns, arpo=ArpoConfig(enabled=True, entropy=measure, **arpo), max_live_episodes=8)
    out: list[Trajectory] = []
    engine = RolloutEngine(registry=bench_registry(), policy=ModelPolicy(TeacherForcedTiny(model, tokenizer), cfg), config=cfg,
                           env_kwargs={"turns": turns, "vary": True, "min_turns": 2}, on_trajectory=out.append)
    t0 = time.perf_counter()
    asyncio.run(engine.run(plan_episodes("bench", num_tasks=tasks, group_size=arpo["initial"])))
    return out, time.perf_counter() - t0


def run_sampled(measure: str, model: Any, tokenizer: Any, tasks: int, arpo: dict[str, Any], env: str) -> tuple[list[Trajectory], float]:
    """The model samples freely (temperature 0.5, as the demo's RL) on ``env`` (the demo's keychain task)."""
    from toolgym.core.llm.transformers_backend import TransformersBackend
    from toolgym.core.registry import get_registry

    cfg = EngineConfig(max_turns=5, max_tokens_per_turn=32, max_tokens_per_trajectory=640, seed=1,
                       sampling={"temperature": 0.5}, arpo=ArpoConfig(enabled=True, entropy=measure, **arpo), max_live_episodes=64)
    backend = TransformersBackend(model, tokenizer=tokenizer, max_batch_size=64, model_name="tiny-warm-start", weight_version="0")
    out: list[Trajectory] = []
    engine = RolloutEngine(registry=get_registry(), policy=ModelPolicy(backend, cfg), config=cfg,
                           env_kwargs={"min_hops": 1, "max_hops": 3, "split": "train"}, on_trajectory=out.append)
    t0 = time.perf_counter()
    asyncio.run(engine.run(plan_episodes(env, num_tasks=tasks, group_size=arpo["initial"], seed=123_000)))
    return out, time.perf_counter() - t0


def _halves(decisions: list[list[float]], tau: float, beta: float) -> dict[str, float]:
    """Branching probability and observed rate in the lower and upper halves of ΔH."""
    ranked = sorted(decisions, key=lambda d: d[1])
    half = len(ranked) // 2
    out: dict[str, float] = {}
    for name, part in (("low", ranked[:half]), ("high", ranked[half:])):
        out[f"p_{name}_dH"] = statistics.mean(min(1.0, max(0.0, tau + beta * d[1])) for d in part) if part else float("nan")
        out[f"rate_{name}_dH"] = sum(1 for d in part if d[2] > 0) / len(part) if part else float("nan")
    return out


def summarise(trajs: list[Trajectory], tau: float, beta: float) -> dict[str, float]:
    decisions = [d for t in trajs for d in t.metadata.get("arpo_branch_decisions", []) if d[3]]  # budget left at the draw
    sizes: dict[str, int] = {}
    for t in trajs:
        sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
    return {
        "decisions": len(decisions),
        "branch_rate": sum(1 for d in decisions if d[2] > 0) / len(decisions) if decisions else float("nan"),
        "mean_dH": statistics.mean(d[1] for d in decisions) if decisions else float("nan"),
        "std_dH": statistics.pstdev(d[1] for d in decisions) if decisions else float("nan"),
        "std_p": statistics.pstdev(min(1.0, max(0.0, tau + beta * d[1])) for d in decisions) if decisions else float("nan"),
        **_halves(decisions, tau, beta),
        "forks": sum(1 for t in trajs if t.parent_id is not None),
        "trajectories": len(trajs),
        "mean_group": statistics.mean(sizes.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--init-std", type=float, default=0.5, help="weight scale of the random tiny model (larger: peakier logits)")
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument("--model", type=Path, default=None,
                        help="a trained model directory (OUT/warm-start of `toolgym demo`): it samples freely on --env instead of being teacher-forced")
    parser.add_argument("--env", default="keychain", help="with --model: the tool-use task it samples on (the demo's)")
    parser.add_argument("--smoke", action="store_true", help="two tasks, small groups (checks the bench runs)")
    args = parser.parse_args()
    import torch

    from toolgym.core.llm.tiny import ensure_tiny_model
    from toolgym.training.local.models import fresh_model, load_tokenizer

    torch.set_num_threads(1)
    if args.model is not None:
        from transformers import AutoModelForCausalLM

        model, tokenizer = AutoModelForCausalLM.from_pretrained(str(args.model)).float().eval(), load_tokenizer(args.model)
    else:
        model_dir = ensure_tiny_model("qwen")
        model, tokenizer = fresh_model(model_dir, seed=args.model_seed, init_std=args.init_std), load_tokenizer(model_dir)
    arpo = {"budget": 16, "initial": 8, "tau": 0.5, "beta": 0.2, "branch_factor": 2}  # the published M, N, p, w, B
    tasks = args.tasks
    if args.smoke:
        tasks, arpo = 2, {**arpo, "budget": 6, "initial": 3}
    what = f"{args.env}, model {args.model} sampling at temperature 0.5" if args.model else f"tiny qwen model (init_std {args.init_std}), teacher-forced"
    print(f"ARPO branching on the tool-use task ({what}), {tasks} tasks, "
          f"M={arpo['budget']} N={arpo['initial']} p={arpo['tau']} w={arpo['beta']} B={arpo['branch_factor']}")
    rows = {}
    for measure in ("mean", "arpo"):
        if args.model is not None:
            trajs, wall = run_sampled(measure, model, tokenizer, tasks, arpo, args.env)
        else:
            trajs, wall = run(measure, model, tokenizer, tasks, args.turns, arpo)
        rows[measure] = {**summarise(trajs, arpo["tau"], arpo["beta"]), "wall_s": wall}
    print(f"{'':28s}{'baseline: mean (before)':>26s}{'published: arpo (after)':>26s}")
    for key, fmt in [("decisions", "{:.0f}"), ("branch_rate", "{:.1%}"), ("mean_dH", "{:+.4f}"), ("std_dH", "{:.4f}"), ("std_p", "{:.4f}"), ("p_low_dH", "{:.1%}"), ("p_high_dH", "{:.1%}"), ("rate_low_dH", "{:.1%}"), ("rate_high_dH", "{:.1%}"), ("forks", "{:.0f}"),
                     ("trajectories", "{:.0f}"), ("mean_group", "{:.2f}"), ("wall_s", "{:.1f}")]:
        print(f"{key:28s}{fmt.format(rows['mean'][key]):>26s}{fmt.format(rows['arpo'][key]):>26s}")
    p_mean = min(1.0, max(0.0, arpo["tau"] + arpo["beta"] * rows["mean"]["mean_dH"]))
    p_arpo = min(1.0, max(0.0, arpo["tau"] + arpo["beta"] * rows["arpo"]["mean_dH"]))
    print(f"{'clip(p + w·mean ΔH)':28s}{p_mean:>26.1%}{p_arpo:>26.1%}")
    print("std_p: spread of the per-decision branching probability clip(p + w·ΔH), the part the entropy drives")


if __name__ == "__main__":
    main()
