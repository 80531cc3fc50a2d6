"""Built-in tool-call parsers, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from toolgym.core.hookspecs import hookimpl
from toolgym.core.parsing.base import EnvActionParser, HermesParser, ToolParser, XMLTagParser
from toolgym.core.parsing.families import (
    DeepSeekV31Parser,
    HarmonyParser,
    KimiK2Parser,
    Llama3JsonParser,
    MistralParser,
)
from toolgym.core.parsing.xml import Glm45Parser, PythonicParser, Qwen3CoderParser


def builtin_parsers() -> list[ToolParser]:
    """One instance of every parser toolgym ships, in registration order."""
    return [
        HermesParser(),
        XMLTagParser(),
        EnvActionParser(),
        EnvActionParser(require_tags=True),
        Llama3JsonParser(),
        MistralParser(),
        Qwen3CoderParser(),
        PythonicParser(),
        DeepSeekV31Parser(),
        KimiK2Parser(),
        HarmonyParser(),
        Glm45Parser(),
    ]


@hookimpl
def toolgym_tool_parsers() -> list[ToolParser]:
    return builtin_parsers()
