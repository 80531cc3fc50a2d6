"""Chat-template rendering with the model's own template, compiled once.

The Jinja environment mirrors the one Hugging Face ``transformers`` uses for
``apply_chat_template`` (trim/lstrip blocks, loop controls, ``tojson`` without ASCII escaping,
``raise_exception``, ``strftime_now``), so renders are identical; a test checks that on every
bundled template. Compiling once and rendering directly keeps the per-turn cost small.

Three things make a render cheaper than ``Template.render`` without changing a character of it (a
test renders every shipped family's template both ways on varied conversations and compares):
the template's globals are merged into a plain dict once, not per render (Jinja merges them from a
ChainMap on every call, a third of a short render); the tool schemas a conversation carries are
frozen once (:func:`freeze_tools`) so that ``tool | tojson`` returns the JSON text dumped the first
time instead of dumping the same schema again each turn; and ``namespace()`` is called without the
sandbox's generic checks, which are for callables a template could be handed, not Jinja's own. Encoding goes through the piece and word
caches of :mod:`toolgym.core.tokens.pieces`. For templates whose messages render locally
(:data:`LOCAL_TEMPLATES`, checked on probe conversations), the token assembler renders only a
turn's tail, not the whole history again (:meth:`ChatFormat.render_tail`). ``ChatFormat.reference = True`` turns off the render
shortcuts and the word cache: the path the fast one is tested against, and the baseline
``bench/engine_efficiency.py`` runs beside it.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any, ClassVar

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
    if type(x) is FrozenSchema and not ChatFormat.reference:
        return x.json(ensure_ascii, indent, separators, sort_keys)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class FrozenSchema(dict):  # type: ignore[type-arg]
    """A tool schema (or a mapping inside one) that is never changed after :func:`freeze_tools`
    built it, so its JSON text can be kept: templates dump each tool schema on every render.

    It renders exactly as the plain dict it copies (``json.dumps``, ``str`` and Jinja's tests treat
    a dict subclass as a dict; the template sandbox reads it as a dict)."""

    __slots__ = ("_json",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._json: dict[tuple[Any, ...], str] = {}

    def json(self, ensure_ascii: bool, indent: int | None, separators: Any, sort_keys: bool) -> str:
        """``json.dumps`` of the mapping with these arguments, dumped once per set of arguments."""
        try:
            key = (ensure_ascii, indent, separators, sort_keys)
            text = self._json.get(key)
        except TypeError:  # unhashable arguments (separators as a list): no caching
            key, text = None, None
        if text is None:
            text = json.dumps(
                self, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
            )
            if key is not None:
                self._json[key] = text
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return FrozenSchema, (dict(self),)

    def _frozen(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a frozen tool schema is not changed; freeze a changed copy instead")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _frozen  # type: ignore[assignment]


def freeze_tools(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Deep copies of ``tools`` (every mapping a :class:`FrozenSchema`, lists copied), to render a
    whole conversation with: each schema's JSON text is then dumped once, not once per turn."""
    if not tools:
        return None if tools is None else []
    return [_freeze(t) for t in tools]


def _freeze(value: Any) -> Any:
    kind = type(value)  # exact types only: a subclass may render differently, so it stays as it is
    if kind is dict:
        return FrozenSchema((k, _freeze(v)) for k, v in value.items())
    if kind is list:
        return [_freeze(v) for v in value]
    return value


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


_DICT_ATTRS = frozenset(dir(dict))
_ABSENT = object()


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
        if (kind is dict or kind is FrozenSchema) and attribute not in _DICT_ATTRS:
            value = obj.get(attribute, _ABSENT)
            return self.undefined(obj=obj, name=attribute) if value is _ABSENT else value
        # Jinja's own loop and namespace objects: public attributes are what templates read
        if (kind is LoopContext or kind is Namespace) and not attribute.startswith("_"):
            try:
                return getattr(obj, attribute)
            except AttributeError:
                pass
        return super().getattr(obj, attribute)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        # `namespace(...)`, which most chat templates call once per render: Jinja's own class, safe
        # to call and taking no context, so what Context.call would do comes down to this
        if obj is Namespace and not ChatFormat.reference:
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            return Namespace(*args, **kwargs)
        return super().call(context, obj, *args, **kwargs)


