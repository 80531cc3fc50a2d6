"""Token-faithful assembly of a multi-turn episode.

The prompt is the chat template's render of the first messages, tokenized once. After that the
sequence only grows by appending: the model's sampled ids verbatim (loss mask 1, with logprobs),
and, for each tool or environment message, the *delta* of the template render — the text the
template adds after what is already in the sequence — tokenized on its own (loss mask 0).
Sampled ids are never decoded and re-encoded; decoded text is kept for reading and parsing.

If the template does not reproduce the history byte for byte (it dropped earlier reasoning,
trimmed the model's text, reordered something), the delta is undefined. That is detected and the
episode either continues in a new token sequence (rendered afresh) or is marked untrainable,
according to ``on_rewrite``; it is never silently patched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgym.core.tokens.chat import ChatFormat, freeze_tools
from toolgym.core.tokens.images import image_refs
from toolgym.core.trajectory import Segment, SegmentRole, int32_bytes
from toolgym.core.types import GenerationResult, Message

OnRewrite = Literal["new_sequence", "untrainable"]


@dataclass(slots=True)
class _Seg:
    sequence: int
    role: SegmentRole
    token_ids: list[int]
    logprobs: list[float] | None = None
    text: str = ""


@dataclass(slots=True)
class Completion:
    """What ``add_completion`` recorded for one model call."""

    segment: int
    text: str
    """The turn's sampled text without the end-of-turn token: what the parser reads."""
    sequence: int
    prompt_len: int


