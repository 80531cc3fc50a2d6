"""What a template that rewrites history costs: tokens each model call prefills, and tokens trained on.

When a chat template renders earlier turns differently as the conversation grows (Qwen3 and
gpt-oss drop earlier reasoning), the next model call is conditioned on a fresh render, not on the
previous sequence plus a delta. The assembler then opens a new token sequence (see
:mod:`toolgym.core.tokens.assembly`), so the trainer receives one sequence per such call, each with the
prefix that call really saw. The price:

- **prefill per call**: an inference engine with prefix caching re-reads every prompt token after
  the first one that differs from the previous call's context (its prompt and sampled ids).
  Append-only templates prefill only the new tool/environment tokens; a rewrite re-reads
  everything after the earliest dropped reasoning block.
- **trained tokens**: every sequence is a row of its own, so shared prefixes are trained (and
  their logits recomputed) once per sequence.

:func:`call_costs` measures the first per model call; :func:`trained_tokens` the second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolgym.core.trajectory import Trajectory


@dataclass(frozen=True, slots=True)
class CallCost:
    """One model call of a trajectory."""

    step: int
    """``Step.index`` of the call."""
    sequence: int
    """The token sequence the call was conditioned on."""
    prompt_tokens: int
    """Tokens the call was conditioned on (``LLMCall.prompt_len``)."""
    prefill_tokens: int
    """Of those, the ones after the longest common prefix with the previous call's context (its
    prompt and sampled ids): what an engine with prefix caching computes anew. The first call
    prefills its whole prompt."""


def call_costs(trajectory: Trajectory) -> list[CallCost]:
    """Per model call of a token-faithful trajectory, its prompt and prefill sizes (see above)."""
    calls: list[tuple[int, int, list[int], list[int]]] = []
    seqs: dict[int, list[int]] = {}
    for step in trajectory.steps:
        call = step.llm
        if call is None or call.segment < 0:
            continue
        ids = seqs.setdefault(call.sequence, trajectory.sequence_ids(call.sequence))
        calls.append(
            (
                step.index,
                call.sequence,
                ids[: call.prompt_len],
                list(trajectory.segments[call.segment].token_ids),
            )
        )
    sizes = prefill_sizes([(prompt, sampled) for _, _, prompt, sampled in calls])
    return [
        CallCost(index, seq, len(prompt), size)
        for (index, seq, prompt, _), size in zip(calls, sizes, strict=True)
    ]


def prefill_sizes(calls: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[int]:
    """For consecutive model calls given as (prompt ids, sampled ids): the prompt tokens of each
    after its longest common prefix with the previous call's prompt and sampled ids."""
    out: list[int] = []
    previous: list[int] | None = None
    for prompt, sampled in calls:
        shared = 0 if previous is None else _common_prefix(list(prompt), previous)
        out.append(len(prompt) - shared)
        previous = [*prompt, *sampled]
    return out


def trained_tokens(trajectory: Trajectory) -> int:
    """Tokens a trainer runs forward with one row per sequence (verl's ``trajectory`` layout): each
    sequence that holds a model call, up to the last sampled token in it."""
    ends: dict[int, int] = {}
    length: dict[int, int] = {}
    for seg in trajectory.segments:
        length[seg.sequence] = length.get(seg.sequence, 0) + len(seg.token_ids)
        if seg.role == "assistant":
            ends[seg.sequence] = length[seg.sequence]
    return sum(ends.values())


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
