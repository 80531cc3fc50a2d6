"""``toolgym verify``: check the token-faithfulness invariants on stored trajectories.

For each token-faithful trajectory and each model call recorded in it:
- the assistant segment the call produced exists, is in the call's sequence, and is the call's output;
- the call's prompt (``prompt_len`` ids, with their sha256) is exactly the part of that sequence
  before the segment: the prompt is a prefix and the sampled ids follow it verbatim;
- the loss mask is 1 on exactly the sampled ids (assistant segments), 0 elsewhere;
- logprobs, where present, have one value per sampled id, are finite and ≤ 0; a sampling model's
  segments have them;
- every assistant segment belongs to exactly one call.
With a tokenizer, the first prompt must also be the chat template's render of the stored prompt.
Trajectories with image parts also get the image checks of :mod:`toolgym.trajectories.images`
(files against their hashes when the dataset directory is given, placeholders against image parts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.core.trajectory import Trajectory, prompt_digest

from .images import check_images


@dataclass
class Report:
    """Violations per trajectory id; an empty report means the data is trainable as recorded."""

    checked: int = 0
    skipped: int = 0
    """Trajectories not token-faithful by design (black-box chat): shape checks only."""
    violations: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, tid: str, problems: list[str]) -> None:
        if problems:
            self.violations[tid] = problems


def check_trajectory(traj: Trajectory, *, chat: Any = None, root: str | Path | None = None) -> list[str]:
    """Return the invariant violations of one trajectory (empty when it is faithful). ``root``:
    the dataset directory, whose ``images/`` the trajectory's image parts must match."""
    problems: list[str] = check_images(traj, root)
    seq_ids: dict[int, list[int]] = {}
    seg_start: list[int] = []
    last_seq = 0
    for i, seg in enumerate(traj.segments):
        if seg.sequence < last_seq:
            problems.append(f"segment {i}: sequence index goes back from {last_seq} to {seg.sequence}")
        last_seq = seg.sequence
        ids = seq_ids.setdefault(seg.sequence, [])
        seg_start.append(len(ids))
        ids.extend(seg.token_ids)
        if len(seg.loss_mask) != len(seg.token_ids):
            problems.append(f"segment {i}: {len(seg.loss_mask)} mask values for {len(seg.token_ids)} tokens")
        want = 1 if seg.role == "assistant" else 0
        if any(m != want for m in seg.loss_mask):
            problems.append(f"segment {i} ({seg.role}): loss mask must be {want} on every token")
        if seg.logprobs is not None:
            if seg.role != "assistant":
                problems.append(f"segment {i} ({seg.role}): logprobs on tokens the model did not sample")
            if len(seg.logprobs) != len(seg.token_ids):
                problems.append(f"segment {i}: {len(seg.logprobs)} logprobs for {len(seg.token_ids)} tokens")
            if any(not math.isfinite(x) or x > 1e-6 for x in seg.logprobs):
                problems.append(f"segment {i}: logprobs must be finite and ≤ 0")
        elif seg.role == "assistant" and traj.metadata.get("policy") == "model":
            problems.append(f"segment {i}: sampled by a model but has no logprobs")
    if not traj.token_faithful:
        return problems
    owned: dict[int, int] = {}
    for step in traj.steps:
        call = step.llm
        if call is None:
            problems.append(f"step {step.index}: no model call recorded")
            continue
        where = f"step {step.index}"
        if not 0 <= call.segment < len(traj.segments):
            problems.append(f"{where}: call points at segment {call.segment}, which does not exist")
            continue
        seg = traj.segments[call.segment]
        if seg.role != "assistant":
            problems.append(f"{where}: call points at a {seg.role} segment, not an assistant one")
        if seg.sequence != call.sequence:
            problems.append(f"{where}: call says sequence {call.sequence}, its segment is in {seg.sequence}")
        if call.segment in owned:
            problems.append(f"{where}: segment {call.segment} already belongs to step {owned[call.segment]}")
        owned[call.segment] = step.index
        if call.prompt_len != seg_start[call.segment]:
            problems.append(
                f"{where}: prompt of {call.prompt_len} tokens, but the sampled ids start at token "
                f"{seg_start[call.segment]} of sequence {seg.sequence}: prompt is not the prefix before them"
            )
        elif (
            call.prompt_sha256
            and prompt_digest(seq_ids[seg.sequence][: call.prompt_len]) != call.prompt_sha256
        ):
            problems.append(
                f"{where}: the stored sequence's first {call.prompt_len} tokens are not the prompt the model saw (digest differs)"
            )
        if call.completion_tokens != len(seg.token_ids):
            problems.append(
                f"{where}: model returned {call.completion_tokens} tokens, segment holds {len(seg.token_ids)}"
            )
    for i, seg in enumerate(traj.segments):
        if seg.role == "assistant" and i not in owned:
            problems.append(f"segment {i}: assistant tokens that no recorded model call produced")
    vision = traj.metadata.get("vision")
    if chat is not None and isinstance(vision, dict) and getattr(chat, "vision", None) is None:
        # a VLM's prompt holds its images' expanded tokens: render it with the recorded processor
        # (without the dataset's images the render cannot be checked; the id runs are, with them)
        chat = None if root is None else chat.with_vision(_vision(vision, root))
    if chat is not None and traj.segments and traj.prompt:
        rendered = chat.render(traj.prompt, tools=traj.tools or None, add_generation_prompt=True)
        if chat.encode(rendered) != traj.segments[0].token_ids:
            problems.append(
                "segment 0 is not the chat template's render of the stored prompt (another tokenizer or template?)"
            )
    return problems


def _vision(record: dict[str, Any], root: str | Path) -> Any:
    from toolgym.core.tokens.vision import VisionInputs, processor_from_record

    return VisionInputs(processor_from_record(dict(record["processor"])), root=root)


def verify(trajectories: Iterable[Trajectory], *, chat: Any = None, root: str | Path | None = None) -> Report:
    report = Report()
    for traj in trajectories:
        report.checked += 1
        if not traj.token_faithful:
            report.skipped += 1
        report.add(traj.trajectory_id, check_trajectory(traj, chat=chat, root=root))
    return report