@dataclass
class TokenAssembler:
    chat: ChatFormat
    tools: Sequence[dict[str, Any]] | None = None
    on_rewrite: OnRewrite = "new_sequence"

    messages: list[Message] = field(default_factory=list)
    segments: list[_Seg] = field(default_factory=list)
    sequence: int = 0
    untrainable_reason: str | None = None
    rewrites: list[str] = field(default_factory=list)
    sequence_images: list[list[str]] = field(default_factory=list)
    """Per token sequence, the image references its ids stand for, in order (one image-token run
    or placeholder each): what a VLM was given with each call, recorded for training and verify."""
    _ids: list[int] = field(default_factory=list)
    _digest: Any = field(default_factory=hashlib.sha256)
    _text: str = ""
    _turn_start: int = 0
    """Offset in ``_text`` where the current assistant turn's content begins."""
    _content_end: int = 0
    """Offset in ``_text`` where the sampled content ends (an end-of-turn token may follow)."""
    _in_turn: bool = False
    _render_tools: list[dict[str, Any]] | None = None
    """``tools`` frozen for rendering (their JSON dumped once, not every turn; see ``freeze_tools``)."""

    def __post_init__(self) -> None:
        self._render_tools = freeze_tools(self.tools)

    # -- building ------------------------------------------------------------------------------

    def start(self, messages: Sequence[Message]) -> None:
        """Render and tokenize the first prompt (sequence 0)."""
        self.messages = [dict(m) for m in messages]
        self._open_sequence(role="prompt", first=True)

    def restart(self, messages: Sequence[Message]) -> None:
        """Begin a new sequence from a freshly rendered prompt (history-window environments)."""
        self.messages = [dict(m) for m in messages]
        self._open_sequence(role="prompt", first=False)

    def _open_sequence(self, role: SegmentRole, first: bool) -> None:
        text = self.chat.render(self.messages, tools=self._render_tools, add_generation_prompt=True)
        ids = self.chat.encode(text)
        if not first:
            self.sequence += 1
        self._ids = list(ids)
        self._digest = hashlib.sha256()
        self._digest.update(int32_bytes(ids))
        self._text = text
        self._turn_start = self._content_end = len(text)
        self._in_turn = False
        self.segments.append(_Seg(self.sequence, role, ids, None, text))
        self.sequence_images.append(image_refs(self.messages))

    def _append_ids(self, ids: list[int]) -> None:
        self._ids.extend(ids)
        self._digest.update(int32_bytes(ids))

    @property
    def prompt_digest(self) -> str:
        """``prompt_digest(prompt_ids)``, kept up to date as tokens are appended (O(new tokens))."""
        return self._digest.copy().hexdigest()[:32]

    @property
    def prompt_ids(self) -> list[int]:
        """The current sequence: exactly what the next model call is conditioned on."""
        return self._ids

    @property
    def image_refs(self) -> list[str]:
        """The image references of the current sequence, in the order of their image tokens: a
        VLM call's images."""
        return self.sequence_images[-1] if self.sequence_images else []

    def add_completion(self, result: GenerationResult) -> Completion:
        """Append the sampled ids verbatim (mask 1) and record the assistant message."""
        ids = list(result.output_ids)
        if result.logprobs is not None and len(result.logprobs) != len(ids):
            raise ValueError(f"backend returned {len(result.logprobs)} logprobs for {len(ids)} tokens")
        prompt_len = len(self._ids)
        eos_len = 1 if ids and ids[-1] in self.chat.eos_token_ids else 0
        content = self.chat.decode(ids[: len(ids) - eos_len]) if ids else ""
        eos_text = self.chat.token_text(ids[-1]) if eos_len else ""
        if not self._in_turn:
            self._turn_start = len(self._text)
            self.messages.append({"role": "assistant", "content": ""})
        self._text += content
        self._content_end = len(self._text)
        self._text += eos_text
        self.messages[-1]["content"] = self._text[self._turn_start : self._content_end]
        self._in_turn = True
        self._append_ids(ids)
        self.segments.append(
            _Seg(
                self.sequence,
                "assistant",
                ids,
                list(result.logprobs) if result.logprobs is not None else None,
                content + eos_text,
            )
        )
        return Completion(len(self.segments) - 1, content, self.sequence, prompt_len)

    def add_inline(self, text: str) -> None:
        """Append text verbatim inside the model's current turn (mask 0), e.g. ``<information>``.

        The turn stays open: the next completion continues the same assistant message.
        """
        if not self._in_turn:
            raise RuntimeError("add_inline needs an open assistant turn")
        if self._content_end != len(self._text):
            # the model already closed its turn with an end-of-turn token: reopening it would
            # put text after that token, which no template renders
            raise RuntimeError("cannot append inside a turn the model already ended")
        ids = self.chat.encode(text)
        self._text += text
        self._content_end = len(self._text)
        self.messages[-1]["content"] = self._text[self._turn_start : self._content_end]
        self._append_ids(ids)
        self.segments.append(_Seg(self.sequence, "inline", ids, None, text))

    def add_messages(self, new: Sequence[Message]) -> None:
        """Close the model's turn and append tool/environment messages plus the next generation
        prompt, as the template's delta (mask 0). Detects templates that rewrite history.

        One render per turn: the template's render of the whole conversation (with the new
        messages and a generation prompt) must begin with exactly the text of the sequence so
        far — the prompt, the model's sampled text and any end-of-turn token it sampled. What
        follows is the delta. If it does not begin so, the template rewrote history.
        """
        new = [dict(m) for m in new]
        turn_at = len(self.messages) - 1  # the model's message, when a turn is open
        self.messages = [*self.messages, *new]
        nxt = self._spliced(turn_at) if self._in_turn else None
        if nxt is None or not nxt.startswith(self._text):
            nxt = self.chat.render(self.messages, tools=self._render_tools, add_generation_prompt=True)
        if not nxt.startswith(self._text):
            sampled = self._text[: self._content_end] if self._in_turn else self._text
            if self._in_turn and nxt.startswith(sampled):
                reason = (
                    "the chat template ends the assistant turn differently from the token the model sampled"
                )
            elif (
                self._in_turn
                and len(self._text) > self._turn_start
                and not nxt.startswith(self._text[: self._turn_start])
            ):
                reason = "the chat template rewrites earlier turns when a new message is added"
            elif self._in_turn:
                reason = "the chat template re-renders the model's output differently"
            else:
                reason = "the chat template rewrites earlier turns when a new message is added"
            self._rewrite(reason)
            return
        delta = nxt[len(self._text) :]
        ids = self.chat.encode(delta)
        self._append_ids(ids)
        self._text = nxt
        self._turn_start = self._content_end = len(nxt)
        self._in_turn = False
        self.segments.append(_Seg(self.sequence, _segment_role(new), ids, None, delta))
        self.sequence_images[-1] = [*self.sequence_images[-1], *image_refs(new)]

    def _spliced(self, turn_at: int) -> str | None:
        """The whole conversation's render with a generation prompt, without rendering its history
        again, where the template allows (:meth:`ChatFormat.render_tail`): the text so far up to
        the generation prompt that opened the model's turn, then the render of the model's message
        and the new ones. None where it does not (then the caller renders the conversation)."""
        gen = self.chat.generation_prompt
        start = self._turn_start - len(gen) if gen is not None else -1
        if gen is None or turn_at < 1 or start < 0 or not self._text.startswith(gen, start):
            return None
        tail = self.chat.render_tail(self.messages[turn_at:])
        return None if tail is None else self._text[:start] + tail

    def _rewrite(self, reason: str) -> None:
        note = f"turn {sum(1 for s in self.segments if s.role == 'assistant')}: {reason}"
        self.rewrites.append(note)
        if self.on_rewrite == "untrainable" and self.untrainable_reason is None:
            self.untrainable_reason = f"chat template rewrote history ({note})"
        self._open_sequence(role="prompt", first=False)

    def fork(self) -> TokenAssembler:
        """An independent copy of the current state: appending to one never changes the other.

        Segments are shared (they are never changed once appended); everything that grows or is
        rewritten is copied.
        """
        other = TokenAssembler(self.chat, self.tools, self.on_rewrite)
        other._render_tools = self._render_tools  # frozen: never changed, so shared
        other.messages = [dict(m) for m in self.messages]
        other.segments = list(self.segments)
        other.sequence = self.sequence
        other.untrainable_reason = self.untrainable_reason
        other.rewrites = list(self.rewrites)
        other.sequence_images = list(self.sequence_images)  # its lists are replaced, never changed
        other._ids = list(self._ids)
        other._digest = self._digest.copy()
        other._text = self._text
        other._turn_start, other._content_end, other._in_turn = (
            self._turn_start,
            self._content_end,
            self._in_turn,
        )
        return other

    # -- output --------------------------------------------------------------------------------

    @property
    def total_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    def to_segments(self) -> list[Segment]:
        out = []
        for s in self.segments:
            mask_value = 1 if s.role == "assistant" else 0
            out.append(
                Segment.model_construct(
                    sequence=s.sequence,
                    role=s.role,
                    token_ids=s.token_ids,
                    loss_mask=[mask_value] * len(s.token_ids),
                    logprobs=s.logprobs,
                    text=s.text,
                )
            )
        return out


def _segment_role(messages: Sequence[Message]) -> SegmentRole:
    roles = {m.get("role") for m in messages}
    if roles <= {"tool", "ipython", "function"} and roles:
        return "tool"
    if roles == {"user"}:
        return "user"
    return "env"
