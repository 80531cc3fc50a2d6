"""Chat-template rendering with the model's own template, compiled once.

The Jinja environment mirrors the one Hugging Face ``transformers`` uses for
``apply_chat_template`` (trim/lstrip blocks, loop controls, ``tojson`` without ASCII escaping,
``raise_exception``, ``strftime_now``), so renders are identical; a test checks that on every
bundled template. Compiling once and rendering directly keeps the per-turn cost small.
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import flatten_images, placeholder_for
from toolgym.core.tokens.pieces import PieceEncoder
from toolgym.core.tokens.vision import VisionInputs
from toolgym.core.types import Message, tool_call_id


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


_DICT_ATTRS = frozenset(dir(dict))


class _TemplateSandbox(ImmutableSandboxedEnvironment):
    """The sandbox HF uses for chat templates (they are code from model repositories), with its
    per-access safety checks memoised: they depend only on the object's type and the attribute
    name, and they dominate render time on the rollout hot path."""

    _safe: dict[tuple[type, str], bool] = {}

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        key = (type(obj), attr)
        safe = self._safe.get(key)
        if safe is None:
            safe = self._safe[key] = super().is_safe_attribute(obj, attr, value)
        return safe

    def getattr(self, obj: Any, attribute: str) -> Any:
        # `message.role` on a dict: Jinja tries the attribute first, then the item. A dict has no
        # attribute of that name, so going straight to the item (or to undefined, for a missing
        # key like `message.tool_calls`) gives the same answer without raising two exceptions.
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRS:
            if attribute in obj:
                return obj[attribute]
            return self.undefined(obj=obj, name=attribute)
        # Jinja's own loop and namespace objects: public attributes are what templates read
        if (kind is LoopContext or kind is Namespace) and not attribute.startswith("_"):
            try:
                return getattr(obj, attribute)
            except AttributeError:
                pass
        return super().getattr(obj, attribute)


@lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    env = _TemplateSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


class ChatFormat:
    """Renders conversations with a tokenizer's chat template and tokenizes rendered text.

    ``encode`` never adds special tokens: the template writes BOS and friends itself. Image parts
    in message contents are rendered as ``image_placeholder`` (see ``toolgym.core.tokens.images``).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        image_placeholder: str | None = None,
        vision: VisionInputs | None = None,
    ) -> None:
        source = template or getattr(tokenizer, "chat_template", None)
        if isinstance(source, dict):  # some tokenizers carry several named templates
            source = source.get("tool_use") or source.get("default")
        if not source:
            raise ConfigError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat template; "
                "pass one with --chat-template FILE"
            )
        self.tokenizer = tokenizer
        self.image_placeholder = image_placeholder or placeholder_for(tokenizer)
        """The text each image part becomes before the template renders (recorded in trajectories)."""
        self.vision = vision
        """A VLM's image tokens: when set, each image part renders as its expanded run of image
        tokens (as the model's processor expands it), so the encoded ids are the ids the model sees."""
        self.source: str = source
        self._template = compile_template(source)
        special = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            value = getattr(tokenizer, key, None)
            if value is not None:
                special[key] = str(value)
        self._base_kwargs = {**special, **(template_kwargs or {})}
        fast = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
        self._fast = fast if fast is not None and hasattr(fast, "encode") else None
        self._pieces = PieceEncoder.for_tokenizer(self._fast) if self._fast is not None else None
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_token_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))

    def with_vision(self, vision: VisionInputs | None) -> ChatFormat:
        """This format (same template, tokenizer and encoder) with ``vision``'s image tokens."""
        other = copy.copy(self)
        other.vision = vision
        return other

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        return self._template.render(
            messages=flatten_images(
                messages, self.vision.placeholder if self.vision is not None else self.image_placeholder
            ),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            **self._base_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._pieces is not None:
            return self._pieces.encode(text)
        if self._fast is not None:
            return list(self._fast.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Decode for reading and parsing only; the result is never re-encoded into a trajectory."""
        if self._fast is not None:
            return self._fast.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id])


def with_tool_call_ids(messages: Sequence[Message], calls: Sequence[Any]) -> list[Message]:
    """Copies of ``messages`` where each ``tool`` message carries the ``tool_call_id`` of the call it
    answers (OpenAI format): the k-th tool message answers the k-th call of ``calls`` (objects with
    an ``id``, e.g. :class:`~toolgym.core.types.ToolCall`). A tool message that already has an id
    keeps it; one with no call to answer (an error about an invalid action) gets an id made from
    its content, so templates that require the field (Mistral's, raising without one) render it.
    """
    out: list[Message] = []
    k = 0
    for m in messages:
        m = dict(m)
        if m.get("role") == "tool":
            if not m.get("tool_call_id"):
                call_id = getattr(calls[k], "id", "") if k < len(calls) else ""
                m["tool_call_id"] = call_id or tool_call_id(str(m.get("content", "")), k)
            k += 1
        out.append(m)
    return out