def _im_tail(messages: Sequence[Message], tool_responses: bool) -> str | None:
    """The tail render (:meth:`ChatFormat.render_tail`) of toolgym's two Qwen-markup templates in
    Python, for messages whose roles and contents are strings and that carry no structured tool
    calls (the token assembler's: the model's raw text, then tool and environment replies); None
    for anything else, which Jinja renders. ``tool_responses``: consecutive tool messages share
    one user turn of ``<tool_response>`` blocks (``qwen.jinja``) rather than each being a ``tool``
    turn (``compact_qwen.jinja``). Checked against Jinja on the probes whenever a format is made."""
    out: list[str] = []
    last = len(messages) - 1
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if type(role) is not str or type(content) is not str or m.get("tool_calls"):
            return None
        if tool_responses and role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{content}\n</tool_response>")
            if i == last or messages[i + 1].get("role") != "tool":
                out.append("<|im_end|>\n")
        else:
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


LOCAL_TEMPLATES: dict[str, Callable[[Sequence[Message]], str | None]] = {
    # core/llm/local/templates/qwen.jinja
    "7f48ce7c8ab615da1208e5ba80ae1e5fe5d98d8155c7aa95d527ffa188af53d3": partial(
        _im_tail, tool_responses=True
    ),
    # training/local/templates/compact_qwen.jinja
    "082b4a8c49593243dfd20ba76f63c5076233e77710906d0bc180811d76571dc6": partial(
        _im_tail, tool_responses=False
    ),
}
"""SHA-256 of the templates whose messages render locally, each with its tail render in Python: a
header that depends only on the tools and the first message, then one piece per message that
depends only on the message itself, on whether it is the first or the last, and on its neighbours'
roles, then the generation prompt. For them the render of a conversation that grows at its end is
the render so far with the generation prompt cut off, followed by the render of its last messages
alone (:meth:`ChatFormat.render_tail`). Each is read for that property here and checked on probe
conversations whenever a format is made (:func:`_tail_agrees`), the Python tail against Jinja's;
any other template is rendered whole every turn."""

_ANCHOR: Message = {"role": "user", "content": "."}
"""The message :meth:`ChatFormat.render_tail` renders a conversation's last messages after: their
piece then has a predecessor that is not first and not a system prompt, as in the conversation."""


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

    reference: ClassVar[bool] = False
    """Render through Jinja's ``Template.render``, dump every JSON value afresh and encode uncached
    pieces whole: the slow path the fast one is tested against (same text, same ids), and the
    benchmarks' baseline."""

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
        # what Template.render merges into every render's context: the environment's and the
        # template's globals (a ChainMap, slow to merge), then the keyword arguments
        self._globals = dict(self._template.globals)
        self._base_vars = {**self._globals, **self._base_kwargs}
        fast = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
        self._fast = fast if fast is not None and hasattr(fast, "encode") else None
        self._pieces = PieceEncoder.for_tokenizer(self._fast) if self._fast is not None else None
        self._token_texts: dict[int, str] = {}
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_token_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self.generation_prompt: str | None = None
        """The text a render with ``add_generation_prompt`` ends with, where :meth:`render_tail`
        applies (a template in :data:`LOCAL_TEMPLATES` that passed its probes); else None."""
        self._anchor_text = ""
        self._tail = LOCAL_TEMPLATES.get(hashlib.sha256(source.encode()).hexdigest())
        if self._tail is not None:
            anchor = self.render([_ANCHOR])
            prompted = self.render([_ANCHOR], add_generation_prompt=True)
            if prompted.startswith(anchor) and len(prompted) > len(anchor):
                self._anchor_text, self.generation_prompt = anchor, prompted[len(anchor) :]
                if not _tail_agrees(self):
                    self.generation_prompt = None

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
        flat = flatten_images(
            messages, self.vision.placeholder if self.vision is not None else self.image_placeholder
        )
        if ChatFormat.reference:
            return self._template.render(
                messages=flat,
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                **self._base_kwargs,
            )
        # Template.render's own steps, with the globals merged once (see the module docstring)
        template = self._template
        env = template.environment
        context = env.context_class(
            env,
            {
                **self._base_vars,
                "messages": flat,
                "tools": list(tools) if tools else None,
                "add_generation_prompt": add_generation_prompt,
            },
            template.name,
            template.blocks,
            globals=self._globals,
        )
        try:
            return env.concat(template.root_render_func(context))  # type: ignore[attr-defined]
        except Exception:
            env.handle_exception()
            raise  # handle_exception always raises; this keeps type checkers content

    def render_tail(self, messages: Sequence[Message]) -> str | None:
        """The end of a conversation's render with a generation prompt, from ``messages`` alone: an
        assistant message that is not the conversation's first and every message after it. For a
        template in :data:`LOCAL_TEMPLATES`, the conversation's render is the render of what came
        before the assistant message with the generation prompt cut off, followed by this; one
        short render instead of the whole history's. None when this format has no such shortcut
        (then render the conversation whole)."""
        if self.generation_prompt is None or ChatFormat.reference:
            return None
        text = self._tail(messages) if self._tail is not None else None
        return text if text is not None else self._render_tail(messages)

    def _render_tail(self, messages: Sequence[Message]) -> str | None:
        text = self.render([_ANCHOR, *messages], add_generation_prompt=True)
        return text[len(self._anchor_text) :] if text.startswith(self._anchor_text) else None

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._pieces is not None:
            return self._pieces.encode(text, words=not ChatFormat.reference)
        if self._fast is not None:
            return list(self._fast.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Decode for reading and parsing only; the result is never re-encoded into a trajectory."""
        if self._fast is not None:
            return self._fast.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        """The text of one token (kept: end-of-turn tokens are decoded every turn)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.decode([token_id])
        return text


_PROBE_TOOLS = freeze_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "probe",
                "description": "A probe «tool».",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            },
        }
    ]
)
_PROBE_TEXT = "héllo <|im_end|><|im_start|>assistant\n<tool_call></tool_response> 日本"
_PROBE_CALL = '<tool_call>\n{"name": "probe", "arguments": {"q": "x"}}\n</tool_call>'


