"""From a toolgym ``Trajectory`` to the rows a verl trainer trains on. Pure Python: no verl import.

A row is what verl calls one agent-loop output: ``prompt_ids`` (what the model was conditioned
on), ``response_ids`` with ``response_mask`` (1 on model-sampled ids, 0 on tool and environment
ids) and ``response_logprobs`` (0.0 where the mask is 0). Two layouts:

- ``trajectory``: one row per token sequence. ``prompt_ids`` are the sequence's ids before its
  first model call; the response is everything after them (sampled ids and the rendered
  tool/environment deltas between them), with trailing mask-0 ids dropped. A trajectory whose
  environment keeps one conversation has one sequence, so one row; a history-window environment
  or a template rewrite starts new sequences, so more rows.
- ``step``: one row per model call (GiGPO's layout, as in verl-agent). ``prompt_ids`` are the ids
  that call was conditioned on (the first ``prompt_len`` ids of its sequence) and the response is
  exactly the ids it sampled.

Either way the rows are token-faithful: the ids are those of the trajectory, never re-tokenized.
Each row carries its GiGPO/ARPO metadata (:class:`RowMeta`); a step's tokens lie in exactly one
row, at ``StepSpan.start:end`` of its response.

A vision-language model's trajectory (``metadata.vision``: expanded image tokens, see
:mod:`toolgym.core.tokens.vision`) gives rows with ``images``: the references of the images whose
image-token runs are in the row's ids, in order, taken from the sequence's
``metadata.vision.sequence_images``. verl re-processes them with its processor and must find one
run of pad tokens per image, each as long as that image's grid: so a response cut to
``max_response_len`` is cut before an image it would split, and an image token the model sampled
itself (no picture behind it) makes the trajectory untrainable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from toolgym.core.errors import ConfigError
from toolgym.core.trajectory import Trajectory
from toolgym.training.filters import classify

Layout = Literal["trajectory", "step"]
LAYOUTS: tuple[str, ...] = ("trajectory", "step")
META_KEY = "toolgym"
"""The key of :class:`RowMeta` (as a dict) in an ``AgentLoopOutput.extra_fields``."""


@dataclass(slots=True)
class StepSpan:
    """One step of the trajectory, placed in a row."""

    index: int
    """``Step.index``: position of the step in its trajectory (0-based)."""
    start: int
    """Offset of the step's first sampled token in the row's ``response_ids``."""
    end: int
    """One past its last token (``start == end`` if truncation cut it out of the row)."""
    anchor: str
    """``Step.anchor``: equal anchors within a group form GiGPO step groups."""
    reward: float
    """``Step.step_reward``: the immediate reward of the step."""
    valid: bool
    """``Step.valid``: False for an invalid action (GiGPO's invalid-action penalty)."""


@dataclass(slots=True)
class RowMeta:
    """What the advantage estimators need to know about a row (``extra_fields["toolgym"]``)."""

    trajectory_id: str
    """Rows with the same id belong to one episode."""
    group_id: str
    """toolgym's group id (task × seed); within verl the group is the prompt's ``uid``."""
    episode_reward: float
    """``Trajectory.reward``: the episode return R(τ)."""
    sequence: int
    """Index of the token sequence the row comes from."""
    offset: int
    """Position of ``response_ids[0]`` in its token sequence (= ``len(prompt_ids)``)."""
    sequence_len: int
    """Length of that whole token sequence (ARPO's shared-prefix arithmetic counts in it)."""
    steps: list[StepSpan]
    """The steps whose sampled tokens are in this row, in order."""
    row: int
    """Position of the row among the trajectory's rows."""
    rows: int
    """How many rows the trajectory produced."""
    parent_id: str | None = None
    """ARPO: the trajectory this one branched from."""
    branch_point: int | None = None
    """ARPO: leading tokens of sequence 0 shared with the parent."""
    truncated_tokens: int = 0
    """Response tokens dropped to fit ``max_response_len``."""
    outcome: str = "ok"
    """The trajectory's episode-filter class (:func:`toolgym.training.filters.classify`)."""
    lineage: list[list[Any]] | None = None
    """ARPO: ``Trajectory.metadata["arpo_lineage"]`` of a fork, ``[[parent_id, branch_point],
    [grandparent_id, parent's branch_point], …]`` up to the root; it places ancestors absent from
    the batch in hard attribution (see :mod:`toolgym.training.advantages.arpo`). None for a root."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RowMeta:
        values = dict(data)
        values["steps"] = [StepSpan(**s) for s in values.get("steps", [])]
        return cls(**values)


@dataclass(slots=True)
class Row:
    """One agent-loop output, before it becomes verl's ``AgentLoopOutput``."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    """One per response id (0.0 where the mask is 0); None when the trajectory has no logprobs."""
    meta: RowMeta
    num_turns: int = 0
    """Messages in the row's conversation (user, assistant, tool), as verl counts turns."""
    extra: dict[str, Any] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    """``sha256:`` references of the images whose image-token runs are in ``prompt_ids`` then
    ``response_ids``, one per run, in order (empty for text trajectories)."""


def trajectory_rows(
    trajectory: Trajectory,
    layout: Layout = "trajectory",
    *,
    max_prompt_len: int | None = None,
    max_response_len: int | None = None,
) -> list[Row]:
    """The rows of ``trajectory`` in ``layout`` (see the module docstring).

    ``max_prompt_len`` / ``max_response_len`` are verl's ``rollout.prompt_length`` and
    ``response_length``. A prompt longer than its limit raises ``ConfigError`` (cutting it would
    train on a context the model never saw); a response longer than its limit is cut at the end,
    as verl's own agent loops do, and ``RowMeta.truncated_tokens`` says by how much.

    Raises ``ConfigError`` when the trajectory is not trainable (error, untrainable, not
    token-faithful) or has no model call with token data.
    """
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown row layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    if not trajectory.trainable:
        why = trajectory.status_reason or (
            "not token-faithful" if not trajectory.token_faithful else trajectory.status
        )
        raise ConfigError(f"trajectory {trajectory.trajectory_id!r} is not trainable: {why}")
    calls = [(i, s) for i, s in enumerate(trajectory.steps) if s.llm is not None and s.llm.segment >= 0]
    if not calls:
        raise ConfigError(
            f"trajectory {trajectory.trajectory_id!r} has no model call with token data; nothing to train on"
        )
    lengths = [0] * trajectory.num_sequences
    offsets = []
    for seg in trajectory.segments:
        offsets.append(lengths[seg.sequence])
        lengths[seg.sequence] += len(seg.token_ids)
    has_logprobs = all(s.logprobs is not None for s in trajectory.segments if s.role == "assistant")
    rows = (
        _step_rows(trajectory, calls, offsets, lengths, has_logprobs)
        if layout == "step"
        else _sequence_rows(trajectory, calls, offsets, lengths, has_logprobs)
    )
    vision = trajectory.metadata.get("vision")
    pad_id = int(vision["image_token_id"]) if isinstance(vision, dict) else None
    for k, row in enumerate(rows):
        row.meta.row, row.meta.rows = k, len(rows)
        if max_prompt_len is not None and len(row.prompt_ids) > max_prompt_len:
            raise ConfigError(
                f"trajectory {trajectory.trajectory_id!r}: a prompt of {len(row.prompt_ids)} tokens exceeds "
                f"rollout.prompt_length={max_prompt_len}; raise data.max_prompt_length or shorten the environment's prompt"
            )
        if max_response_len is not None and len(row.response_ids) > max_response_len:
            _truncate(
                row, max_response_len if pad_id is None else _image_safe_cut(row, max_response_len, pad_id)
            )
        if pad_id is not None:
            assert isinstance(vision, dict)
            row.images = _row_images(trajectory, row, vision, pad_id)
    return rows


def _runs(ids: list[int], pad_id: int) -> list[tuple[int, int]]:
    """(start, end) of each run of ``pad_id`` in ``ids``."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != pad_id:
            continue
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _image_safe_cut(row: Row, limit: int, pad_id: int) -> int:
    """``limit``, or less so that no image-token run is split: the cut then falls before the
    vision-start marker of the image it would have split (the token before its run)."""
    for start, end in _runs(row.response_ids, pad_id):
        if start < limit < end:
            return max(start - 1, 0)
    return limit


def _row_images(traj: Trajectory, row: Row, vision: dict[str, Any], pad_id: int) -> list[str]:
    """The images of ``row``: one per image-token run of its ids, from its sequence's images."""
    if any(t == pad_id for t, m in zip(row.response_ids, row.response_mask, strict=True) if m):
        raise ConfigError(
            f"trajectory {traj.trajectory_id!r}: the model sampled image tokens (id {pad_id}) with no "
            "picture behind them; a vision model cannot train on that row"
        )
    runs = len(_runs([*row.prompt_ids, *row.response_ids], pad_id))
    per_sequence = vision.get("sequence_images") or []
    known = per_sequence[row.meta.sequence] if row.meta.sequence < len(per_sequence) else []
    if runs > len(known):
        raise ConfigError(
            f"trajectory {traj.trajectory_id!r}: sequence {row.meta.sequence} has {runs} image-token runs "
            f"but records {len(known)} images; the record is corrupt"
        )
    return [str(ref) for ref in known[:runs]]


def _sequence_rows(
    traj: Trajectory, calls: list[tuple[int, Any]], offsets: list[int], lengths: list[int], has_logprobs: bool
) -> list[Row]:
    rows = []
    for seq in sorted({step.llm.sequence for _, step in calls}):
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        for seg in traj.segments:
            if seg.sequence != seq:
                continue
            ids.extend(seg.token_ids)
            mask.extend(seg.loss_mask)
            logprobs.extend(seg.logprobs if seg.logprobs is not None else [0.0] * len(seg.token_ids))
        mine = [(i, step) for i, step in calls if step.llm.sequence == seq]
        prompt_len = mine[0][1].llm.prompt_len
        if any(mask[:prompt_len]):
            raise ConfigError(
                f"trajectory {traj.trajectory_id!r}: sequence {seq} has sampled tokens before its first call's prompt ends; the record is corrupt"
            )
        end = len(mask)
        while end > prompt_len and not mask[end - 1]:
            end -= 1
        spans = [_span(traj, i, step, offsets[step.llm.segment] - prompt_len) for i, step in mine]
        n_messages = sum(1 for seg in traj.segments if seg.sequence == seq and seg.role != "prompt")
        rows.append(
            Row(
                prompt_ids=ids[:prompt_len],
                response_ids=ids[prompt_len:end],
                response_mask=mask[prompt_len:end],
                response_logprobs=logprobs[prompt_len:end] if has_logprobs else None,
                meta=_meta(traj, seq, prompt_len, lengths[seq], spans),
                num_turns=1 + n_messages,
            )
        )
    return rows


def _step_rows(
    traj: Trajectory, calls: list[tuple[int, Any]], offsets: list[int], lengths: list[int], has_logprobs: bool
) -> list[Row]:
    rows = []
    seq_ids: dict[int, list[int]] = {}
    for i, step in calls:
        seg = traj.segments[step.llm.segment]
        if seg.role != "assistant" or seg.sequence != step.llm.sequence:
            raise ConfigError(
                f"trajectory {traj.trajectory_id!r} step {i} points at a {seg.role!r} segment of sequence {seg.sequence}; the record is corrupt"
            )
        if offsets[step.llm.segment] != step.llm.prompt_len:
            raise ConfigError(
                f"trajectory {traj.trajectory_id!r} step {i}: its sampled ids do not follow its prompt of {step.llm.prompt_len} tokens; the record is corrupt"
            )
        if seg.sequence not in seq_ids:
            seq_ids[seg.sequence] = traj.sequence_ids(seg.sequence)
        rows.append(
            Row(
                prompt_ids=seq_ids[seg.sequence][: step.llm.prompt_len],
                response_ids=list(seg.token_ids),
                response_mask=list(seg.loss_mask),
                response_logprobs=list(seg.logprobs) if has_logprobs and seg.logprobs is not None else None,
                meta=_meta(
                    traj, seg.sequence, step.llm.prompt_len, lengths[seg.sequence], [_span(traj, i, step, 0)]
                ),
                num_turns=2,
            )
        )
    return rows


def _span(traj: Trajectory, i: int, step: Any, start: int) -> StepSpan:
    size = len(traj.segments[step.llm.segment].token_ids)
    return StepSpan(
        index=step.index,
        start=start,
        end=start + size,
        anchor=step.anchor,
        reward=float(step.step_reward),
        valid=bool(step.valid),
    )


def _meta(traj: Trajectory, seq: int, offset: int, seq_len: int, spans: list[StepSpan]) -> RowMeta:
    return RowMeta(
        trajectory_id=traj.trajectory_id,
        group_id=traj.group_id,
        episode_reward=float(traj.reward),
        sequence=seq,
        offset=offset,
        sequence_len=seq_len,
        steps=spans,
        row=0,
        rows=1,
        parent_id=traj.parent_id,
        branch_point=traj.branch_point,
        outcome=classify(traj),
        lineage=_lineage(traj),
    )


def _lineage(traj: Trajectory) -> list[list[Any]] | None:
    """The fork's ARPO lineage as JSON-friendly ``[id, branch_point]`` pairs (None: a root, or none recorded)."""
    raw = traj.metadata.get("arpo_lineage") if traj.parent_id is not None else None
    return [[str(a), int(b)] for a, b in raw] if raw else None


def _truncate(row: Row, limit: int) -> None:
    row.meta.truncated_tokens = len(row.response_ids) - limit
    row.response_ids = row.response_ids[:limit]
    row.response_mask = row.response_mask[:limit]
    if row.response_logprobs is not None:
        row.response_logprobs = row.response_logprobs[:limit]
    for span in row.meta.steps:
        span.start, span.end = min(span.start, limit), min(span.end, limit)
