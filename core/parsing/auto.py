"""``--parser auto``: the tool-call parser of a model's own format, read from its chat template.

An environment names the parser it was written for (``Env.parser``); the function-calling ones
(``hermes`` by default) assume one model family's format. A model of another family writes its
calls its own way, so a run can swap the environment's function-calling parser for the one that
matches the model's chat template: each registered parser declares ``markers`` (strings its
family's template contains), and the parser whose markers all occur in the template wins, the one
with the most marker text when several do (``qwen3_coder``'s ``<function=`` beats ``hermes``'s
``<tool_call>``). Environment-specific formats (``xml`` tags, ``env_action`` commands) are written
into the environment's prompt, not the model's template, and are kept.

Third-party parsers registered through ``toolgym_tool_parsers`` take part by setting ``markers``
and ``function_calls``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from toolgym.core.errors import ConfigError
from toolgym.core.parsing.base import ToolParser
from toolgym.core.registry import Registry

AUTO = "auto"


def detect_parser(template: str | None, parsers: Iterable[ToolParser]) -> ToolParser | None:
    """The parser whose markers all occur in ``template`` (most marker text wins), or None."""
    if not template:
        return None
    best: tuple[int, str, ToolParser] | None = None
    for parser in parsers:
        if not parser.markers or not all(m in template for m in parser.markers):
            continue
        key = (sum(len(m) for m in parser.markers), parser.name, parser)
        if best is None or key[:2] > best[:2]:
            best = key
    return None if best is None else best[2]


def choose_parser(
    choice: str, env_parser: str, template: str | None, registry: Registry
) -> ToolParser | None:
    """The parser a run should use instead of the environment's ``env_parser``, or None to keep it.

    ``choice`` is ``auto`` (detect from ``template``; only an environment whose parser is a
    function-calling one is switched) or a registered parser's name (used as given).
    """
    if choice != AUTO:
        if choice == env_parser:
            return None
        return registry.parser(choice)
    current = registry.parser(env_parser)
    if not current.function_calls:
        return None
    found = detect_parser(template, registry.parsers.values())
    if found is None or found.name == env_parser:
        return None
    return found


def with_parser(registry: Registry, env_parser: str, parser: ToolParser) -> Registry:
    """A shallow copy of ``registry`` in which the name ``env_parser`` resolves to ``parser``
    (the environment code and the engine stay as they are)."""
    if not isinstance(parser, ToolParser):
        raise ConfigError(f"{parser!r} is not a tool parser")
    view = copy.copy(registry)
    view.parsers = {**registry.parsers, env_parser: parser}
    return view


def template_of(policy: object) -> str | None:
    """The chat template a policy renders with (None for black-box chat models)."""
    chat = getattr(policy, "chat", None)
    source = getattr(chat, "source", None)
    return source if isinstance(source, str) else None
