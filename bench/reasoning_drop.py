"""What dropping earlier reasoning from history costs: prompt tokens each model call prefills, and
tokens trained on, for a template that drops it against an append-only baseline on the same
conversation and the same tokenizer: Qwen3's template against the Qwen2.5 one (``--family qwen3``),
or gpt-oss's / GLM-4.5's against the same template with history kept as sampled (``--family
gpt-oss`` / ``glm-4.5``).

The conversation: each turn the model thinks (``--think`` words), answers in ``--answer`` words,
and the environment replies with a new user turn (``--reply user``, ALFWorld/WebShop-style
observations: every one a new query, so Qwen3 drops all earlier reasoning) or a tool result
(``--reply tool``: Qwen3 keeps the reasoning of the current query's turns, nothing is re-read).
Assembled exactly as the engine does (:class:`~toolgym.core.tokens.assembly.TokenAssembler`).

    .venv/bin/python bench/reasoning_drop.py --turns 8 --think 200 [--family gpt-oss]
"""

from __future__ import annotations

import argparse
import random

from toolgym.core.llm.local.tiny import load_tiny_tokenizer, template_source
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import GenerationResult
from toolgym.trajectories.reread import prefill_sizes

WORDS = "the key is under a desk so I should open drawer one then look at the shelf and take the mug".split()


def turn_text(family: str, reasoning: str, act: str) -> str:
    if family == "glm-4.5":  # the turn ends with the next role token, where sampling stops
        return f"\n<think>{reasoning}</think>\n{act}<|user|>"
    if family == "gpt-oss":
        return f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>final<|message|>{act}"
    return f"<think>\n{reasoning}\n</think>\n\n{act}"


def baseline_template(family: str) -> str:
    """The append-only baseline: Qwen2.5's template, or gpt-oss's with nothing dropped and a final
    answer rendered in history as sampled."""
    if family == "qwen3":
        return template_source("qwen")
    if family == "glm-4.5":
        source = template_source("glm-4.5")
        kept = source.replace(
            "{%- if loop.index0 < ns.last_user and '</think>'", "{%- if false and '</think>'"
        )
        assert kept != source, "the GLM-4.5 template changed: update the baseline"
        return kept
    source = template_source("gpt-oss")
    kept = source.replace("{%- if loop.index0 < ns.last_user -%}", "{%- if false -%}")
    kept = kept.replace("{{ '<|return|>' if loop.last else '<|end|>' }}", "{{ '<|return|>' }}")
    assert kept.count("if false") == 1 and "if loop.last else" not in kept, (
        "the gpt-oss template changed: update the baseline"
    )
    return kept


def run(
    chat: ChatFormat, family: str, turns: int, think: int, answer: int, reply: str, seed: int
) -> tuple[list[int], list[int], int, int]:
    """Per call: prompt tokens and prefill tokens; then tokens trained on and sequences."""
    rng = random.Random(seed)
    asm = TokenAssembler(chat, None)
    asm.start(
        [
            {"role": "system", "content": "You are an agent in a house. Act with one command per turn."},
            {"role": "user", "content": "Task: put a clean mug on the desk."},
        ]
    )
    eos = sorted(chat.eos_token_ids)[0]
    calls: list[tuple[list[int], list[int]]] = []
    for t in range(turns):
        reasoning = " ".join(rng.choice(WORDS) for _ in range(think))
        act = " ".join(rng.choice(WORDS) for _ in range(answer))
        prompt = list(asm.prompt_ids)
        ids = chat.encode(turn_text(family, reasoning, act)) + ([] if family == "glm-4.5" else [eos])
        asm.add_completion(GenerationResult(output_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop"))
        calls.append((prompt, ids))
        if t == turns - 1:
            break
        obs = f"Turn {t}: you see a drawer, a shelf and a mug. Nothing happens."
        asm.add_messages(
            [{"role": reply, "content": obs}]
            if reply == "user"
            else [{"role": "tool", "content": obs, "tool_call_id": "abcdefghi"}]
        )
    return [len(p) for p, _ in calls], prefill_sizes(calls), asm.total_tokens, asm.sequence + 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--think", type=int, default=200, help="reasoning words per turn")
    ap.add_argument("--answer", type=int, default=10, help="answer words per turn")
    ap.add_argument("--reply", choices=["user", "tool"], default="user")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", choices=["qwen3", "gpt-oss", "glm-4.5"], default="qwen3")
    args = ap.parse_args()
    tokenizer = load_tiny_tokenizer(args.family)
    dropping = ChatFormat(tokenizer)
    baseline = ChatFormat(tokenizer, template=baseline_template(args.family))
    p_drop, f_drop, trained_drop, seqs_drop = run(
        dropping, args.family, args.turns, args.think, args.answer, args.reply, args.seed
    )
    p_base, f_base, trained_base, seqs_base = run(
        baseline, args.family, args.turns, args.think, args.answer, args.reply, args.seed
    )
    print(
        f"reasoning drop ({args.reply} replies, {args.think} reasoning words/turn, tiny-{args.family} tokenizer)"
    )
    print(
        "prompt: tokens the call is conditioned on; prefill: of those, the ones after the longest common prefix with the"
    )
    print(
        "previous call's context (what an engine with prefix caching computes); re-read: prefill dropping - prefill baseline"
    )
    print(
        f"{'turn':>4} {'prompt dropping':>16} {'prompt baseline':>16} {'prefill dropping':>17} {'prefill baseline':>17} {'re-read':>8}"
    )
    for t in range(args.turns):
        print(
            f"{t:>4} {p_drop[t]:>16} {p_base[t]:>16} {f_drop[t]:>17} {f_base[t]:>17} {f_drop[t] - f_base[t]:>8}"
        )
    extra = sum(f_drop) - sum(f_base)
    later = max(args.turns - 1, 1)
    print(
        f"prefill total: {args.family} {sum(f_drop)} vs append-only baseline {sum(f_base)}; "
        f"re-read {extra} tokens, {extra / later:.0f} per turn after the first"
    )
    print(
        f"trained tokens: {args.family} {trained_drop} in {seqs_drop} sequences vs baseline {trained_base} in {seqs_base} "
        f"({trained_drop / trained_base:.2f}x)"
    )


if __name__ == "__main__":
    main()