def _tail_probe(chat: ChatFormat) -> bool:
    histories: list[list[Message]] = [
        [{"role": "user", "content": "task"}],
        [{"role": "system", "content": "sys"}, {"role": "user", "content": _PROBE_TEXT}],
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": f"<think>\nplan\n</think>\n\n{_PROBE_CALL}"},
            {"role": "tool", "content": "out"},
        ],
        [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "first"},
            {"role": "user", "content": ""},
        ],
    ]
    news: list[list[Message]] = [
        [{"role": "tool", "content": "result"}],
        [{"role": "tool", "content": _PROBE_TEXT}, {"role": "tool", "content": ""}],
        [{"role": "user", "content": "obs"}],
        [{"role": "user", "content": _PROBE_TEXT}, {"role": "tool", "content": "t"}],
    ]
    replies = ["\n" + _PROBE_CALL, "plain answer<|im_end|>", "", "<think>\nr\n</think>\n\nanswer"]
    gen = chat.generation_prompt or ""
    for tools in (None, _PROBE_TOOLS):
        for history in histories:
            before = chat.render(history, tools=tools, add_generation_prompt=True)
            if not before.endswith(gen):
                return False
            for reply in replies:
                for new in news:
                    turn: list[Message] = [{"role": "assistant", "content": reply}, *new]
                    whole = chat.render([*history, *turn], tools=tools, add_generation_prompt=True)
                    tail = chat._render_tail(turn)
                    if tail is None or whole != before[: len(before) - len(gen)] + tail:
                        return False
                    if chat._tail is not None and chat._tail(turn) not in (None, tail):
                        return False
    return True


_TAIL_RESULTS: dict[tuple[str, str], bool] = {}
"""Probe results per template source and template arguments (formats are made often)."""


def _tail_agrees(chat: ChatFormat) -> bool:
    """Whether :meth:`ChatFormat.render_tail` spliced onto the render so far gives the whole
    render, on probe conversations (system prompt or not, tools or not, tool and user messages
    after the model's turn, reasoning in earlier and new turns, text that looks like the
    template's own markup, empty contents)."""
    key = (chat.source, json.dumps(chat._base_kwargs, sort_keys=True, default=repr))
    agrees = _TAIL_RESULTS.get(key)
    if agrees is None:
        agrees = _TAIL_RESULTS[key] = _tail_probe(chat)
    return agrees


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
